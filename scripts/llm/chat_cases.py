"""The chat-template cases Thaw's renderer is checked on, rendered by Jinja2 the way transformers renders them.

    python3 chat_cases.py TEMPLATE_DIR OUT.json [--transformers]

Writes every case of CASES for every template in TEMPLATE_DIR (*.jinja) with its rendering (or the error the
template raised). Plain Jinja2 with transformers' settings (trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception and strftime_now) by default; with --transformers, through transformers' own
apply_chat_template (the reference on the GPU host). The JSON is what ChatTemplateTest (the repository's copy,
rendered with Jinja2) and TextCheck (on the GPU host) read.
"""
import json
import sys
from pathlib import Path

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city, now.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                          "unit": {"type": "string", "enum": ["c", "f"]}},
                          "required": ["city"]}}}
CASES = [
    {"name": "one user turn", "messages": [{"role": "user", "content": "Hello there!"}],
     "add_generation_prompt": True},
    {"name": "system and two turns", "messages": [
        {"role": "system", "content": "  You answer in French.  "},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": " Quatre. \n"},
        {"role": "user", "content": "Et 3×3 ? «ok» 😀"}], "add_generation_prompt": True},
    {"name": "no generation prompt", "messages": [
        {"role": "user", "content": "a\nb\n\n"}, {"role": "assistant", "content": "c"}],
     "add_generation_prompt": False},
    {"name": "tools", "messages": [{"role": "user", "content": "Weather in Paris?"}],
     "add_generation_prompt": True, "extra": {"tools": [WEATHER]}},
    {"name": "tool call and result", "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
        {"role": "tool", "content": "{\"temp\": 21.5}"}], "add_generation_prompt": True,
     "extra": {"tools": [WEATHER]}},
    {"name": "roles out of order", "messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "add_generation_prompt": True},
    {"name": "date string", "messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True,
     "extra": {"date_string": "01 Jan 2030"}},
]


def jinja_env():
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.exceptions import TemplateError

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render_jinja(env, source, case):
    return env.from_string(source).render(messages=case["messages"],
                                          add_generation_prompt=case["add_generation_prompt"],
                                          **SPECIAL, **case.get("extra", {}))


def render_transformers(source, case):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), **SPECIAL)
    tok.chat_template = source
    extra = dict(case.get("extra", {}))
    tools = extra.pop("tools", None)
    return tok.apply_chat_template(case["messages"], tools=tools, tokenize=False,
                                   add_generation_prompt=case["add_generation_prompt"], **extra)


def main():
    template_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    use_transformers = "--transformers" in sys.argv
    env = None if use_transformers else jinja_env()
    results = []
    for path in sorted(template_dir.glob("*.jinja")):
        source = path.read_text()
        for case in CASES:
            entry = {"template": path.name, "special": SPECIAL, **case}
            try:
                entry["expected"] = (render_transformers(source, case) if use_transformers
                                     else render_jinja(env, source, case))
            except Exception as e:  # the template refused the conversation, or failed
                entry["error"] = f"{type(e).__name__}: {e}"
            results.append(entry)
    out.write_text(json.dumps(results, ensure_ascii=False, indent=1))
    print(f"{len(results)} renderings of {len(CASES)} cases written to {out}")


if __name__ == "__main__":
    main()
