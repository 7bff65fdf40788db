#!/usr/bin/env bash
# Proves the Llama-family function on a GPU host (H100/H200), from the unpacked Thaw tarball, in under 5 minutes:
#   1. against transformers (random bf16 weights saved by save_pretrained): last-position logits (rel L2,
#      argmax) and 16 greedy tokens for llama-3.2-1b, qwen2.5-0.5b and mistral-7b shapes (fewer layers, real
#      dimensions) and llama-3.1-8b with all 32 layers (4 safetensors shards);
#   2. llama-3.1-8b warm decode ms/token at batch 1 and a 512-token prefill, transformers eager in the same run;
#   3. an image of that 8B built with `thaw build`, restored in a new process with `thaw run --check`
#      (device memory byte-identical, same response as at build);
#   4. with the time left of LLAMA_BUDGET_S (290 s), the GPU JUnit tests: every kernel against its Java twin at
#      real shapes, every kernel `exact` under GPU profiling (LlamaKernelsGpuTest, LlamaFunctionGpuProfileTest).
# Usage (repository root on the GPU machine): OUT=<dir> scripts/gpu/llama-run.sh <unpacked thaw dir>
# Writes $OUT/tests.txt, compare.txt, summaries.json, image.txt. Work files under /dev/shm (about 33 GB at the
# peak: the 8B checkpoint and its image store), removed at the end. Exit non-zero on any failure.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
thaw_home=$(cd "${1:?usage: OUT=<dir> $0 <unpacked thaw dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
java="$thaw_home/runtime/bin/java"
work=${LLAMA_WORK:-/dev/shm/thaw-llama}
mkdir -p "$OUT"
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
trap 'exit 143' TERM INT
export THAW_DEVICE=cuda
status=0
start=$(date +%s)
budget=${LLAMA_BUDGET_S:-290}
elapsed() { echo "[$(( $(date +%s) - start )) s]"; }

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  "$java" -version 2>&1 | head -1
} > "$OUT/compare.txt" 2>&1

# 1 + 2. Against transformers. compare SHAPE LAYERS [LlamaCompare options...]
echo "[" > "$OUT/summaries.json"
sep=""
compare() {
  local shape=$1 layers=$2
  shift 2
  local bench=()
  [ $# -gt 0 ] && bench=(--bench)
  echo "=== $shape, $layers layers $(elapsed)" >> "$OUT/compare.txt"
  if ! timeout 240 python3 "$repo/scripts/llama/hf_reference.py" --shape "$shape" --layers "$layers" \
      --dir "$work/$shape" --out "$work/$shape.json" "${bench[@]}" >> "$OUT/compare.txt" 2>&1; then
    echo "$shape: hf_reference.py failed" >> "$OUT/compare.txt"
    status=1
    return
  fi
  timeout 240 "$java" -Xmx8g -cp "$thaw_home/lib/*" dev.thaw.examples.llama.LlamaCompare --dir "$work/$shape" \
      --reference "$work/$shape.json" --out "$work/$shape.summary.json" "$@" >> "$OUT/compare.txt" 2>&1
  local rc=$?
  echo "$shape: LlamaCompare exit $rc $(elapsed)" >> "$OUT/compare.txt"
  [ "$rc" -ne 0 ] && status=1
  if [ -f "$work/$shape.summary.json" ]; then
    printf '%s{"shape": "%s", "summary": %s}\n' "$sep" "$shape" "$(cat "$work/$shape.summary.json")" \
        >> "$OUT/summaries.json"
    sep=","
  fi
}
compare llama-3.2-1b 2
rm -rf "$work/llama-3.2-1b"
compare qwen2.5-0.5b 4
rm -rf "$work/qwen2.5-0.5b"
compare mistral-7b 2
rm -rf "$work/mistral-7b"
compare llama-3.1-8b 32 --decode-tokens 64 --prefill 512 --runs 5
echo "]" >> "$OUT/summaries.json"

# 3. An image of the 8B: build, list, restore in a new process with --check.
export THAW_STORE="$work/store" THAW_JAVA_OPTS="-Xmx12g"
request="$work/request.json"
echo '{"tokens": [[128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679]], "maxNewTokens": 16}' \
    > "$request"
config="{\"path\": \"$work/llama-3.1-8b\", \"maxBatch\": 1, \"maxTokens\": 256}"
{
  echo "== build $(elapsed)"
  t0=$(date +%s%N)
  timeout 300 "$thaw_home/bin/thaw" build \
      --function dev.thaw.examples.llama.LlamaFunction --config "$config" --tag llama-3.1-8b \
      --sample-request "$request" || status=1
  echo "build: $(( ($(date +%s%N) - t0) / 1000000 )) ms wall (process start to exit)"
  echo "== images $(elapsed)"; "$thaw_home/bin/thaw" images
  echo "== inspect"; "$thaw_home/bin/thaw" inspect llama-3.1-8b | grep -A12 "^profile"
  du -sh "$THAW_STORE"
  echo "== run --check (new process) $(elapsed)"
  t0=$(date +%s%N)
  timeout 300 "$thaw_home/bin/thaw" run llama-3.1-8b --request "$request" --check || status=1
  echo "run: $(( ($(date +%s%N) - t0) / 1000000 )) ms wall (process start to exit)"
  echo "== done $(elapsed), status $status"
} > "$OUT/image.txt" 2>&1

# 4. GPU tests (kernels vs twins at real shapes; profiling verdicts), in what is left of the budget: the suite
#    runs in full elsewhere (images-run.sh runs every shipped test).
left=$(( budget - ($(date +%s) - start) ))
if [ "$left" -gt 30 ]; then
  timeout "$left" "$thaw_home/bin/thaw-test" --details=tree \
      --select-class=dev.thaw.examples.llama.kernels.LlamaKernelsGpuTest \
      --select-class=dev.thaw.examples.llama.LlamaFunctionGpuProfileTest > "$work/tests.log" 2>&1 || status=1
  sed 's/\x1b\[[0-9;]*m//g' "$work/tests.log" > "$OUT/tests.txt"
else
  echo "not run: ${left} s of the ${budget} s budget left" > "$OUT/tests.txt"
fi
echo "$(elapsed) done, status $status" >> "$OUT/compare.txt"
exit $status
