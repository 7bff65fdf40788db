#!/usr/bin/env python3
"""transformers reference for Thaw's llama function (run on the GPU host; no network needed).

Builds a randomly initialised Llama-family model of a named shape (real dimensions, optionally fewer layers)
with a fixed torch seed, in bf16 on the GPU, eager attention; gives q/k/v biases (Qwen2) and RMSNorm weights
random values too, so both matter; saves it with save_pretrained (config.json + safetensors, sharded above
5 GB) for Thaw to load; then writes REF.json with:
  prompts               seeded token ids, [batch][prompt_len]
  forward_logits        last-position logits of one forward pass over the prompts, [batch][vocab]
  forward_logits_fp32   the same with the model converted to fp32 (the truth both bf16 pipelines approximate)
  generated             greedy ids, generate(max_new_tokens, do_sample=False), [batch][n]
  generate_step_gaps    top-1 minus top-2 logit at each generation step, [batch][n] (near-ties may flip)
  timing_ms             with --bench, batch 1, CUDA-synchronised medians: decode_ms_per_token =
                        (generate 1 + N tokens - generate 1 token) / N; prefill_ms = one forward pass over a
                        --prefill-token prompt (logits of the last position only where the model allows it)
Usage: hf_reference.py --shape llama-3.1-8b [--layers 32] --dir MODEL_DIR --out REF.json [--bench]
"""
import argparse
import inspect
import json
import os
import platform
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

LLAMA3_8B = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)
# Real dimensions of the released models; must agree with dev.thaw.examples.llama.LlamaConfig's named shapes.
SHAPES = {
    "tinyllama-1.1b": dict(arch="llama", hidden=2048, layers=22, heads=32, kv=4, head_dim=64, inter=5632,
                           vocab=32000, max_pos=2048, eps=1e-5, theta=10000.0, scaling=None, tied=False),
    "llama-3.2-1b": dict(arch="llama", hidden=2048, layers=16, heads=32, kv=8, head_dim=64, inter=8192,
                         vocab=128256, max_pos=131072, eps=1e-5, theta=500000.0,
                         scaling=dict(LLAMA3_8B, factor=32.0), tied=True),
    "llama-3.1-8b": dict(arch="llama", hidden=4096, layers=32, heads=32, kv=8, head_dim=128, inter=14336,
                         vocab=128256, max_pos=131072, eps=1e-5, theta=500000.0, scaling=LLAMA3_8B, tied=False),
    "qwen2.5-0.5b": dict(arch="qwen2", hidden=896, layers=24, heads=14, kv=2, head_dim=64, inter=4864,
                         vocab=151936, max_pos=32768, eps=1e-6, theta=1000000.0, scaling=None, tied=True),
    "qwen2.5-7b": dict(arch="qwen2", hidden=3584, layers=28, heads=28, kv=4, head_dim=128, inter=18944,
                       vocab=152064, max_pos=32768, eps=1e-6, theta=1000000.0, scaling=None, tied=False),
    "mistral-7b": dict(arch="mistral", hidden=4096, layers=32, heads=32, kv=8, head_dim=128, inter=14336,
                       vocab=32768, max_pos=32768, eps=1e-5, theta=1000000.0, scaling=None, tied=False),
}
CONFIGS = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}


def make_config(shape, layers):
    s = SHAPES[shape]
    cls = CONFIGS[s["arch"]]
    kw = dict(hidden_size=s["hidden"], intermediate_size=s["inter"], num_hidden_layers=layers,
              num_attention_heads=s["heads"], num_key_value_heads=s["kv"], vocab_size=s["vocab"],
              max_position_embeddings=s["max_pos"], rms_norm_eps=s["eps"], tie_word_embeddings=s["tied"],
              hidden_act="silu", bos_token_id=None, eos_token_id=None, pad_token_id=None)
    params = inspect.signature(cls.__init__).parameters
    if "head_dim" in params:
        kw["head_dim"] = s["head_dim"]
    rope = dict(rope_type="llama3", **s["scaling"]) if s["scaling"] else dict(rope_type="default")
    if "rope_parameters" in params:  # transformers 5
        kw["rope_parameters"] = dict(rope, rope_theta=s["theta"])
    else:
        kw["rope_theta"] = s["theta"]
        if s["scaling"]:
            kw["rope_scaling"] = rope
    if s["arch"] == "qwen2":
        kw["use_sliding_window"] = False
    if s["arch"] == "mistral":
        kw["sliding_window"] = None
    return cls(**kw)


def build(shape, layers, seed):
    config = make_config(shape, layers)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="eager")
        except TypeError:
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16,
                                                     attn_implementation="eager")
    model = model.to(torch.bfloat16).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("_proj.bias"):
                p.normal_(0.0, 0.02)
            elif name.endswith("norm.weight"):
                p.normal_(1.0, 0.1)
    g = model.generation_config
    g.eos_token_id = None
    g.pad_token_id = 0
    g.bos_token_id = None
    return model


def timed(fn, warmup, runs):
    for _ in range(warmup):
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--layers", type=int, help="decoder layers (default: the shape's)")
    p.add_argument("--dir", required=True, help="where save_pretrained writes the model")
    p.add_argument("--out", required=True, help="reference JSON to write")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--prompt-seed", type=int, default=7)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--bench", action="store_true", help="time decode and prefill, batch 1")
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch")
    layers = a.layers or SHAPES[a.shape]["layers"]

    t0 = time.perf_counter()
    model = build(a.shape, layers, a.seed)
    os.makedirs(a.dir, exist_ok=True)
    model.save_pretrained(a.dir, max_shard_size="5GB")
    files = sorted(os.listdir(a.dir))
    print(f"{a.shape} ({layers} layers): built and saved {files} in {time.perf_counter() - t0:.1f} s")
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(a.prompt_seed)
    prompts = torch.randint(0, vocab, (a.batch, a.prompt_len), generator=g).cuda()
    mask = torch.ones_like(prompts)

    timing = {}
    with torch.inference_mode():
        forward_logits = model(prompts).logits[:, -1, :].float().cpu()
        out = model.generate(prompts, attention_mask=mask, max_new_tokens=a.new_tokens,
                             min_new_tokens=a.new_tokens, do_sample=False, use_cache=True, output_scores=True,
                             return_dict_in_generate=True)
        generated = out.sequences[:, a.prompt_len:].cpu()
        scores = torch.stack([s.float() for s in out.scores], dim=1).cpu()
        top2 = scores.topk(2, dim=-1).values
        gaps = top2[..., 0] - top2[..., 1]
        if a.bench:
            one, one_mask = prompts[:1], mask[:1]

            def gen(n):
                return lambda: model.generate(one, attention_mask=one_mask, max_new_tokens=n, min_new_tokens=n,
                                              do_sample=False, use_cache=True)
            base = timed(gen(1), 1, a.runs)
            full = timed(gen(1 + a.decode_tokens), 1, a.runs)
            timing["decode_ms_per_token"] = (full - base) / a.decode_tokens
            timing["decode_tokens"] = a.decode_tokens
            long_prompt = torch.randint(0, vocab, (1, a.prefill), generator=g).cuda()
            try:
                model(long_prompt, logits_to_keep=1)
                fwd = lambda: model(long_prompt, logits_to_keep=1)
            except TypeError:
                fwd = lambda: model(long_prompt)
            timing["prefill_ms"] = timed(fwd, 1, a.runs)
            timing["prefill_tokens"] = a.prefill
            timing["attn_implementation"] = "eager"

    # Last (it converts the model): the same weights in fp32, the truth both bf16 pipelines are measured against.
    # transformers keeps the residual stream in bf16; over 32 layers its own error against fp32 is several percent.
    with torch.inference_mode():
        model = model.float()
        forward_logits_fp32 = model(prompts).logits[:, -1, :].float().cpu()

    ref = {
        "model": a.shape,
        "layers": layers,
        "seed": a.seed,
        "saved_files": files,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version(), "cuda": torch.version.cuda},
        "device": torch.cuda.get_device_name(0),
        "max_new_tokens": a.new_tokens,
        "prompts": prompts.cpu().tolist(),
        "forward_logits": forward_logits.tolist(),
        "forward_logits_fp32": forward_logits_fp32.tolist(),
        "generated": generated.tolist(),
        "generate_step_gaps": gaps.tolist(),
        "timing_ms": timing,
    }
    with open(a.out, "w") as f:
        json.dump(ref, f)
    print(f"device {ref['device']}, torch {torch.__version__}, transformers {transformers.__version__}")
    for b, ids in enumerate(ref["generated"]):
        print(f"  seq {b}: greedy {ids}  (smallest top-2 gap {min(ref['generate_step_gaps'][b]):.4g})")
    if timing:
        print(f"transformers eager, batch 1: decode {timing['decode_ms_per_token']:.3f} ms/token "
              f"({a.decode_tokens} tokens), prefill {a.prefill} tokens {timing['prefill_ms']:.2f} ms")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
