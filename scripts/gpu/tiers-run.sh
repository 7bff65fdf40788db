#!/usr/bin/env bash
# Proves the memory tiers on a GPU host: registered shared memory, exportable device memory taken by another
# process (pidfd_getfd) and mapped read-only (contract suite on CUDA), the HBM tier across worker processes
# (HbmTierTest on CUDA), packed sessions, then measures: map time of GPT-2-large's 518 buffers packed and per
# buffer, HBM import+map of its weights (MapTimeHarness), host-register time, store->cache and cache->device
# GB/s and the HBM tier for the MLP and GPT-2-large built into a fresh store (TiersHarness).
# Usage: OUT=<logs> scripts/gpu/tiers-run.sh <unpacked thaw dir>   (under 4 minutes; exits non-zero on failure)
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
thaw=${1:?usage: OUT=<logs> scripts/gpu/tiers-run.sh <unpacked thaw dir>}
thaw=$(cd "$thaw" && pwd)
[[ -x "$thaw/bin/thaw-test" ]] || thaw="$thaw/thaw"
java="$thaw/runtime/bin/java"
cp="$thaw/lib/*:$thaw/lib/test/*:$thaw/lib/bench/*"
work=/tmp/thaw-tiers
rm -rf "$work" && mkdir -p "$work" "$OUT"
export THAW_DEVICE=cuda
status=0
strip() { sed 's/\x1b\[[0-9;]*m//g'; }

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "uid $(id -u), yama ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo absent), $(uname -r)"
  df -h /dev/shm | tail -1
} > "$OUT/host.txt" 2>&1

# ~40 s: the contract suite (incl. the new registration/export/import tests), the HBM tier across processes on CUDA,
# the host cache (its worker child runs on the sim device: host-side semantics), packing.
timeout 100 "$thaw/bin/thaw-test" \
    --select-class=dev.thaw.runtime.gpu.contract.CudaDriverContractTest \
    --select-class=dev.thaw.pool.hbm.HbmTierTest \
    --select-class=dev.thaw.pool.cache.HostImageCacheTest \
    --select-class=dev.thaw.runtime.function.PackedSessionTest \
    --reports-dir="$work/reports" 2>&1 | strip > "$OUT/tests.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
cp "$work"/reports/*.xml "$OUT/" 2>/dev/null

# ~10 s: no image needed.
timeout 30 "$java" -Xmx2g -cp "$cp" dev.thaw.bench.tiers.MapTimeHarness 2>&1 | strip > "$OUT/map-time.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

# Builds each image first (GPT-2-large with seeded weights, profiled), then measures.
timeout 30 "$java" -Xmx4g -XX:MaxDirectMemorySize=4g -cp "$cp" dev.thaw.bench.tiers.TiersHarness "$work/mlp" mlp \
    2>&1 | strip > "$OUT/tiers-mlp.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
timeout 75 "$java" -Xmx8g -XX:MaxDirectMemorySize=8g -cp "$cp" dev.thaw.bench.tiers.TiersHarness "$work/gpt2" \
    gpt2-large 2>&1 | strip > "$OUT/tiers-gpt2-large.txt"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1

grep -h -E "^(device|host-register|[a-z0-9-]+\.|gpt2-large |result)" "$OUT"/map-time.txt "$OUT"/tiers-*.txt \
    > "$OUT/summary.txt" 2>/dev/null
grep -E "tests (successful|failed)|tests found" "$OUT/tests.txt" >> "$OUT/summary.txt"
rm -rf "$work"
exit $status
