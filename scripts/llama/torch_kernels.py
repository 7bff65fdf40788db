#!/usr/bin/env python3
"""PyTorch anchors for LlamaKernelBench (run on the GPU host, same run): the same shapes through cuBLAS and sdpa.

  products   torch.matmul(x, w.t()) in bf16 (cuBLAS) for Llama-3.1-8B's qkv 4096->6144, o 4096->4096,
             gate_up 4096->28672, down 14336->4096 at each --rows, and GPT-2-large's (fp16) at 512 rows
  prefill    scaled_dot_product_attention, causal, 32 query / 8 key-value heads, D 128, the flash backend
             (enable_gqa; where this torch lacks it, K and V expanded to 32 heads before timing)
  decode     the same for one query row (and 4 rows at 2000) against a context of each --decode length
Times are CUDA-event medians of warm calls, as LlamaKernelBench's. Writes --out JSON.
Usage: torch_kernels.py --out torch.json [--rows 16,128,512,2000,8000] [--prefill ...] [--decode ...]
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F


def timed(fn):
    fn()
    fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    ms, total = [], 0.0
    while len(ms) < 5 or (total < 40 and len(ms) < 30):
        start.record()
        fn()
        end.record()
        end.synchronize()
        t = start.elapsed_time(end)
        ms.append(t)
        total += t
    return statistics.median(ms)


def sdpa_flash(q, k, v, causal):
    """The flash backend with GQA; the fallbacks say which one ran."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        def run():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        return run, "flash, enable_gqa"
    except (RuntimeError, TypeError, ImportError) as e:
        reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
    rep = q.shape[1] // k.shape[1]
    ke, ve = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)
        def run():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)
        return run, f"flash, K/V expanded ({reason})"
    except (RuntimeError, TypeError, ImportError):
        return (lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)), \
            f"default backend, K/V expanded ({reason})"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--rows", default="16,128,512,2000,8000")
    p.add_argument("--prefill", default="512,2000,8000,32000")
    p.add_argument("--decode", default="16,2000,8000,32000")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch")
    ints = lambda s: [int(x) for x in s.split(",") if x.strip()]
    dev = torch.device("cuda")
    torch.manual_seed(0)
    results = []

    def product(what, m, n, k, dtype):
        x = torch.randn(m, k, device=dev, dtype=dtype)
        w = torch.randn(n, k, device=dev, dtype=dtype) / k ** 0.5
        ms = timed(lambda: torch.matmul(x, w.t()))
        flops = 2.0 * m * n * k
        results.append(dict(section="product", what=what, kernel="torch.matmul (cuBLAS)", M=m, N=n, K=k, ms=ms,
                            tflops=flops / ms / 1e9))
        print(f"product {what:20s} M={m:5d} N={n:5d} K={k:5d} torch.matmul {ms:9.4f} ms "
              f"{flops / ms / 1e9:7.1f} TFLOP/s", flush=True)
        del x, w

    for name, n, k in (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)):
        for m in ints(a.rows) + [1]:
            product("8b " + name, m, n, k, torch.bfloat16)
    for name, n, k in (("qkv", 3840, 1280), ("fc", 5120, 1280), ("proj", 1280, 5120)):
        product("gpt2-large " + name, 512, n, k, torch.float16)

    hq, hkv, d = 32, 8, 128
    for t in ints(a.prefill):
        q = torch.randn(1, hq, t, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, hkv, t, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, hkv, t, d, device=dev, dtype=torch.bfloat16)
        run, how = sdpa_flash(q, k, v, True)
        ms = timed(run)
        flops = 4.0 * d * hq * t * (t + 1) / 2
        results.append(dict(section="prefill", what="8b attention", kernel="sdpa " + how, tokens=t, ms=ms,
                            tflops=flops / ms / 1e9))
        print(f"prefill attention {t:6d} tokens sdpa ({how}) {ms:9.4f} ms {flops / ms / 1e9:7.1f} TFLOP/s",
              flush=True)
        del q, k, v, run
        torch.cuda.empty_cache()

    cases = [(c, 1) for c in ints(a.decode)] + [(min(2000, ints(a.decode)[-1]), 4)]
    for ctx, rows in cases:
        q = torch.randn(rows, hq, 1, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(rows, hkv, ctx, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(rows, hkv, ctx, d, device=dev, dtype=torch.bfloat16)
        run, how = sdpa_flash(q, k, v, False)
        ms = timed(run)
        gbps = 2.0 * 2 * hkv * d * ctx * rows / ms / 1e6
        results.append(dict(section="decode", what="8b attention", kernel="sdpa " + how, context=ctx, rows=rows,
                            ms=ms, gbps=gbps))
        print(f"decode attention context {ctx:6d} rows {rows} sdpa ({how}) {ms:9.4f} ms ({ms * 1e3:6.1f} us) "
              f"{gbps:7.0f} GB/s", flush=True)
        del q, k, v, run

    doc = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, cuda=torch.version.cuda,
               results=results)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
