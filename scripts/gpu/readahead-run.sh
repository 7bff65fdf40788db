#!/usr/bin/env bash
# The store tier's read-ahead on a GPU (< 2 minutes): the on-demand restore's GPU tests, from the store and from the
# host cache, in validating mode (every launch instrumented; none may touch a byte that is neither resident nor
# waited for) with the restore resources' default staging (8 slots of 16 MiB, read ahead into all of them); the
# restore resources' and the read-only slabs' GPU tests. The figures come from coldpath-run.sh (PoolBench: GPT-2-large
# from the store) and firststart-run.sh (GPT-2 small's first invoke) in the same call.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/readahead-run.sh <unpacked thaw dir>
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=<dir> scripts/gpu/readahead-run.sh <unpacked thaw dir>}
export THAW_DEVICE=cuda
mkdir -p "$OUT"
status=0
timeout -k 10 100 "$home/bin/thaw-test" \
    --select-class dev.thaw.image.restore.OnDemandRestoreGpuTest \
    --select-class dev.thaw.image.restore.RestoreResourcesGpuTest \
    --select-class dev.thaw.image.restore.SlabProtectionGpuTest \
    --reports-dir /tmp/thaw-readahead-reports > "$OUT/tests.txt" 2>&1 || status=1
sed -i 's/\x1b\[[0-9;]*m//g' "$OUT/tests.txt"
grep -E "tests (successful|failed|skipped)|on-demand validation|MethodSource|✘" "$OUT/tests.txt" | head -40
exit $status
