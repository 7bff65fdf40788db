#!/usr/bin/env bash
# The whole Llama-3.1-8B forward on a GPU host (H100/H200), Thaw beside PyTorch on the same checkpoint folder, in
# under 5 minutes (FORWARD_BUDGET_S, default 295 s; each part under its own timeout, none can hang the run):
#   1. scripts/llama/hf_reference.py: the 8B with all 32 layers, seeded random bf16 weights, saved by
#      save_pretrained (4 shards); transformers' logits (bf16 and fp32) and 16 greedy ids for 2 prompts.
#   2. LlamaCompare on that folder: Thaw's logits and greedy ids against transformers' (PASS/FAIL), then the whole
#      forward by prompt length (16, 128, 512, 2000, 8000 tokens: prompt pass + head + 1 token) and decode
#      ms/token after 16 and 2000 tokens ((generate 1 + 32) - (generate 1)) / 32), medians of 5.
#   3. scripts/llama/hf_bench.py, one process per mode on the same folder, each in the time left: sdpa (prefill
#      and decode), torch.compile (prefill), static cache + compiled decode (decode), eager. A mode that does not
#      finish in its time keeps the results it printed and is reported as cut short.
#   4. The table (scripts/llama/forward_summary.py), also in $OUT/summary.txt.
# The tarball must be built from this branch (mvn -B -Pdist package -DskipTests).
# Usage (repository root on the GPU machine): OUT=<dir> scripts/gpu/forward-run.sh <unpacked thaw dir>
#   HF_MODES: PyTorch's modes and their seconds (default "sdpa:70 compile:130 static-compile:110 eager:60"; empty:
#   Thaw alone, beside the PyTorch figures of another run, said as such).
# Writes $OUT/env.txt, reference.txt, thaw.txt, thaw.json, hf-<mode>.txt, hf-<mode>.json, summary.txt. Work files
# (the 16 GB checkpoint) under /dev/shm/thaw-forward (FORWARD_WORK), removed at the end.
# Exit 0 when Thaw matches transformers and every part ran, 1 otherwise.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
thaw_home=$(cd "${1:?usage: OUT=<dir> $0 <unpacked thaw dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
java="$thaw_home/runtime/bin/java"
work=${FORWARD_WORK:-/dev/shm/thaw-forward}
mkdir -p "$OUT"
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
export THAW_DEVICE=cuda
status=0
start=$(date +%s)
budget=${FORWARD_BUDGET_S:-295}
elapsed() { echo "$(( $(date +%s) - start ))"; }
left() { echo "$(( budget - $(elapsed) ))"; }
log() { echo "[$(elapsed) s] $*" | tee -a "$OUT/env.txt"; }
# cap SECONDS: the smaller of SECONDS and what is left of the budget less a margin (a part's own wrap-up and the
# summary).
cap() { local l=$(( $(left) - 20 )); echo $(( $1 < l ? $1 : l )); }
cut_short() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1
  "$java" -version 2>&1 | head -1
  git -C "$repo" log --oneline -1 2>/dev/null || true
} > "$OUT/env.txt" 2>&1

# 1. The folder and transformers' answers.
log "hf_reference.py llama-3.1-8b, 32 layers (timeout $(cap 150) s)"
timeout -k 5 "$(cap 150)" python3 "$repo/scripts/llama/hf_reference.py" --shape llama-3.1-8b --layers 32 \
    --dir "$work/8b" --out "$work/ref.json" > "$OUT/reference.txt" 2>&1
rc=$?
log "hf_reference.py exit $rc"
if [ "$rc" -ne 0 ] || [ ! -f "$work/ref.json" ]; then
  log "no reference folder: nothing else can run"
  exit 1
fi

# 2. Thaw on the folder: correctness, then the forward by prompt length and decode by context.
t=$(cap 110)
log "LlamaCompare (timeout $t s)"
timeout -k 5 "$t" "$java" -Xmx16g -cp "$thaw_home/lib/*" dev.thaw.examples.llama.LlamaCompare \
    --dir "$work/8b" --reference "$work/ref.json" --out "$OUT/thaw.json" --runs 5 \
    --prefill 16,128,512,2000,8000 --decode-contexts 16,2000 --decode-tokens 32 > "$OUT/thaw.txt" 2>&1
rc=$?
log "LlamaCompare exit $rc$(cut_short $rc && echo ' (timed out)')"
[ "$rc" -ne 0 ] && status=1

# 3. PyTorch's modes, most telling first, each in the time left.
for spec in ${HF_MODES-sdpa:70 compile:130 static-compile:110 eager:60}; do
  mode=${spec%%:*}
  t=$(cap "${spec##*:}")
  if [ "$t" -lt 30 ]; then
    log "hf_bench.py $mode not run: $(left) s left"
    status=1
    continue
  fi
  log "hf_bench.py $mode (timeout $t s)"
  # hf_bench.py stops its mode at --mode-timeout and then writes what it got: the outer timeout is a backstop.
  timeout -k 5 "$(( t + 15 ))" python3 "$repo/scripts/llama/hf_bench.py" --dir "$work/8b" --modes "$mode" \
      --mode-timeout "$t" --lengths 16,128,512,2000,8000 --contexts 16,2000 --decode-tokens 32 --runs 5 \
      --out "$OUT/hf-$mode.json" > "$OUT/hf-$mode.txt" 2>&1
  rc=$?
  log "hf_bench.py $mode exit $rc ($(grep -h "^$mode:" "$OUT/hf-$mode.txt" 2>/dev/null | tail -1))"
  [ "$rc" -ne 0 ] && status=1
done

# 4. Summary.
python3 "$repo/scripts/llama/forward_summary.py" "$OUT/thaw.json" "$OUT"/hf-*.json 2>&1 | tee "$OUT/summary.txt"
log "done, status $status"
exit $status
