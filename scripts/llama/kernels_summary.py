#!/usr/bin/env python3
"""The summary table of scripts/gpu/kernels-run.sh: Thaw's kernels (LlamaKernelBench's JSON) beside PyTorch's
(torch_kernels.py's JSON) on the same shapes, and the JUnit verdicts from the test log.
Usage: kernels_summary.py THAW.json TORCH.json [TESTS.txt]   (a missing file is reported, not fatal)
"""
import json
import os
import re
import sys


def load(path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"(cannot read {path}: {e})")
        return None


def main():
    thaw = load(sys.argv[1] if len(sys.argv) > 1 else None)
    torch = load(sys.argv[2] if len(sys.argv) > 2 else None)
    tests = sys.argv[3] if len(sys.argv) > 3 else None
    print("=" * 110)
    print(f"SUMMARY  thaw: {thaw['device'] if thaw else 'no results'}  |  torch: "
          f"{(torch['device'] + ' torch ' + torch['torch']) if torch else 'no results'}")
    t_res = thaw["results"] if thaw else []
    p_res = torch["results"] if torch else []

    def anchor(section, **key):
        for r in p_res:
            if r["section"] == section and all(r.get(k) == v for k, v in key.items()):
                return r
        return None

    print("\nProducts (bf16 8B, fp16 GPT-2-large): the tile LlamaKernels picks, the fastest Thaw kernel, cuBLAS")
    print(f"{'product':22s} {'M':>5s} | {'picked':18s} {'ms':>8s} {'TF/s':>6s} | {'fastest':18s} {'ms':>8s} "
          f"{'TF/s':>6s} | {'cuBLAS ms':>9s} {'TF/s':>6s} | {'picked/cuBLAS':>13s}")
    groups = {}
    for r in t_res:
        if r["section"] == "product":
            groups.setdefault((r["what"], r["M"], r["epilogue"]), []).append(r)
    for (what, m, epi), rs in groups.items():
        picked = next((r for r in rs if r.get("picked")), rs[0])
        fastest = min(rs, key=lambda r: r["ms"])
        base = what.replace("+swiglu", "")
        a = anchor("product", what=base, M=m)
        ratio = f"{picked['ms'] / a['ms']:.2f}x" if a else "-"
        bad = [r["kernel"] for r in rs if r["check"] != "ok"]
        print(f"{what:22s} {m:5d} | {picked['kernel'][6:]:18s} {picked['ms']:8.4f} {picked['tflops']:6.1f} | "
              f"{fastest['kernel'][6:]:18s} {fastest['ms']:8.4f} {fastest['tflops']:6.1f} | "
              f"{(a['ms'] if a else float('nan')):9.4f} {(a['tflops'] if a else float('nan')):6.1f} | {ratio:>13s}"
              + (f"  CHECK FAILED: {', '.join(bad)}" if bad else ""))

    print("\nPrefill attention (32/8 heads, D 128, causal): llama_flash_attention vs sdpa")
    for r in (r for r in t_res if r["section"] == "prefill"):
        a = anchor("prefill", tokens=r["tokens"])
        print(f"  {r['tokens']:6d} tokens  thaw {r['ms']:9.3f} ms {r['tflops']:6.1f} TF/s | "
              + (f"sdpa {a['ms']:9.3f} ms {a['tflops']:6.1f} TF/s ({a['kernel']}) | thaw/sdpa {r['ms'] / a['ms']:.2f}x"
                 if a else "sdpa -") + ("" if r["check"] == "ok" else f"  CHECK FAILED: {r['check']}"))

    print("\nDecode attention (split-KV + combine) vs sdpa")
    for r in (r for r in t_res if r["section"] == "decode"):
        a = anchor("decode", context=r["context"], rows=r["rows"])
        print(f"  context {r['context']:6d} rows {r['rows']}  thaw {r['ms'] * 1e3:8.1f} us ({r['splits']:2d} splits, "
              f"{r['gbps']:5.0f} GB/s) | " + (f"sdpa {a['ms'] * 1e3:8.1f} us | thaw/sdpa {r['ms'] / a['ms']:.2f}x"
                                              if a else "sdpa -")
              + ("" if r["check"] == "ok" else f"  CHECK FAILED: {r['check']}"))

    if thaw:
        n = len(t_res)
        print(f"\nKernel checks: {n - thaw['failures']} of {n} ok" + ("" if thaw["failures"] == 0 else
                                                                  f", {thaw['failures']} FAILED (see bench.txt)"))
    if tests and os.path.exists(tests):
        text = open(tests, errors="replace").read()
        count = lambda what: sum(int(x) for x in re.findall(r"\[\s*(\d+) tests " + what + r"\s*\]", text))
        not_run = [l.strip("= \n") for l in text.splitlines() if l.startswith("== ") and "not run" in l]
        print(f"JUnit (kernels vs twins, instrumented kernels, function profiling): {count('successful')} "
              f"successful, {count('failed')} failed, {count('aborted')} aborted (no GPU?), {count('skipped')} skipped"
              + (f"; NOT RUN: {'; '.join(not_run)}" if not_run else ""))
        for line in text.splitlines():
            if "instrumentation overhead" in line or "gpu profiling overhead" in line:
                print("  " + line.strip())
        fails = [l.strip() for l in text.splitlines() if "✘" in l or "[X]" in l]
        for l in fails[:15]:
            print("  FAILED " + l)
    print("=" * 110)


if __name__ == "__main__":
    main()
