#!/usr/bin/env bash
# Proves on-demand restore on a GPU host (< 4 minutes): the GPU tests (validating mode: every launch instrumented
# with "resident or waited for" as the allowed set, no violation; the planted pointer-table kernel unsafe, and
# caught reading t0 early when trusted), then the benchmark: GPT-2-large and the MLP built into a fresh store and
# restored from pinned host memory, full vs on-demand vs warm, 16-token prompt -> 1 and -> 16 tokens, with a
# Chrome trace of one on-demand cold start.
# Usage (repository root on the GPU machine): OUT=<dir> scripts/gpu/ondemand-run.sh <unpacked thaw dir>
# Writes $OUT/tests.txt, $OUT/bench.txt, $OUT/ondemand-results.json, $OUT/ondemand-trace.json (Perfetto) and
# $OUT/ondemand-trace.svg (the picture for the docs).
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=<dir> scripts/gpu/ondemand-run.sh <unpacked thaw dir>}
export THAW_DEVICE=cuda
mkdir -p "$OUT"
status=0

timeout -k 10 90 "$home/bin/thaw-test" --select-class dev.thaw.image.restore.OnDemandRestoreGpuTest \
    --reports-dir /tmp/thaw-ondemand-reports > "$OUT/tests.txt" 2>&1 || status=1
sed -i 's/\x1b\[[0-9;]*m//g' "$OUT/tests.txt"
grep -E "tests (successful|failed|skipped)|on-demand validation|planted kernel" "$OUT/tests.txt"

java="$home/runtime/bin/java"
[[ -x "$java" ]] || java=java
store=/tmp/thaw-ondemand-store
rm -rf "$store"
# rounds: 5 timed (+2 warm-up) per strategy; the GPT-2-large build (profiling + snapshot) comes first.
timeout -k 10 130 "$java" ${THAW_JAVA_OPTS:-} -cp "$home/lib/*:$home/lib/test/*:$home/lib/bench/*" \
    dev.thaw.bench.restore.OnDemandBenchmark "$store" "$OUT" 5 gpt2-large > "$OUT/bench.txt" 2>&1 || status=1
cat "$OUT/bench.txt"
rm -rf "$store"
if [[ -f "$OUT/ondemand-trace.json" ]]; then
  python3 scripts/trace-svg.py "$OUT/ondemand-trace.json" "$OUT/ondemand-trace.svg" \
      "GPT-2-large cold invoke from pinned host memory, on demand (16 -> 1 token)" || status=1
fi
exit $status
