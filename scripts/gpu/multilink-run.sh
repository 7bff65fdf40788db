#!/usr/bin/env bash
# Under the PCIe floor (issue 27), on a host with two or more GPUs joined by NVLink (nvidia-h200-x2), at most 4
# minutes in all (BUDGET seconds, default 240), each part under its own timeout, the later ones cut to what is left:
#  0. the GPUs, their topology (nvidia-smi topo -m: NV18 between them) and how many there are;
#  1. contract: the driver contract on CUDA, the new calls among them: canAccessPeer, memoryInfo, setAccessFor
#     (cuMemSetAccess for another device), copyPeerAsync (cuMemcpyPeerAsync) and the unified-addressing peer copy,
#     another device's exported memory imported, mapped read-only here and read by a kernel, scratch ranges; and
#     MultiLinkWorkerTest on the two GPUs: pooled workers restoring through both links and from the other GPU's HBM
#     tier, every byte checked (≤ 90 s);
#  2. http: `thaw serve` over HTTP with GPT-2-large (built with seeded weights, 16 tokens in, 1 out), the client's
#     time per request, every Server-Timing, and from each cold start's trace when its first copy was called and its
#     last copy landed after the request reached the server (scripts/gpu/multilink_http.py):
#       a. one GPU (CUDA_VISIBLE_DEVICES=0, no HBM tier): cold from the host cache through one link;
#       b. two GPUs (no HBM tier): cold through both links (tier;desc="host-cache-multilink"; goal ≤ 24 ms), and a
#          warm GPT-2-large on the other GPU alone and while a cold start borrows its GPU's link (the helper's cost
#          at the share the server's banner names, the default --helper-share unless HELPER_SHARE says; bound 5%);
#       c. two GPUs with the HBM tier (--hbm-tier TIER_BYTES, default 1800m: GPT-2-large's weights or GPT-2-medium's,
#          not both), one instance per GPU: cold from the same GPU's tier (hbm), then, that GPU full, from the other
#          GPU's tier by a peer copy (hbm-peer; goal ≤ 1.1 × hbm + 1.55 GB at 300 GB/s), PEER_ROUNDS times (default
#          3): between two, GPT-2-medium (function g) starts there and its weights push GPT-2-large's out of that
#          GPU's tier as it scales in;
#  3. harness: MultiLinkHarness in the time left (in-process restores onto GPU 0 through one link and two, from
#     GPU 0's own tier and GPU 1's, the helper's cost to a warm GPT-2-large at shares 1.0 and 0.5, one restore per GPU
#     at once), GPT-2-large-shaped unless SHAPES says more;
#  llama (only when PARTS names it, alone: PARTS=llama, its own ≤ 5 minutes): the Llama-3.1-8B shape (seeded
#     weights, 16.06 GB) built, then 2a and 2b with it (goal ≤ 165 ms through both links; 306-313 ms through one).
# Writes $OUT/summary.txt (the SUMMARY lines, the test counts), $OUT/device.txt, $OUT/tests.txt, $OUT/http-*.txt and
# .json, $OUT/serve-*.log, $OUT/harness.txt, $OUT/multilink-results.json; exits non-zero if a part failed.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/multilink-run.sh <unpacked thaw dir>
#   PARTS=contract,http,harness (the default), HTTP_MODES="one two tiers", ROUNDS=4, PEER_ROUNDS=3,
#   SHAPES=gpt2-large, BUDGET=240, HELPER_SHARE (passed as --helper-share when set), TIER_BYTES=1800m,
#   HARNESS_SKIP (the harness's --skip: hbm,impact,sweep), LLAMA_MODES="one two" (a mode may carry its own share: "one two two:1.0"; "two" uses every GPU the host has).
#   The harness gets what the budget leaves (often nothing): PARTS=harness runs it alone, in its own 5 minutes.
# A dry run without GPUs: THAW_DEVICE=sim THAW_SIM_DEVICES=2 THAW_SIM_COPY_GBPS=2 SHAPES=tiny, and for the HTTP part a
# function the sim runs quickly in GPT-2-large's place (HTTP_MODEL=mlp HTTP_FUNCTION=dev.thaw.examples.mlp.MlpFunction
# HTTP_CONFIG='{"layers": [1024, 4096, 256], "seed": 5}' HTTP_REQUEST='{"inputs": [[0.5, ...1024 numbers]]}', and g's
# image smaller than f's with a tier that holds one of them: EVICT_CONFIG='{"layers": [1024, 2048, 256], "seed": 6}'
# TIER_BYTES=30m; nothing it measures is a GPU number).
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/multilink-run.sh <unpacked thaw dir>}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
java="$home/runtime/bin/java"; [[ -x "$java" ]] || java=java
export THAW_DEVICE=${THAW_DEVICE:-cuda}
parts=,${PARTS:-contract,http,harness},
shapes=${SHAPES:-gpt2-large}
rounds=${ROUNDS:-4}
budget=${BUDGET:-240}
evict=gpt2:medium  # g's image in the tiers mode
started=$(date +%s)
left() { echo $(( budget - ($(date +%s) - started) )); }
mkdir -p "$OUT"
work=$(mktemp -d /tmp/thaw-multilink.XXXXXX)
status=0
strip() { sed 's/\x1b\[[0-9;]*m//g'; }
summary() { grep -h '^SUMMARY' "$@" 2>/dev/null | sed 's/^SUMMARY //'; }
: > "$OUT/summary.txt"

echo "== 0. the GPUs"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
      --format=csv,noheader 2>&1 || echo "no nvidia-smi"
  nvidia-smi topo -m 2>&1 | head -12
  uname -r; nproc; free -g | sed -n 2p
} > "$OUT/device.txt"
cat "$OUT/device.txt"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[[ $THAW_DEVICE == sim ]] && gpus=${THAW_SIM_DEVICES:-1}
echo "GPUs: $gpus (THAW_DEVICE=$THAW_DEVICE), parts ${parts//,/ }, budget ${budget} s"
if (( gpus < 2 )); then
  echo "one GPU: the multi-link parts need two" | tee -a "$OUT/summary.txt"
  exit 1
fi

if [[ $parts == *,contract,* ]]; then
  echo "== 1. the driver contract on $THAW_DEVICE"
  contract=dev.thaw.runtime.gpu.contract.CudaDriverContractTest
  [[ $THAW_DEVICE == sim ]] && contract=dev.thaw.runtime.gpu.contract.SimDriverContractTest
  timeout -k 10 90 "$home/bin/thaw-test" --select-class "$contract" --select-class dev.thaw.pool.MultiLinkWorkerTest \
      --reports-dir "$OUT/reports" 2>&1 | strip > "$OUT/tests.txt" || status=1
  grep -E 'tests (successful|failed|skipped|aborted)' "$OUT/tests.txt"
  # The calls this issue added, one line each (a skipped one names its reason).
  grep -E 'eer|nother|cratch|FreeAndTotal|KnowsItsDevice|Link|Pulls' "$OUT/tests.txt" | sed 's/^[ │├└─]*//' | head -14
  grep -E 'tests (successful|failed|skipped)' "$OUT/tests.txt" | sed 's/^\[ */contract: /; s/ *\]$//' \
      >> "$OUT/summary.txt"
fi

# serve NAME SECONDS FLAGS... : thaw serve on $work/serve-NAME.json until the client is done (SIGTERM after); the
# client's output to $OUT/http-NAME.txt. Its port is the one the server says it listens on.
serve() {
  local name=$1 seconds=$2; shift 2
  "$home/bin/thaw" serve --port 0 --config "$work/serve-${name%%-*}.json" --idle-workers 2 "$@" \
      > "$OUT/serve-$name.log" 2>&1 &
  local pid=$! port=""
  for _ in $(seq 1 600); do
    port=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$OUT/serve-$name.log" | head -1 | sed 's/.*://')
    [[ -n $port ]] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $port ]]; then
    echo "$name: thaw serve did not listen"; tail -20 "$OUT/serve-$name.log"; kill -KILL $pid 2>/dev/null
    status=1; return
  fi
  # The share the server lends helpers' links at, as its banner says (none on one GPU).
  local share
  share=$(grep -o 'each at share [0-9.]*' "$OUT/serve-$name.log" | head -1 | awk '{print $NF}')
  timeout -k 5 "$seconds" python3 "$here/multilink_http.py" --port "$port" --request "$request" --model "$model" \
      --image-gb "$image_gb" --rounds "$rounds" --peer-rounds "${PEER_ROUNDS:-3}" --share "${share:-none}" \
      --out "$OUT/http-$name.json" "${client[@]}" 2>&1 | tee "$OUT/http-$name.txt" || status=1
  kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
  grep 'cold start on worker' "$OUT/serve-$name.log" | strip | sed 's/.*dev.thaw.server.instances - //' | cut -c1-240
  summary "$OUT/http-$name.txt" >> "$OUT/summary.txt"
  # The share each multi-link start used (the banner's unless every lent GPU hosted no instance: then 1).
  local used
  used=$(grep -o 'as well, at share [0-9.]*' "$OUT/serve-$name.log" | awk '{print $NF}' | sort | uniq -c \
      | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')
  [[ -n $used ]] && echo "http $name: multi-link starts at share $used" >> "$OUT/summary.txt"
}

# http TAG: parts 2a-2c (or, for the 8B, 2a and 2b) with the image TAG, each under the time left.
http() {
  local tag=$1 modes=$2 cache=$3 budget_each=$4
  echo "{\"functions\": {\"f\": {\"image\": \"$tag\", \"keepAlive\": \"1s\"}}}" > "$work/serve-one.json"
  echo "{\"functions\": {\"f\": {\"image\": \"$tag\", \"keepAlive\": \"1s\"}, \"h\": {\"image\": \"$tag\",
      \"minInstances\": 1, \"keepAlive\": \"10m\"}}}" > "$work/serve-two.json"
  # One instance per GPU (--max-workers 3 less 2 idle): the blocker fills the GPU whose tier holds f's weights; g (a
  # smaller image) pushes f's weights out of the other GPU's tier between two hbm-peer starts.
  echo "{\"functions\": {\"f\": {\"image\": \"$tag\", \"keepAlive\": \"1s\"}, \"blocker\": {\"image\": \"$tag\",
      \"keepAlive\": \"10m\"}, \"g\": {\"image\": \"$evict\", \"keepAlive\": \"1s\"}}}" > "$work/serve-tiers.json"
  for spec in $modes; do
    # A mode may name the helper share it runs at (two:1.0), over HELPER_SHARE; its files are then named two-1.0.
    local mode=${spec%%:*} share_of=${spec#*:} name=${spec/:/-}
    [[ $share_of == "$spec" ]] && share_of=${HELPER_SHARE:-}
    local each=$budget_each
    [[ $mode == tiers ]] && each=$(( budget_each * 3 / 2 ))
    local t=$(( $(left) < each ? $(left) : each ))
    if (( t < 40 )); then
      echo "== $mode: not run, ${t} s of the budget left" | tee -a "$OUT/summary.txt"; continue
    fi
    echo "== http $mode ($model, at most $t s)"
    local shared=()
    [[ -n $share_of ]] && shared=(--helper-share "$share_of")
    case $mode in
      one) client=(--mode one --idle 2); CUDA_VISIBLE_DEVICES=0 THAW_SIM_DEVICES=1 serve one "$t" \
          --host-cache "$cache" --hbm-tier 0 --max-helpers 0 ;;
      two) client=(--mode two --idle $(( 2 * gpus )) --gpus "$gpus"); serve "$name" "$t" --host-cache "$cache" --hbm-tier 0 "${shared[@]}" ;;
      tiers) client=(--mode tiers --idle 4); serve "$name" "$t" --host-cache "$cache" --hbm-tier "${TIER_BYTES:-1800m}" \
          --max-workers 3 "${shared[@]}" ;;
    esac
  done
}

if [[ $parts == *,http,* ]]; then
  echo "== 2. GPT-2-large over HTTP, 1 GPU against 2 ($(left) s left)"
  export THAW_STORE="$work/store"
  request="$work/gpt2.json"; model=${HTTP_MODEL:-gpt2-large}; image_gb=1.55
  echo "${HTTP_REQUEST:-{\"tokens\": [[15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275,
      21281, 39983, 5076, 24913, 29307]], \"maxNewTokens\": 1\}}" > "$request"
  timeout -k 5 60 "$home/bin/thaw" build --function "${HTTP_FUNCTION:-dev.thaw.examples.gpt2.Gpt2Function}" \
      --config "${HTTP_CONFIG:-{\"model\": \"gpt2-large\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 64\}}" \
      --tag gpt2:large --sample-request "$request" > "$OUT/build-gpt2.txt" 2>&1 \
      || { echo "build failed"; tail "$OUT/build-gpt2.txt"; status=1; }
  if [[ ${HTTP_MODES:-one two tiers} == *tiers* ]]; then
    timeout -k 5 60 "$home/bin/thaw" build --function "${HTTP_FUNCTION:-dev.thaw.examples.gpt2.Gpt2Function}" \
        --config "${EVICT_CONFIG:-{\"model\": \"gpt2-medium\", \"seed\": 2, \"maxBatch\": 1, \"maxTokens\": 64\}}" \
        --tag "$evict" --sample-request "$request" > "$OUT/build-evict.txt" 2>&1 \
        || { echo "build failed"; tail "$OUT/build-evict.txt"; status=1; }
  fi
  http gpt2:large "${HTTP_MODES:-one two tiers}" 4g 60
fi

if [[ $parts == *,llama,* ]]; then
  echo "== llama: the 8B shape over HTTP, 1 GPU against 2 ($(left) s left)"
  export THAW_STORE="$work/store-8b" THAW_JAVA_OPTS="${THAW_JAVA_OPTS:--Xmx12g}"
  request="$work/llama.json"; model=llama-3.1-8b; image_gb=16.06
  echo '{"tokens": [[128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13, 578, 4062, 14198, 39935,
      35308]], "maxNewTokens": 1}' > "$request"
  timeout -k 5 150 "$home/bin/thaw" build --function dev.thaw.examples.llama.LlamaFunction \
      --config '{"model": "llama-3.1-8b", "seed": 1, "maxBatch": 1, "maxTokens": 64}' --tag llama:8b \
      --sample-request "$request" > "$OUT/build-llama.txt" 2>&1 || { echo "build failed"; tail "$OUT/build-llama.txt"; status=1; }
  echo "build: $(grep -iE 'built|bytes' "$OUT/build-llama.txt" | tail -1)"
  rounds=3 http llama:8b "${LLAMA_MODES:-one two}" 24g 100
fi

if [[ $parts == *,harness,* ]]; then
  t=$(left)
  if (( t < 45 )); then
    echo "== 3. MultiLinkHarness: not run, ${t} s of the budget left" | tee -a "$OUT/summary.txt"
  else
    echo "== 3. MultiLinkHarness ($shapes, 3 rounds, at most $t s)"
    timeout -k 10 "$t" "$java" ${THAW_JAVA_OPTS:-} -cp "$home/lib/*:$home/lib/bench/*" \
        dev.thaw.bench.restore.MultiLinkHarness --out "$OUT" --shapes "$shapes" --rounds 3 \
        ${HARNESS_SKIP:+--skip "$HARNESS_SKIP"} 2>&1 \
        | grep -v '^\[main\] INFO' | strip > "$OUT/harness.txt"
    rc=${PIPESTATUS[0]}
    [[ $rc == 0 ]] || { echo "harness exit status $rc"; status=1; }
    grep -v '^SUMMARY' "$OUT/harness.txt" | grep -E '^(\||link|peers|GPU|read kernel|impact|sweep|FAILED|[a-z0-9-]+: )' \
        | head -60
    { summary "$OUT/harness.txt"; echo "harness exit status $rc"; } >> "$OUT/summary.txt"
  fi
fi

rm -rf "$work"
echo "== summary ($(( $(date +%s) - started )) s)"
cat "$OUT/summary.txt"
exit $status
