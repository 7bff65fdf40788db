"""Thaw's text side against transformers and tokenizers, on a host that has them (no network needed).

    python3 text_check.py chat TEMPLATE_DIR JAVA_CMD... --work DIR
    python3 text_check.py tokens JAVA_CMD... --work DIR

chat: renders scripts/llm/chat_cases.py's cases with transformers' apply_chat_template and with Thaw's ChatTemplate
(TextCheck chat), and compares them string for string (an error on both sides counts as agreeing).
tokens: trains a byte-level BPE with tokenizers on a small corpus, in the Llama 3, Qwen2 and GPT-2 layouts (their
split regexes, normalizer, special tokens and template markers, Llama 3's begin-of-text post-processor), encodes a
set of texts with tokenizers and with Thaw's ByteLevelBpe (TextCheck tokens), and compares ids (with and without the
special tokens) and decoded text.
Prints one line per check and a SUMMARY line; exits 1 on any difference.
"""
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Hello, world! How are you today? I'm fine, thanks; you're kind.",
    "Numbers: 1234567890, 3.14159, 2026-11-28, 1e-5 and 42%.",
    "Unicode: café, naïve, Ærøskøbing, Straße, 東京タワー, 你好世界, Привет мир, 🙂🚀.",
    "def f(x):\n    return x ** 2  # squares\n\n\tTabs\tand  spaces   here.\n",
    "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>",
]
TEXTS = CORPUS + [
    "", " ", "  leading and trailing  ", "\n\n\n", "a", "hello<|eot_id|> world",
    "<|begin_of_text|>already there", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>",
    "Mixed 12345 digits and 東京 and e\u0301 (a combining accent) and \u00e9.", "don't won't it's they'll I'd",
    "tab\tnewline\r\nwindows line", "emoji 🧑‍🚀 zwj and flags 🇫🇷",
]
LAYOUTS = {
    "llama3": {"regex": LLAMA3, "nfc": False, "byte_regex": False,
               "special": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                           "<|eot_id|>"], "bos": "<|begin_of_text|>"},
    "qwen2": {"regex": QWEN2, "nfc": True, "byte_regex": False,
              "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "bos": None},
    "gpt2": {"regex": None, "nfc": False, "byte_regex": True, "special": ["<|endoftext|>"], "bos": None},
}


def java(cmd, *args):
    subprocess.run(list(cmd) + list(args), check=True, stdout=subprocess.DEVNULL)


def check_chat(template_dir, cmd, work):
    cases = work / "chat-cases.json"
    subprocess.run([sys.executable, str(HERE / "chat_cases.py"), str(template_dir), str(cases), "--transformers"],
                   check=True)
    got_file = work / "chat-got.json"
    java(cmd, "chat", str(template_dir), str(cases), str(got_file))
    expected = json.loads(cases.read_text())
    got = json.loads(got_file.read_text())
    bad = 0
    for e, g in zip(expected, got):
        what = f"{e['template']} / {e['name']}"
        if "expected" in e and g.get("got") == e["expected"]:
            print(f"chat OK   {what}")
        elif "error" in e and "error" in g:
            print(f"chat OK   {what} (both refuse: {g['error']})")
        else:
            bad += 1
            print(f"chat DIFF {what}\n  transformers: {json.dumps(e.get('expected', e.get('error')))}\n"
                  f"  thaw:         {json.dumps(g.get('got', g.get('error')))}")
    return len(expected), bad


def train(layout, spec, path):
    from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=layout == "llama3"))
    if spec["nfc"]:
        tok.normalizer = normalizers.NFC()
    if spec["regex"]:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(spec["regex"]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=spec["special"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    if spec["bos"]:
        bos = tok.token_to_id(spec["bos"])
        tok.post_processor = processors.TemplateProcessing(single=f"{spec['bos']} $A",
                                                           special_tokens=[(spec["bos"], bos)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(str(path))
    return tok


def check_tokens(cmd, work):
    texts = work / "texts.json"
    texts.write_text(json.dumps(TEXTS, ensure_ascii=False))
    checks = bad = 0
    for layout, spec in LAYOUTS.items():
        path = work / f"{layout}-tokenizer.json"
        tok = train(layout, spec, path)
        got_file = work / f"{layout}-got.json"
        java(cmd, "tokens", str(path), str(texts), str(got_file))
        for text, g in zip(TEXTS, json.loads(got_file.read_text())):
            ids = tok.encode(text).ids
            plain = tok.encode(text, add_special_tokens=False).ids
            expected = {"ids": ids, "idsNoSpecial": plain, "decoded": tok.decode(ids, skip_special_tokens=True),
                        "decodedWithSpecial": tok.decode(ids, skip_special_tokens=False)}
            checks += 1
            diffs = [k for k, v in expected.items() if g[k] != v]
            if diffs:
                bad += 1
                print(f"tokens DIFF {layout} {json.dumps(text, ensure_ascii=False)[:60]}: " + "; ".join(
                    f"{k}: tokenizers {json.dumps(expected[k], ensure_ascii=False)[:200]} thaw "
                    f"{json.dumps(g[k], ensure_ascii=False)[:200]}" for k in diffs))
            else:
                print(f"tokens OK   {layout} {json.dumps(text, ensure_ascii=False)[:60]} ({len(ids)} ids)")
    return checks, bad


def main():
    args = sys.argv[1:]
    work = Path(args[args.index("--work") + 1])
    args = args[:args.index("--work")]
    work.mkdir(parents=True, exist_ok=True)
    if args[0] == "chat":
        n, bad = check_chat(Path(args[1]), args[2:], work)
    else:
        n, bad = check_tokens(args[1:], work)
    print(f"SUMMARY {args[0]}: {n - bad} of {n} agree")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
