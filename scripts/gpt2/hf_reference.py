#!/usr/bin/env python3
"""PyTorch reference for Thaw's gpt2 function (run on the GPU host; no network needed).

Builds a randomly initialised GPT2LMHeadModel of a named size with a fixed torch seed, converts it to fp16 on
the GPU, saves it with save_pretrained (config.json + model.safetensors) for Thaw to load, then writes
REF.json with:
  prompts               seeded token ids, [batch][prompt_len]
  forward_logits        last-position logits of one forward pass over the prompts, [batch][vocab]
  generated             greedy ids from generate(max_new_tokens, do_sample=False, use_cache=True), [batch][n]
  generate_step_gaps    top-1 minus top-2 logit at each generation step, [batch][n] (near-ties may flip)
  generate_last_logits  logits of the last generation step, [batch][vocab]
  timing_ms             warm latency, batch 1, first prompt: one forward pass; generate n tokens
                        (CUDA-synchronised, median of --runs after --warmup)
Usage: hf_reference.py --model gpt2-large --dir OUT/gpt2-large/hf --out OUT/gpt2-large/reference.json
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel

SIZES = {  # n_embd, n_layer, n_head: the released GPT-2 sizes; all have vocab 50257 and context 1024
    "gpt2": (768, 12, 12),
    "gpt2-medium": (1024, 24, 16),
    "gpt2-large": (1280, 36, 20),
    "gpt2-xl": (1600, 48, 25),
}


def build(name, seed):
    n_embd, n_layer, n_head = SIZES[name]
    config = GPT2Config(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=1024, vocab_size=50257,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    model = model.half().cuda().eval()
    # Random weights can make EOS (50256) the greedy choice; generation must not stop early.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def save(model, directory):
    os.makedirs(directory, exist_ok=True)
    try:
        model.save_pretrained(directory, safe_serialization=True)
    except TypeError:  # transformers versions where safetensors is the only format and the flag is gone
        model.save_pretrained(directory)
    files = sorted(os.listdir(directory))
    if "model.safetensors" not in files:
        sys.exit(f"save_pretrained wrote {files}, not one model.safetensors; Thaw reads unsharded checkpoints")
    return files


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
    return {"median": statistics.median(ms), "min": min(ms), "max": max(ms), "runs": ms}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(SIZES), required=True)
    p.add_argument("--dir", required=True, help="where save_pretrained writes the model")
    p.add_argument("--out", required=True, help="reference JSON to write")
    p.add_argument("--seed", type=int, default=1234, help="torch seed of the weights")
    p.add_argument("--prompt-seed", type=int, default=7)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible to torch")

    model = build(a.model, a.seed)
    files = save(model, a.dir)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(a.prompt_seed)
    prompts = torch.randint(0, vocab, (a.batch, a.prompt_len), generator=g).cuda()
    mask = torch.ones_like(prompts)

    with torch.inference_mode():
        forward_logits = model(prompts).logits[:, -1, :].float().cpu()
        out = model.generate(prompts, attention_mask=mask, max_new_tokens=a.new_tokens, do_sample=False,
                             use_cache=True, output_scores=True, return_dict_in_generate=True)
        generated = out.sequences[:, a.prompt_len:].cpu()
        if generated.shape[1] != a.new_tokens:
            sys.exit(f"generate made {generated.shape[1]} tokens, not {a.new_tokens}")
        scores = torch.stack([s.float() for s in out.scores], dim=1).cpu()  # [batch, steps, vocab]
        top2 = scores.topk(2, dim=-1).values
        gaps = (top2[..., 0] - top2[..., 1])

        one = prompts[:1]
        one_mask = mask[:1]
        forward_t = timed(lambda: model(one), a.warmup, a.runs)
        generate_t = timed(lambda: model.generate(one, attention_mask=one_mask, max_new_tokens=a.new_tokens,
                                                  do_sample=False, use_cache=True), a.warmup, a.runs)

    ref = {
        "model": a.model,
        "seed": a.seed,
        "config": {k: getattr(model.config, k) for k in
                   ("n_embd", "n_layer", "n_head", "n_positions", "vocab_size", "layer_norm_epsilon",
                    "activation_function")},
        "saved_files": files,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version(), "cuda": torch.version.cuda},
        "device": torch.cuda.get_device_name(0),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "max_new_tokens": a.new_tokens,
        "prompts": prompts.cpu().tolist(),
        "forward_logits": forward_logits.tolist(),
        "generated": generated.tolist(),
        "generate_step_gaps": gaps.tolist(),
        "generate_last_logits": scores[:, -1, :].tolist(),
        "timing_ms": {"forward": forward_t, "generate": generate_t,
                      "what": f"batch 1, {a.prompt_len}-token prompt; generate = {a.new_tokens} new tokens"},
    }
    with open(a.out, "w") as f:
        json.dump(ref, f)
    print(f"{a.model}: device {ref['device']}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"attention {ref['attn_implementation']}")
    print(f"saved {files} to {a.dir}")
    for b, ids in enumerate(ref["generated"]):
        print(f"  seq {b}: prompt {ref['prompts'][b]}")
        print(f"          greedy  {ids}  (smallest top-2 gap {min(ref['generate_step_gaps'][b]):.4g})")
    print(f"warm forward  (batch 1, {a.prompt_len} tokens): median {forward_t['median']:.3f} ms "
          f"(min {forward_t['min']:.3f}, max {forward_t['max']:.3f}, {a.runs} runs)")
    print(f"warm generate ({a.new_tokens} tokens, greedy, KV cache): median {generate_t['median']:.3f} ms "
          f"(min {generate_t['min']:.3f}, max {generate_t['max']:.3f}, {a.runs} runs)")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
