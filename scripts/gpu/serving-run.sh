#!/usr/bin/env bash
# Serving a Llama-3.1-8B-shaped model on one H200 (issue 24: streaming and continuous batching), about 4 minutes,
# each part under its own timeout and within SERVING_BUDGET_S (290 s) in all:
#  1. the model: random bf16 weights written by transformers (scripts/llm/serving_torch.py write: hf_reference.py's
#     shape and initialisation), with a byte-level tokenizer.json whose every regular id decodes to ASCII text, and no
#     end-of-sequence id (every completion runs to its max_tokens);
#  2. the same load through PyTorch: transformers' batched generate (sdpa, bf16), 32 prompts x 256 greedy tokens and
#     one prompt alone (serving_torch.py bench);
#  3. `thaw build` of LlamaFunction on it, maxBatch 64 (64 KV-cache rows) of maxTokens 320;
#  4. `thaw serve` (pool-backed instance, 20 GiB host cache, 20 GiB HBM tier) and ServingHarness against it over
#     HTTP, streamed /v1/completions of 32-token prompts and 256 new tokens:
#       baseline  the function's own prompt pass (+ head) and warm decode step, from Server-Timing's function time;
#       single    time to first token and inter-token latency of one stream at a time (3 runs after a warm-up);
#       load 32   32 streams at once: tokens/s, time to first token, inter-token p50/p99;
#       load 64   64 streams at once (the instance's every KV-cache row): none may fail;
#       cold      the function registered again (scaled to zero; its weights in the HBM tier), one streamed request,
#                 then registered again and 32 at once: the first's first token against the one alone's;
#  5. the goals (ServingHarness report): TTFT <= prompt pass + 2 ms; one stream's inter-token <= 1.1 x the warm decode
#     step; 32 streams >= 20 x one stream's tokens/s with inter-token p99 <= 2 x one stream's; 64 streams with no
#     failure; the first of 32 cold requests within the cold single's TTFT + 10%; PyTorch's numbers beside Thaw's.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/serving-run.sh <unpacked thaw dir>
# A dry run without a GPU (nothing it measures is a GPU number): THAW_DEVICE=sim SERVING_MODEL=<a small Llama folder
# with a tokenizer.json> SERVING_TORCH=0 PROMPT_TOKENS=8 TOKENS=40 VOCAB=300 MAX_BATCH=64 MAX_TOKENS=64.
# Writes $OUT/summary.txt (the SUMMARY lines and the goals), $OUT/serving.txt (the log), $OUT/serve.log (the
# server's), $OUT/*.json (each phase's numbers, torch.json PyTorch's). Work files under /dev/shm/thaw-serving
# (about 50 GB at the peak), removed at the end. Exits non-zero if a part failed or ran out of time.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/serving-run.sh <unpacked thaw dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
java="$home/runtime/bin/java"; [[ -x "$java" ]] || java=java
thaw="$home/bin/thaw"
work=${SERVING_WORK:-/dev/shm/thaw-serving}
port=${SERVING_PORT:-18080}
budget=${SERVING_BUDGET_S:-290}
prompt=${PROMPT_TOKENS:-32}
tokens=${TOKENS:-256}
vocab=${VOCAB:-128000}
max_batch=${MAX_BATCH:-64}
max_tokens=${MAX_TOKENS:-320}
model=${SERVING_MODEL:-$work/model}
mkdir -p "$OUT"
rm -rf "$work" && mkdir -p "$work"
server=""
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
export THAW_DEVICE=${THAW_DEVICE:-cuda} THAW_STORE="$work/store"
export THAW_ADMIN_TOKEN=${THAW_ADMIN_TOKEN:-serving-run-$RANDOM$RANDOM$RANDOM}
status=0
start=$(date +%s)
log="$OUT/serving.txt"
: > "$log"
say() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$log"; }
# limit CAP: CAP seconds, or what is left of the budget if less (at least 5).
limit() { local left=$(( budget - ($(date +%s) - start) )); (( left < $1 )) && echo $(( left > 5 ? left : 5 )) || echo "$1"; }
harness() {
  local cap=$1 phase=$2
  shift 2
  timeout -k 5 "$(limit "$cap")" "$java" -Xmx2g -cp "$home/lib/*:$home/lib/bench/*" \
      dev.thaw.bench.serving.ServingHarness "$phase" --url "http://127.0.0.1:$port" --model llama \
      --prompt-tokens "$prompt" --tokens "$tokens" --vocab "$vocab" --out "$OUT" "$@" 2>&1 | tee -a "$log" | grep '^SUMMARY'
  local rc=${PIPESTATUS[0]}
  [[ $rc == 0 ]] || { say "harness $phase: exit status $rc"; status=1; }
}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  "$java" -version 2>&1 | head -1
  nproc; free -g | sed -n 2p; df -h /dev/shm | tail -1
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt" | tee -a "$log"

if [[ -z ${SERVING_MODEL:-} ]]; then
  say "== 1. the model (transformers, random bf16, 32 layers) and its tokenizer"
  timeout -k 5 "$(limit 150)" python3 "$repo/scripts/llm/serving_torch.py" write --dir "$model" >> "$log" 2>&1 \
      || { say "writing the model failed"; exit 1; }
  tail -1 "$log"
fi

if [[ ${SERVING_TORCH:-1} != 0 ]]; then
  say "== 2. PyTorch batched generate, 32 x $tokens and 1 x $tokens"
  timeout -k 5 "$(limit 110)" python3 "$repo/scripts/llm/serving_torch.py" bench --dir "$model" \
      --out "$OUT/torch.json" --streams 32 --tokens "$tokens" --prompt-tokens "$prompt" 2>&1 | tee -a "$log" \
      | grep '^SUMMARY'
  [[ ${PIPESTATUS[0]} == 0 ]] || { say "the PyTorch side failed"; status=1; }
fi

say "== 3. thaw build (maxBatch $max_batch, maxTokens $max_tokens)"
config="{\"path\": \"$model\", \"maxBatch\": $max_batch, \"maxTokens\": $max_tokens}"
# A sample request of the served shape: its profile names the allocations no request writes (the weights), which
# alone the HBM tier keeps between the cold phase's starts; without one the tier holds nothing of the image.
python3 -c "import json, random, sys; r = random.Random(23); n, v, t = map(int, sys.argv[1:4]); \
print(json.dumps({'tokens': [[r.randrange(v) for _ in range(n)]], 'maxNewTokens': t}))" \
    "$prompt" "$vocab" 2 > "$work/sample.json"
THAW_JAVA_OPTS="-Xmx12g" timeout -k 5 "$(limit 120)" "$thaw" build --function dev.thaw.examples.llama.LlamaFunction \
    --config "$config" --tag llama:1 --sample-request "$work/sample.json" >> "$log" 2>&1 \
    || { say "thaw build failed"; exit 1; }
# The image holds the weights; the folder is not read again (the tokenizer is: it stays).
[[ -z ${SERVING_MODEL:-} ]] && rm -f "$model"/*.safetensors

say "== 4. thaw serve"
THAW_JAVA_OPTS="-Xmx4g" "$thaw" serve --port "$port" --function llama=llama:1 --host-cache 20g --hbm-tier 20g \
    --idle-workers 1 > "$OUT/serve.log" 2>&1 &
server=$!
ready=0
for _ in $(seq 1 "$(limit 90)"); do
  if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/v2/health/ready', timeout=2)" \
      2> /dev/null; then
    ready=1
    break
  fi
  kill -0 "$server" 2>/dev/null || break
  sleep 1
done
(( ready )) || { say "thaw serve never became ready"; tail -20 "$OUT/serve.log" | tee -a "$log"; exit 1; }
say "ready"

say "== baseline (the function's own prompt pass and decode step)"
harness 40 baseline --runs 5
say "== single stream"
harness 40 single --runs 3
say "== 32 streams"
harness 60 load --streams 32
say "== 64 streams"
harness 60 load --streams 64
say "== cold start, alone and under 32 at once"
harness 90 cold --streams 32 --image llama:1
kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
server=""

say "== 5. goals"
{
  grep -h '^SUMMARY' "$log" | sed 's/^SUMMARY //'
  "$java" -cp "$home/lib/*:$home/lib/bench/*" dev.thaw.bench.serving.ServingHarness report --out "$OUT" 2>&1 \
      | sed 's/^SUMMARY //'
  echo "status $status, $(( $(date +%s) - start )) s"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
(( $(date +%s) - start > budget )) && { say "over the ${budget} s budget"; status=1; }
exit $status
