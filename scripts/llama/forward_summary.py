#!/usr/bin/env python3
"""The summary of scripts/gpu/forward-run.sh: the whole Llama forward on one checkpoint folder, Thaw (LlamaCompare's
--out JSON) beside PyTorch's modes (hf_bench.py's JSONs), batch 1: prefill ms by prompt length, decode ms/token by
context, and Thaw's correctness against transformers (logits and greedy ids).
Usage: forward_summary.py THAW.json [HF_BENCH.json ...]   (a missing or unreadable file is reported, not fatal)
"""
import sys

from kernels_summary import load

MODES = ("eager", "sdpa", "compile", "static-compile")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    thaw = load(sys.argv[1]) or {}
    if not thaw:
        print(f"(no Thaw results in {sys.argv[1]})")
    torch_results, device, versions = [], None, []
    for path in sys.argv[2:]:
        doc = load(path)
        if not doc:
            print(f"(no PyTorch results in {path})")
        else:
            torch_results += doc.get("results", [])
            device = device or doc.get("device")
            versions.append(f"torch {doc.get('torch')} transformers {doc.get('transformers', '?')}")
    timing = thaw.get("timing_ms", {})
    prefill = {int(k): v for k, v in timing.get("prefill_ms_by_tokens", {}).items()}
    decode = {int(k): v for k, v in timing.get("decode_ms_per_token_by_context", {}).items()}

    def torch_value(mode, what, key, n, field):
        for r in torch_results:
            if r.get("mode") == mode and r.get("what") == what and r.get(key) == n:
                return r.get(field), r.get("error")
        return None, None

    runs = {r["mode"]: r for r in torch_results if r.get("what") == "run"}
    print("=" * 110)
    print(f"WHOLE FORWARD, batch 1, bf16  |  thaw: {thaw.get('device', 'no results')}  |  torch: {device or 'no results'}"
          + (f" ({versions[0]})" if versions else ""))
    print(f"model: {thaw.get('model', '?')}, {thaw.get('layers', '?')} layers, "
          f"{thaw.get('parameters', 0) / 1e9:.2f}B parameters; thaw init {thaw.get('init_ms', float('nan')):.0f} ms")

    def cell(v, err):
        return f"{v:14.2f}" if isinstance(v, (int, float)) else (f"{'error':>14s}" if err else f"{'-':>14s}")

    def row(label, ours, values):
        best = min((v for v, _ in values if isinstance(v, (int, float))), default=None)
        ratio = f"{ours / best:8.2f}x" if isinstance(ours, (int, float)) and best else "       -"
        print(f"  {label:12s} {cell(ours, None)} | " + " ".join(cell(v, e) for v, e in values) + f" | {ratio}")

    print("\nprefill ms (prompt pass + head; thaw also emits one token)")
    print(f"  {'tokens':12s} {'thaw':>14s} | " + " ".join(f"{m:>14s}" for m in MODES) + " | thaw/best")
    lengths = sorted(set(prefill) | {r["tokens"] for r in torch_results if r.get("what") == "prefill"})
    for n in lengths:
        row(f"{n:6d}", prefill.get(n), [torch_value(m, "prefill", "tokens", n, "ms") for m in MODES])
    print("\ndecode ms/token (after a prompt of that many tokens)")
    print(f"  {'context':12s} {'thaw':>14s} | " + " ".join(f"{m:>14s}" for m in MODES) + " | thaw/best")
    contexts = sorted(set(decode) | {r["context"] for r in torch_results if r.get("what") == "decode"})
    for c in contexts:
        row(f"{c:6d}", decode.get(c), [torch_value(m, "decode", "context", c, "ms_per_token") for m in MODES])
    for m in MODES:
        r = runs.get(m)
        print(f"  torch {m:15s} " + (f"{r['seconds']:.0f} s, {r['status']}" if r else "not run"))
    errors = [r for r in torch_results if r.get("error")]
    for r in errors[:8]:
        print(f"  torch {r['mode']} {r['what']} {r.get('tokens', r.get('context'))}: {r['error']}")

    print("\nthaw against transformers (same folder, same prompts)")
    for c in thaw.get("checks", []):
        if c["check"] == "forward_logits":
            print(f"  logits seq {c['seq']}: rel L2 {c['rel_l2']:.4g}"
                  + (f" (thaw vs fp32 {c['thaw_rel_l2_vs_fp32']:.4g}, hf vs fp32 {c['hf_rel_l2_vs_fp32']:.4g})"
                     if "thaw_rel_l2_vs_fp32" in c else "")
                  + f", argmax {'same' if c['same_argmax'] else 'gap %.3g' % c['argmax_gap']}: "
                  + ("PASS" if c["pass"] else "FAIL"))
        else:
            print(f"  greedy ids seq {c['seq']}: {c.get('verdict', 'PASS' if c['pass'] else 'FAIL')}")
    print("RESULT: " + ("PASS" if thaw.get("pass") else "FAIL" if thaw else "no thaw results"))
    print("=" * 110)


if __name__ == "__main__":
    main()
