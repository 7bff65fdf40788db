#!/usr/bin/env bash
# Proves the context pool on a GPU host: the pool's tests on CUDA (lifecycle, faults, tenant isolation — the
# driver must zero a previous tenant's memory — parent killed, host cache), then PoolBench (spawn-to-ready and
# its phases, acquire() latency, BECOME from the store and from the host cache, first and later invokes in a
# pooled worker) for the MLP and GPT-2-large, against `thaw run` of the same images in a fresh process.
# Usage: OUT=<dir> scripts/gpu/pool-run.sh <unpacked thaw dir>      (about 2-3 minutes)
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/pool-run.sh <unpacked thaw dir>}" && pwd)
java="$home/runtime/bin/java"
[[ -x "$java" ]] || java=java
work=$(mktemp -d /tmp/thaw-pool.XXXXXX)
export THAW_DEVICE=${THAW_DEVICE:-cuda} THAW_STORE="$work/store"  # THAW_DEVICE=sim: a dry run without a GPU
mkdir -p "$OUT"
status=0
strip() { sed 's/\x1b\[[0-9;]*m//g'; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1

# 1. The pool's tests on the GPU (the same classes CI runs on the sim device).
tests=(dev.thaw.pool.ContextPoolTest dev.thaw.pool.WorkerFaultTest dev.thaw.pool.TenantIsolationTest
  dev.thaw.pool.ParentKilledTest dev.thaw.pool.HostCacheWorkerTest dev.thaw.pool.worker.WorkerProtocolTest
  dev.thaw.pool.CorruptChunkTest dev.thaw.pool.protocol.FrameCodecTest dev.thaw.pool.ContextPoolOptionsTest)
selectors=()
for t in "${tests[@]}"; do selectors+=(--select-class "$t"); done
timeout 150 "$home/bin/thaw-test" "${selectors[@]}" --reports-dir "$work/reports" > "$work/tests.log" 2>&1 \
  || status=1
strip < "$work/tests.log" > "$OUT/tests.txt"

# 2. The images: the MLP and GPT-2-large (seeded weights), each with the request the benchmark sends.
python3 - "$work" <<'PY'
import json, random, sys
w = sys.argv[1]
r = random.Random(7)
json.dump({"inputs": [[round(r.uniform(-1, 1), 3) for _ in range(64)] for _ in range(2)]}, open(w + "/mlp.json", "w"))
json.dump({"tokens": [[15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275, 21281, 39983,
                       5076, 24913, 29307]], "maxNewTokens": 1}, open(w + "/gpt2.json", "w"))
PY
{
  echo "== build mlp"
  "$home/bin/thaw" build --function dev.thaw.examples.mlp.MlpFunction \
      --config '{"layers": [64, 256, 256, 10], "seed": 42}' --tag mlp --sample-request "$work/mlp.json" || status=1
  echo "== build gpt2-large"
  "$home/bin/thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
      --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}' --tag gpt2-large \
      --sample-request "$work/gpt2.json" || status=1
} > "$OUT/build.txt" 2>&1

# 3. The baseline: `thaw run` in a fresh process (JVM, cuInit, context, store, full restore, one request).
{
  for tag in mlp gpt2-large; do
    req="$work/mlp.json"; [[ $tag == gpt2-large ]] && req="$work/gpt2.json"
    for i in 1 2 3; do
      start=$(date +%s%N)
      "$home/bin/thaw" run "$tag" --request "$req" > "$work/run.txt" 2>&1 || status=1
      end=$(date +%s%N)
      echo "== thaw run $tag ($i): whole process $(( (end - start) / 1000000 )) ms"
      grep -v '^\[main\] INFO' "$work/run.txt" | tail -9
    done
  done
} > "$OUT/thaw-run.txt" 2>&1

# 4. The pool benchmark.
timeout 120 "$java" ${THAW_JAVA_OPTS:-} -cp "$home/lib/*:$home/lib/bench/*" dev.thaw.bench.pool.PoolBench \
  --store "$THAW_STORE" --image "mlp=$work/mlp.json" --image "gpt2-large=$work/gpt2.json" --runs 3 \
  --acquires 20000 --cache-bytes 4294967296 --out "$OUT/pool-bench.json" > "$work/bench.log" 2>&1 || status=1
grep -v '^\[main\] INFO' "$work/bench.log" | strip > "$OUT/pool-bench.txt"

{
  echo "device: $(cat "$OUT/device.txt")"
  echo "tests: $(grep -E 'tests (successful|failed|skipped)' "$OUT/tests.txt" | tr -s ' ' | tr '\n' ';')"
  grep -E '^(worker|acquire|mlp|gpt2)' "$OUT/pool-bench.txt"
  grep -E '^== thaw run' "$OUT/thaw-run.txt"
  echo "status: $status"
} > "$OUT/summary.txt"
rm -rf "$work"
exit $status
