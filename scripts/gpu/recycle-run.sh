#!/usr/bin/env bash
# Proves worker recycling on a GPU host: the recycling tests on CUDA. WorkerRecycleTest (a recycled worker becomes
# other images and answers their bytes exactly, the limit, a worker that cannot drop its image is ended),
# DeviceScrubTest (a dropped session's slabs read back zero, the HBM tier's keep their bytes) and TenantIsolationTest
# (on one recycled worker: the next tenant's mapped tail and 1 GiB of fresh memory read zero after the first tenant
# filled them, i.e. CUDA handed back this process's released memory, and it was scrubbed).
# Usage: OUT=<dir> scripts/gpu/recycle-run.sh <unpacked thaw dir>      (about 2 minutes)
# Then scripts/gpu/nodetrace-run.sh: recency (recycling) against no-recycle on the node trace.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/recycle-run.sh <unpacked thaw dir>}" && pwd)
work=$(mktemp -d /tmp/thaw-recycle.XXXXXX)
export THAW_DEVICE=${THAW_DEVICE:-cuda}  # THAW_DEVICE=sim: a dry run without a GPU
mkdir -p "$OUT"
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1
timeout 240 "$home/bin/thaw-test" --select-class dev.thaw.pool.WorkerRecycleTest \
  --select-class dev.thaw.pool.worker.DeviceScrubTest --select-class dev.thaw.pool.TenantIsolationTest \
  --reports-dir "$work/reports" > "$work/tests.log" 2>&1 || status=1
sed 's/\x1b\[[0-9;]*m//g' < "$work/tests.log" > "$OUT/tests.txt"
{
  echo "device: $(cat "$OUT/device.txt")"
  echo "tests: $(grep -E 'tests (successful|failed|skipped)' "$OUT/tests.txt" | tr -s ' ' | tr '\n' ';')"
  echo "status: $status"
} | tee "$OUT/summary.txt"
rm -rf "$work"
exit $status
