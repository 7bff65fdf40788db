#!/usr/bin/env python3
"""The summary table of scripts/gpu/kernels-run.sh: Thaw's kernels (LlamaKernelBench's JSON) beside PyTorch's
(torch_kernels.py's JSON) on the same shapes, and the JUnit verdicts from the test log. Then, for setting
LlamaKernels' choices from this run: the product tile that won at each shape, the rules of gemm-tiles.json
(dev.thaw.examples.llama.kernels.GemmTiles) refitted to the winners, and the flash prefill entry that won at each
length (LlamaKernels.FLASH_WIDE_FROM_ROWS).
Usage: kernels_summary.py THAW.json TORCH.json [TESTS.txt]   (a missing file is reported, not fatal)
"""
import json
import math
import os
import re
import sys

TILES_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "functions-examples", "src", "main",
                          "resources", "dev", "thaw", "examples", "llama", "gemm-tiles.json")
GEMV_MAX_ROWS = 8
NEVER = 1 << 30


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

    print("\nPrefill attention (32/8 heads, D 128, causal): the flash entry LlamaKernels picks, the other, sdpa")
    for r in (r for r in t_res if r["section"] == "prefill"):
        a = anchor("prefill", tokens=r["tokens"])
        name = r["kernel"].replace("llama_flash_attention", "flash")
        print(f"  {r['tokens']:6d} tokens  {name + (' (picked)' if r.get('picked', True) else ''):18s} "
              f"{r['ms']:9.3f} ms {r['tflops']:6.1f} TF/s | "
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
        choices(thaw)
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


def dims(entry):
    m = re.search(r"_(\d+)x(\d+)$", entry)
    return (int(m.group(1)), int(m.group(2))) if m else None


def blocks(entry, m, n, epilogue):
    rows, cols = dims(entry)
    col_tiles = -(-(n // 2) // (cols // 2)) if epilogue == "SWIGLU" else -(-n // cols)
    return -(-m // rows) * col_tiles


def pick(rules, m, n, epilogue, sms):
    for tile, from_rows, waves in rules:
        if m >= from_rows and blocks(tile, m, n, epilogue) >= waves * sms:
            return tile
    return rules[-1][0]


def cost(rules, shapes, sms):
    """Sum over the measured shapes of (picked tile's time / fastest tile's time): 1.0 per shape at best."""
    total = 0.0
    for (m, n, epi), times in shapes.items():
        t = times.get(pick(rules, m, n, epi, sms))
        total += (t if t is not None else 10 * max(times.values())) / min(times.values())
    return total


def fit(rules, shapes, sms):
    """Coordinate descent over each rule's fromRows and minWaves (the last rule stays the catch-all)."""
    froms = sorted({GEMV_MAX_ROWS + 1, NEVER} | {2 ** k + 1 for k in range(3, 14)} | {m for (m, _, _) in shapes})
    waves = [0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
    best = cost(rules, shapes, sms)
    improved = True
    while improved:
        improved = False
        for i in range(len(rules) - 1):
            for f in froms:
                for w in waves:
                    trial = rules[:i] + [(rules[i][0], f, w)] + rules[i + 1:]
                    c = cost(trial, shapes, sms)
                    if c < best - 1e-9:
                        best, rules, improved = c, trial, True
    return [r for r in rules[:-1] if r[1] < NEVER] + rules[-1:], best


def choices(thaw):
    """The winners of this run, and LlamaKernels' rules refitted to them."""
    res = thaw["results"]
    sms = thaw.get("multiprocessors", 132)
    shapes, names = {}, {}
    for r in res:
        if r["section"] == "product" and r["check"] == "ok" and dims(r["kernel"]) and r["M"] > GEMV_MAX_ROWS \
                and ("llama_gemm_" in r["kernel"] or "llama_wgmma_" in r["kernel"]):
            shapes.setdefault((r["M"], r["N"], r["epilogue"]), {})[r["kernel"]] = r["ms"]
            names.setdefault((r["M"], r["N"], r["epilogue"]), r["what"])
    if not shapes:
        return
    print("\nProduct tile that wins at each shape (how much slower the runner-up is):")
    by_m = {}
    for key, times in sorted(shapes.items()):
        ranked = sorted(times, key=times.get)
        by_m.setdefault(key[0], []).append(f"{names[key].split(' ', 1)[1]} {ranked[0][6:]}"
                                            + (f" (+{times[ranked[1]] / times[ranked[0]] - 1:.0%})"
                                               if len(ranked) > 1 else ""))
    for m, wins in sorted(by_m.items()):
        print(f"  M={m:5d}: " + "; ".join(wins))
    wgmma = any("llama_wgmma_" in k for times in shapes.values() for k in times)
    key = "wgmma" if wgmma else "mma.sync"
    try:
        with open(TILES_JSON) as f:
            current = [(r["tile"], r["fromRows"], r["minWaves"]) for r in json.load(f)[key]]
    except (OSError, ValueError, KeyError) as e:
        print(f"  (cannot read the current rules from {TILES_JSON}: {e})")
        return
    measured = {k for times in shapes.values() for k in times}
    current = [r for r in current if r[0] in measured] or [(min(measured, key=lambda e: dims(e)[0]), 9, 0)]
    # Every measured tile is a candidate, largest first; the current catch-all stays last.
    rest = sorted(measured - {r[0] for r in current}, key=lambda e: -dims(e)[0] * dims(e)[1])
    start = current[:-1] + [(t, NEVER, 1.0) for t in rest] + current[-1:]
    start.sort(key=lambda r: (r is current[-1], -dims(r[0])[0] * dims(r[0])[1]))
    before = cost(current, shapes, sms)
    rules, after = fit(start, shapes, sms)
    n = len(shapes)
    print(f"Rules \"{key}\" of gemm-tiles.json: picked/fastest summed over the {n} shapes is {before / n:.3f} per shape "
          f"now, {after / n:.3f} with these ({sms} SMs):")
    print("  " + json.dumps([{"tile": t, "fromRows": f, "minWaves": w} for t, f, w in rules]))


if __name__ == "__main__":
    main()
