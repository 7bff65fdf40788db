#!/usr/bin/env bash
# GPT-2-large's cold restore from the host image cache, in copies: how many, how long, how fast (issue 11,
# docs/benchmarks/copy-runs.md). The host cache's layout is the switch, both in one run:
#   shared  each distinct chunk once in the arena (the layout until now): every use of a repeated chunk (GPT-2's
#           zeroed biases, layer norms of ones) breaks its run in two;
#   runs    (the default) each image laid out as its restore copies it, repeats held again in place.
# The restore's runs along the device (a launch's promotion queues a run, not one allocation) are in both.
#  1. CopyRunsBench, in this process on the GPU, per layout: the image's copy structure, five on-demand cold restores
#     (copies, runs, first response, all resident, GB/s), then copy lists replayed back to back on one stream: the
#     restore's own with an event a run and without events, one copy per allocation with an event each (what the
#     restore queued before: every allocation promoted alone), and the whole image coalesced (the floor).
#  2. PoolBench, pooled worker processes, the host cache prepared, per layout: GPT-2-large cold to the first response
#     (16 tokens in, 1 out) five times, with when the last byte landed, its GB/s and the copies.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/copyruns-run.sh <unpacked thaw dir>  (~2-3 minutes)
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/copyruns-run.sh <unpacked thaw dir>}" && pwd)
java="$home/runtime/bin/java"; [[ -x "$java" ]] || java=java
work=$(mktemp -d /tmp/thaw-copyruns.XXXXXX)
export THAW_DEVICE=${THAW_DEVICE:-cuda} THAW_STORE="$work/store"
mkdir -p "$OUT"
status=0
strip() { sed 's/\x1b\[[0-9;]*m//g'; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1

tokens='[15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275, 21281, 39983, 5076, 24913, 29307]'
echo "{\"tokens\": [$tokens], \"maxNewTokens\": 1}" > "$work/gpt2.json"
"$home/bin/thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
    --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}' --tag gpt2:large \
    --sample-request "$work/gpt2.json" > "$OUT/build.txt" 2>&1 || status=1

echo "== 1. CopyRunsBench (in process): copy structure, on-demand restores, replays"
timeout 150 "$home/bin/thaw-bench" copy-runs \
  --store "$THAW_STORE" --image "gpt2:large=$work/gpt2.json" --runs 5 --cache-bytes 4294967296 \
  --layout shared --layout runs 2>&1 | grep -v '^\[main\] INFO' | strip > "$OUT/copyruns.txt" || status=1
grep -E 'image:|repeats|host cache:|restore [0-9]:|copy sizes|replay' "$OUT/copyruns.txt"

echo "== 2. PoolBench: pooled cold starts, the host cache prepared, per layout"
for layout in shared runs; do
  timeout 120 "$java" ${THAW_JAVA_OPTS:-} -cp "$home/lib/*:$home/lib/bench/*" dev.thaw.bench.pool.PoolBench \
    --store "$THAW_STORE" --image "gpt2:large=$work/gpt2.json" --runs 5 --acquires 200 \
    --cache-bytes 4294967296 --cache-layout $layout --sources prepared --out "$OUT/pool-$layout.json" 2>&1 \
    | grep -v '^\[main\] INFO' | strip > "$OUT/pool-$layout.txt" || status=1
  grep -E '^(host cache|gpt2)' "$OUT/pool-$layout.txt"
done

# One line per cold start: layout, cold to first response, all resident, GB/s, copies.
for layout in shared runs; do
  sed -nE "s/^gpt2:large from cache \(prepared\) run ([0-9]+): cold ([0-9.]+) ms .* all bytes resident ([0-9.]+) ms after BECOME began \(([0-9.]+) GB\/s; .* ([0-9]+) copies.*/$layout run \1: cold \2 ms, all resident \3 ms, \4 GB\/s, \5 copies/p" \
    "$OUT/pool-$layout.txt"
done > "$OUT/summary.txt"
grep -E 'restore [0-9]:|replay' "$OUT/copyruns.txt" >> "$OUT/summary.txt"
echo "== summary"; cat "$OUT/summary.txt"
[[ $(grep -c '^runs run' "$OUT/summary.txt") -ge 5 ]] || status=1
rm -rf "$work"
exit $status
