#!/usr/bin/env bash
# The cold time to first token (restore + prefill) of a Llama-3.1-8B-shaped model with a 2000-token prompt, from
# each tier, on one H200 (issue 23; goals: <= 100 ms from the HBM tier, <= 360 ms from the host cache), about 5
# minutes, each part under its own timeout and within COLDTTFT_BUDGET_S (480 s) in all:
#  1. the model: random bf16 weights written by transformers (scripts/llm/serving_torch.py write), with its
#     byte-level tokenizer.json (every regular id decodes to text) and no end-of-sequence id;
#  2. `thaw build` of LlamaFunction on it, maxBatch MAX_BATCH (1) of maxTokens MAX_TOKENS (the prompt + 64), with a
#     sample request of the measured shape (its profile is what lets the HBM tier keep the weights);
#  3. per tier in TIERS ("hbm host-cache"), a `thaw serve` of its own (pool-backed, HOST_CACHE of host cache, one
#     idle worker): hbm with --hbm-tier HBM_TIER (20g), host-cache with --hbm-tier 0; against it ServingHarness
#     coldttft: the instance started once (not counted), the warm time to first token and the function's own time
#     for the same request (medians of 3), then ROUNDS cold rounds (5), each the function registered again (scaled
#     to zero) until its image waits in that tier with a worker idle, then one streamed /v1/completions of
#     PROMPT_TOKENS random ids (2000) and NEW_TOKENS (1): the client's time to the first token, the tier the
#     instance's bytes came from and its start phases (acquire, map, restore-wait); last, one cold native invoke
#     with its Server-Timing (queue, acquire, map, restore-wait, invoke, function, server and the tier).
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/coldttft-run.sh <unpacked thaw dir>
#   PROMPT_TOKENS=2000 NEW_TOKENS=1 ROUNDS=5 TIERS="hbm host-cache" MAX_BATCH=1 MAX_TOKENS=<prompt + 64>
#   HOST_CACHE=20g HBM_TIER=20g VOCAB=128000 COLDTTFT_BUDGET_S=480 COLDTTFT_PORT=18081
#   SETTLE_MS=3000 (the node idle this long after each scale-to-zero before the cold request: a worker started
#   after the scale-in has warmed up and prepared the image, as on a node idle a while; 0 measures right after it)
#   COLDTTFT_MODEL=<a Llama folder with a tokenizer.json> (skips step 1 and keeps the folder)
# A dry run without a GPU (nothing it measures is a GPU number): THAW_DEVICE=sim COLDTTFT_MODEL=<a small Llama folder
# with a tokenizer.json, its weights several MiB so that whole 2 MiB slabs of them are read-only (smaller ones share
# their slabs with written buffers, and the HBM tier keeps nothing)> PROMPT_TOKENS=16 VOCAB=<below its vocabulary's
# special ids> ROUNDS=3 HOST_CACHE=256m HBM_TIER=256m.
# Writes $OUT/summary.txt (the image's size and read-only part, then a line per tier: median, range, the start's
# phases, the warm reference, the goal), $OUT/coldttft.txt (the log, every round), $OUT/coldttft-<tier>.json (every
# sample, median, min, max), $OUT/serve-<tier>.log (each server's log), $OUT/device.txt. Work files under
# /dev/shm/thaw-coldttft (about 35 GB at the peak), removed at the end. Exits non-zero if a part failed or ran out of
# time, or a round started from another tier than the one it measures.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/coldttft-run.sh <unpacked thaw dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
java="$home/runtime/bin/java"; [[ -x "$java" ]] || java=java
thaw="$home/bin/thaw"
work=${COLDTTFT_WORK:-/dev/shm/thaw-coldttft}
port=${COLDTTFT_PORT:-18081}
budget=${COLDTTFT_BUDGET_S:-480}
prompt=${PROMPT_TOKENS:-2000}
new_tokens=${NEW_TOKENS:-1}
rounds=${ROUNDS:-5}
tiers=${TIERS:-hbm host-cache}
vocab=${VOCAB:-128000}
max_batch=${MAX_BATCH:-1}
host_cache=${HOST_CACHE:-20g}
hbm_tier=${HBM_TIER:-20g}
model=${COLDTTFT_MODEL:-$work/model}
whole() { [[ $1 =~ ^[1-9][0-9]{0,8}$ ]] || { echo "PROMPT_TOKENS, NEW_TOKENS, ROUNDS, MAX_BATCH, VOCAB and MAX_TOKENS are" \
    "positive whole numbers, not '$1'" >&2; exit 2; }; }
for n in "$prompt" "$new_tokens" "$rounds" "$max_batch" "$vocab"; do whole "$n"; done
max_tokens=${MAX_TOKENS:-$(( prompt + 64 ))}
whole "$max_tokens"
(( prompt + new_tokens <= max_tokens )) || { echo "PROMPT_TOKENS + NEW_TOKENS ($prompt + $new_tokens) is more than" \
    "MAX_TOKENS ($max_tokens), the KV cache's length" >&2; exit 2; }
for t in $tiers; do
  [[ $t == hbm || $t == host-cache ]] || { echo "TIERS names hbm and host-cache, not '$t'" >&2; exit 2; }
done
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
export THAW_ADMIN_TOKEN=${THAW_ADMIN_TOKEN:-coldttft-run-$RANDOM$RANDOM$RANDOM}
status=0
start=$(date +%s)
log="$OUT/coldttft.txt"
: > "$log"
say() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$log"; }
# limit CAP: CAP seconds, or what is left of the budget if less (at least 5).
limit() { local left=$(( budget - ($(date +%s) - start) )); (( left < $1 )) && echo $(( left > 5 ? left : 5 )) || echo "$1"; }

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  "$java" -version 2>&1 | head -1
  nproc; free -g | sed -n 2p; df -h /dev/shm | tail -1
} > "$OUT/device.txt" 2>&1
tee -a "$log" < "$OUT/device.txt"

if [[ -z ${COLDTTFT_MODEL:-} ]]; then
  say "== 1. the model (transformers, random bf16, 32 layers) and its tokenizer"
  timeout -k 5 "$(limit 150)" python3 "$repo/scripts/llm/serving_torch.py" write --dir "$model" >> "$log" 2>&1 \
      || { say "writing the model failed"; exit 1; }
  tail -1 "$log"
fi

say "== 2. thaw build (maxBatch $max_batch, maxTokens $max_tokens)"
config="{\"path\": \"$model\", \"maxBatch\": $max_batch, \"maxTokens\": $max_tokens}"
# The sample request is one of the measured shape: its profile names the allocations no request writes (the weights),
# which alone the HBM tier keeps; without one the tier holds nothing of the image.
python3 -c "import json, random, sys; r = random.Random(23); n, v, t = map(int, sys.argv[1:4]); \
print(json.dumps({'tokens': [[r.randrange(v) for _ in range(n)]], 'maxNewTokens': t}))" \
    "$prompt" "$vocab" "$new_tokens" > "$work/sample.json"
THAW_JAVA_OPTS="-Xmx12g" timeout -k 5 "$(limit 150)" "$thaw" build --function dev.thaw.examples.llama.LlamaFunction \
    --config "$config" --tag llama:1 --sample-request "$work/sample.json" >> "$log" 2>&1 \
    || { say "thaw build failed"; tail -20 "$log"; exit 1; }
# What the HBM tier may keep of the image: the allocations the profile saw no write to (none when a launch was not
# validated exact: then the hbm rounds wait for a tier that never fills, and fail saying so).
"$thaw" inspect --json llama:1 2>> "$log" | python3 -c "import json, sys; m = json.load(sys.stdin); \
w = m['profile'].get('writtenAllocations'); total = sum(a['size'] for a in m['allocations']); \
ro = [a for a in m['allocations'] if w is not None and a['name'] not in w]; \
k = m['profile']['kernels']; bad = sorted(n for n, v in k.items() if v.get('verdict') != 'exact'); \
print('image: %.2f GB; read-only (what the HBM tier may keep): %s; kernels %d exact, %d not%s' % (total / 1e9, \
'unknown' if w is None else '%d allocations, %.2f GB' % (len(ro), sum(a['size'] for a in ro) / 1e9), \
len(k) - len(bad), len(bad), (': ' + ', '.join(bad)) if bad else ''))" 2>&1 | tee -a "$log"
# The image holds the weights; the folder is not read again (the tokenizer is: it stays).
[[ -z ${COLDTTFT_MODEL:-} ]] && rm -f "$model"/*.safetensors

n=3
for tier in $tiers; do
  hbm=0; [[ $tier == hbm ]] && hbm=$hbm_tier
  say "== $n. $tier: thaw serve --host-cache $host_cache --hbm-tier $hbm, $rounds cold rounds of $prompt tokens in," \
      "$new_tokens out"
  n=$(( n + 1 ))
  THAW_JAVA_OPTS="-Xmx4g" "$thaw" serve --port "$port" --function llama=llama:1 --host-cache "$host_cache" \
      --hbm-tier "$hbm" --idle-workers 1 > "$OUT/serve-$tier.log" 2>&1 &
  server=$!
  ready=0
  for _ in $(seq 1 "$(limit 90)"); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v2/health/ready', timeout=2)" \
        2> /dev/null; then
      ready=1
      break
    fi
    kill -0 "$server" 2>/dev/null || break
    sleep 1
  done
  if (( ready )); then
    say "ready"
    timeout -k 5 "$(limit 150)" "$java" -Xmx2g -cp "$home/lib/*:$home/lib/bench/*" \
        dev.thaw.bench.serving.ServingHarness coldttft --url "http://127.0.0.1:$port" --model llama --image llama:1 \
        --tier "$tier" --prompt-tokens "$prompt" --tokens "$new_tokens" --runs "$rounds" --vocab "$vocab" \
        --settle-ms "${SETTLE_MS:-3000}" \
        --out "$OUT" 2>&1 | tee -a "$log" | grep -v '^\[main\] INFO'
    rc=${PIPESTATUS[0]}
    [[ $rc == 0 ]] || { say "coldttft from $tier: exit status $rc"; status=1; }
  else
    say "thaw serve never became ready"
    tail -20 "$OUT/serve-$tier.log" | tee -a "$log"
    status=1
  fi
  kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  server=""
done

{
  grep -h '^image: ' "$log"
  grep -h '^SUMMARY' "$log" | sed 's/^SUMMARY //'
  echo "status $status, $(( $(date +%s) - start )) s"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
(( $(date +%s) - start > budget )) && { say "over the ${budget} s budget"; status=1; }
exit $status
