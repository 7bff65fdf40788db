#!/usr/bin/env python3
"""The PyTorch side of scripts/gpu/serving-run.sh (GPU host; no network needed).

  serving_torch.py write --dir DIR
      A Llama-3.1-8B-shaped model (32 layers, random bf16 weights, seeded; scripts/llama/hf_reference.py's shape and
      initialisation) saved by transformers' save_pretrained, with a byte-level BPE tokenizer.json in Llama 3's layout
      (128000 ids of printable ASCII pieces, merged from GPT-2's byte alphabet, then 256 special tokens; ids 128000
      <|begin_of_text|>, 128001 <|end_of_text|>, 128009 <|eot_id|>) so that every id a random model draws decodes to
      text, and no end-of-sequence id (generation runs to max_tokens).
  serving_torch.py bench --dir DIR --streams 32 --tokens 256 --prompt-tokens 32 --out OUT.json
      The same load as the server's: N prompts of the same length, greedy, exactly --tokens new tokens each, through
      transformers' batched generate (sdpa attention, bf16, dynamic cache), and one prompt alone; CUDA-synchronised
      wall times after a warm-up. Prints a SUMMARY line: tokens/s at N and at 1, ms per decode step at each.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "llama"))

VOCAB = 128256
SPECIALS = 256


def byte_alphabet():
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256, 257, ..."""
    out, n = {}, 0
    for b in range(256):
        printable = ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
        out[b] = chr(b) if printable else chr(256 + n)
        n += 0 if printable else 1
    return out


def tokenizer_json():
    sym = byte_alphabet()
    vocab = {sym[b]: b for b in range(256)}
    merges = []
    letters = [sym[b] for b in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "]
    # Two-piece tokens first, then each of those with one more piece, until the regular ids run out.
    pairs = [a + b for a in letters for b in letters]
    for t in pairs:
        merges.append([t[0], t[1]])
        vocab[t] = len(vocab)
    for a in pairs:
        for b in letters:
            if len(vocab) >= VOCAB - SPECIALS:
                break
            merges.append([a, b])
            vocab[a + b] = len(vocab)
    names = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 9: "<|eot_id|>"}
    added = [{"id": VOCAB - SPECIALS + i, "content": names.get(i, f"<|reserved_special_token_{i}|>"),
              "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
             for i in range(SPECIALS)]
    regex = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
             "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
    return {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>",
                                                                    "ids": [VOCAB - SPECIALS]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }


def write(a):
    import torch
    from hf_reference import build
    t0 = time.perf_counter()
    model = build("llama-3.1-8b", 32, a.seed)
    os.makedirs(a.dir, exist_ok=True)
    model.save_pretrained(a.dir, max_shard_size="5GB")
    del model
    torch.cuda.empty_cache()
    with open(os.path.join(a.dir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(), f)
    with open(os.path.join(a.dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, f)
    print(f"llama-3.1-8b (32 layers) and its tokenizer written to {a.dir} in {time.perf_counter() - t0:.1f} s: "
          f"{sorted(os.listdir(a.dir))}")


def bench(a):
    import torch
    from transformers import AutoModelForCausalLM
    t0 = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(a.dir, dtype=torch.bfloat16, attn_implementation="sdpa")
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(a.dir, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.cuda().eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    load_s = time.perf_counter() - t0
    g = torch.Generator().manual_seed(a.seed)

    def run(batch, tokens):
        prompts = torch.randint(0, VOCAB - SPECIALS, (batch, a.prompt_tokens), generator=g).cuda()
        mask = torch.ones_like(prompts)
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(prompts, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                 do_sample=False, use_cache=True)
        torch.cuda.synchronize()
        s = time.perf_counter() - t
        assert out.shape[1] == a.prompt_tokens + tokens, out.shape
        return s

    run(a.streams, 4)
    run(1, 4)
    many = run(a.streams, a.tokens)
    one = run(1, a.tokens)
    result = {
        "load_s": load_s, "prompt_tokens": a.prompt_tokens, "tokens": a.tokens, "streams": a.streams,
        "batched_s": many, "batched_tokens_per_s": a.streams * a.tokens / many,
        "batched_ms_per_step": many * 1e3 / a.tokens,
        "alone_s": one, "alone_tokens_per_s": a.tokens / one, "alone_ms_per_step": one * 1e3 / a.tokens,
        "attn_implementation": "sdpa", "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"SUMMARY pytorch generate (sdpa, bf16, eager): {a.streams} x {a.tokens} tokens in {many:.2f} s = "
          f"{result['batched_tokens_per_s']:.0f} tokens/s ({result['batched_ms_per_step']:.2f} ms/step); 1 x "
          f"{a.tokens} in {one:.2f} s = {result['alone_tokens_per_s']:.0f} tokens/s "
          f"({result['alone_ms_per_step']:.2f} ms/step); load {load_s:.1f} s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("--dir", required=True)
    w.add_argument("--seed", type=int, default=1234)
    b = sub.add_parser("bench")
    b.add_argument("--dir", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--streams", type=int, default=32)
    b.add_argument("--tokens", type=int, default=256)
    b.add_argument("--prompt-tokens", type=int, default=32)
    b.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    if a.command == "write":
        write(a)
    else:
        bench(a)


if __name__ == "__main__":
    main()
