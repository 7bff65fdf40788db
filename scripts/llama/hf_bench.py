#!/usr/bin/env python3
"""PyTorch at its best on a transformers checkpoint folder (run on the GPU host, in the same run as Thaw's numbers):
warm prefill time by prompt length and decode time per token by context, batch 1, bf16, in four modes:

  eager           attn_implementation="eager"
  sdpa            attn_implementation="sdpa" (flash attention where torch picks it)
  compile         sdpa + torch.compile(model) (inductor, default mode): prefill only (each length compiles)
  static-compile  sdpa + a static KV cache + the compiled decode step with CUDA graphs (generate's
                  cache_implementation="static", which compiles the forward; where this transformers does not,
                  the forward is compiled with mode="reduce-overhead" by hand): decode only

prefill_ms = one forward over an L-token prompt that fills the KV cache, logits of the last position only;
decode_ms_per_token = a context of C tokens already in the cache, then the mean of N greedy steps (eager/sdpa: a
forward per step; static-compile: (generate(1 + N) - generate(1)) / N). CUDA-synchronised medians of --runs.
Each mode runs in its own process under --mode-timeout seconds: one that does not compile in time is reported as
such and the others still run.
Usage: hf_bench.py --dir MODEL_DIR --out BENCH.json [--lengths 16,128,512,2000,8000] [--contexts 16,2000]
       [--decode-tokens 32] [--modes eager,sdpa,compile,static-compile] [--mode-timeout 600] [--runs 5]
MODEL_DIR is what save_pretrained wrote (hf_reference.py --dir, or a real checkpoint).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ("eager", "sdpa", "compile", "static-compile")


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def child(a):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    attn = "eager" if a.child == "eager" else "sdpa"
    try:
        model = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.bfloat16, attn_implementation=attn)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(a.dir, torch_dtype=torch.bfloat16, attn_implementation=attn)
    model = model.cuda().eval()
    g = model.generation_config
    g.eos_token_id = None
    g.pad_token_id = 0
    vocab = model.config.vocab_size

    def emit(**r):
        r["mode"] = a.child
        print("RESULT " + json.dumps(r), flush=True)

    def timed(fn, runs):
        fn()
        torch.cuda.synchronize()
        ms = []
        for _ in range(runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ms)

    def prompt(n):
        return torch.randint(0, vocab, (1, n), device="cuda")

    with torch.inference_mode():
        if a.child in ("eager", "sdpa", "compile"):
            fwd = torch.compile(model) if a.child == "compile" else model
            for n in ints(a.lengths):
                ids = prompt(n)
                t0 = time.perf_counter()
                try:
                    ms = timed(lambda: fwd(ids, use_cache=True, logits_to_keep=1), a.runs)
                    emit(what="prefill", tokens=n, ms=ms, first_call_s=time.perf_counter() - t0)
                except Exception as e:  # a length that does not fit or compile: say so, go on
                    emit(what="prefill", tokens=n, error=f"{type(e).__name__}: {str(e)[:200]}")
                torch.cuda.empty_cache()
        if a.child in ("eager", "sdpa"):
            for c in ints(a.contexts):
                ids = prompt(c)
                try:
                    def steps():
                        out = model(ids, use_cache=True, logits_to_keep=1)
                        pkv = out.past_key_values
                        nxt = out.logits[:, -1:].argmax(-1)
                        torch.cuda.synchronize()
                        t0 = time.perf_counter()
                        for _ in range(a.decode_tokens):
                            out = model(nxt, past_key_values=pkv, use_cache=True)
                            pkv = out.past_key_values
                            nxt = out.logits[:, -1:].argmax(-1)
                        torch.cuda.synchronize()
                        return (time.perf_counter() - t0) * 1e3 / a.decode_tokens
                    steps()
                    per = statistics.median(steps() for _ in range(max(1, a.runs // 2)))
                    emit(what="decode", context=c, ms_per_token=per, tokens=a.decode_tokens)
                except Exception as e:
                    emit(what="decode", context=c, error=f"{type(e).__name__}: {str(e)[:200]}")
                torch.cuda.empty_cache()
        if a.child == "static-compile":
            how = "generate(cache_implementation='static')"
            for c in ints(a.contexts):
                ids = prompt(c)
                mask = torch.ones_like(ids)

                def gen(n):
                    return lambda: model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                                                  do_sample=False, cache_implementation="static")
                for attempt in (0, 1):
                    try:
                        t0 = time.perf_counter()
                        gen(1 + a.decode_tokens)()  # compiles (graphs are captured for this cache length)
                        first = time.perf_counter() - t0
                        base = timed(gen(1), a.runs)
                        full = timed(gen(1 + a.decode_tokens), a.runs)
                        emit(what="decode", context=c, ms_per_token=(full - base) / a.decode_tokens,
                             tokens=a.decode_tokens, how=how, first_call_s=first)
                        break
                    except Exception as e:
                        if attempt == 0 and "generate" in how:  # compile the forward by hand, once, and retry
                            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
                            how = "forward compiled with mode='reduce-overhead' + static cache"
                            emit(what="note", note=f"generate's own compile failed ({type(e).__name__}); {how}")
                        else:
                            emit(what="decode", context=c, error=f"{type(e).__name__}: {str(e)[:200]}")
                            break
                torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", required=True)
    p.add_argument("--out")
    p.add_argument("--lengths", default="16,128,512,2000,8000")
    p.add_argument("--contexts", default="16,2000")
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--mode-timeout", type=int, default=600)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a)
        return
    if not a.out:
        p.error("--out is required")
    results = []
    for mode in a.modes.split(","):
        if mode not in MODES:
            sys.exit(f"unknown mode {mode}; known: {MODES}")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--dir", a.dir, "--lengths", a.lengths,
               "--contexts", a.contexts, "--decode-tokens", str(a.decode_tokens), "--runs", str(a.runs)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.mode_timeout)
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, rc = f"did not finish in {a.mode_timeout} s", None
        got = [json.loads(l[7:]) for l in out.splitlines() if l.startswith("RESULT ")]
        results += got
        status = "ok" if rc == 0 else (err if rc is None else f"exit {rc}: {err.strip().splitlines()[-1:]}")
        results.append(dict(mode=mode, what="run", seconds=time.perf_counter() - t0, status=status))
        print(f"{mode}: {len(got)} results in {time.perf_counter() - t0:.0f} s ({status})", flush=True)

    import torch
    doc = dict(dir=a.dir, device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
               torch=torch.__version__, results=results)
    try:
        import transformers
        doc["transformers"] = transformers.__version__
    except ImportError:
        pass
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)

    modes = a.modes.split(",")
    cell = lambda r, k: (f"{r[k]:9.2f}" if k in r else "    error") if r else "        -"
    print(f"\nprefill ms (batch 1, {doc['device']}): " + "".join(f"{m:>16s}" for m in modes))
    for n in ints(a.lengths):
        row = [next((r for r in results if r["mode"] == m and r["what"] == "prefill" and r["tokens"] == n), None)
               for m in modes]
        print(f"  {n:6d} tokens       " + "".join(f"{cell(r, 'ms'):>16s}" for r in row))
    print("decode ms/token:      " + "".join(f"{m:>16s}" for m in modes))
    for c in ints(a.contexts):
        row = [next((r for r in results if r["mode"] == m and r["what"] == "decode" and r["context"] == c), None)
               for m in modes]
        print(f"  context {c:6d}      " + "".join(f"{cell(r, 'ms_per_token'):>16s}" for r in row))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
