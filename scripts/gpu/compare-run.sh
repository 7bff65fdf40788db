#!/usr/bin/env bash
# The compare tools on the shared scaffold (ReferenceCompare) against transformers, after the GPT-2/Llama scaffold
# merge (issue 23, item 5), in about a minute: LlamaCompare on llama-3.2-1b's dimensions (2 layers, random bf16 weights
# saved by transformers), then Gpt2Compare on gpt2 (small), each within what COMPARE_BUDGET_S (80) leaves.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/compare-run.sh <unpacked thaw dir>
# Writes $OUT/compare.txt (every line) and $OUT/summary.txt (the RESULT lines and exit codes).
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/compare-run.sh <unpacked thaw dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
java="$home/runtime/bin/java"
work=${COMPARE_WORK:-/dev/shm/thaw-compare}
budget=${COMPARE_BUDGET_S:-80}
mkdir -p "$OUT"
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
export THAW_DEVICE=cuda
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
status=0
log="$OUT/compare.txt"
: > "$log"
if timeout -k 2 "$(left)" python3 "$repo/scripts/llama/hf_reference.py" --shape llama-3.2-1b --layers 2 \
    --dir "$work/llama" --out "$work/llama.json" >> "$log" 2>&1; then
  timeout -k 2 "$(left)" "$java" -Xmx8g -cp "$home/lib/*" dev.thaw.examples.llama.LlamaCompare --dir "$work/llama" \
      --reference "$work/llama.json" >> "$log" 2>&1
  echo "LlamaCompare llama-3.2-1b (2 layers): exit $?" | tee -a "$log"
else
  echo "llama hf_reference.py failed or ran out of time" | tee -a "$log"; status=1
fi
if (( $(left) > 15 )) && timeout -k 2 "$(left)" python3 "$repo/scripts/gpt2/hf_reference.py" --model gpt2 \
    --dir "$work/gpt2" --out "$work/gpt2.json" >> "$log" 2>&1; then
  timeout -k 2 "$(left)" "$java" -Xmx8g -cp "$home/lib/*" dev.thaw.examples.gpt2.Gpt2Compare --dir "$work/gpt2" \
      --reference "$work/gpt2.json" >> "$log" 2>&1
  echo "Gpt2Compare gpt2: exit $?" | tee -a "$log"
else
  echo "Gpt2Compare gpt2: not run (time or hf_reference.py)" | tee -a "$log"
fi
grep -E "RESULT|exit|not run|failed" "$log" | tee "$OUT/summary.txt"
exit $status
