#!/usr/bin/env bash
# Checks Thaw's text side against transformers and tokenizers on the GPU host (it needs their Python packages, not the
# GPU; under a minute): the chat templates in the Llama 3, Qwen2 and Mistral layouts (the repository's, plus any
# *.jinja in TEMPLATES, e.g. real models' templates saved there) rendered by apply_chat_template and by Thaw's
# ChatTemplate, and byte-level BPE tokenizers trained there in the Llama 3, Qwen2 and GPT-2 layouts, encoded and
# decoded by tokenizers and by Thaw's ByteLevelBpe.
# Usage (repository root on the GPU machine): OUT=<dir> scripts/gpu/text-run.sh <unpacked thaw dir>
# Writes $OUT/text.txt; prints SUMMARY lines; exits non-zero on any difference.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
thaw_home=$(cd "${1:?usage: OUT=<dir> $0 <unpacked thaw dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
java="$thaw_home/runtime/bin/java"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT" "$work/templates"
cp "$repo"/runtime/src/test/resources/dev/thaw/runtime/text/*.jinja "$work/templates/"
if [ -n "${TEMPLATES:-}" ]; then
  cp "$TEMPLATES"/*.jinja "$work/templates/" 2>/dev/null || true
fi
check=("$java" -Xmx2g -cp "$thaw_home/lib/*" dev.thaw.examples.llama.TextCheck)
status=0
log="$OUT/text.txt"
{
  date -u +%FT%TZ
  python3 -c 'import transformers, tokenizers; print("transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'
} > "$log" 2>&1
timeout 120 python3 "$repo/scripts/llm/text_check.py" chat "$work/templates" "${check[@]}" --work "$work/chat" \
    >> "$log" 2>&1 || status=1
timeout 120 python3 "$repo/scripts/llm/text_check.py" tokens "${check[@]}" --work "$work/tokens" >> "$log" 2>&1 \
    || status=1
grep -E '^SUMMARY|DIFF|Error' "$log"
exit $status
