#!/usr/bin/env bash
# Proves the driver layer on a GPU host: unpacks the distribution, runs the CLI check, the contract suite
# against CUDA (and the sim), the native launch baseline and the JMH launch benchmark. Writes logs to $OUT.
#
# Usage (from the repository root on the GPU machine):
#   OUT=/some/dir scripts/gpu/foundation-run.sh [tarball]      stages: THAW_STAGES="facts check tests native bench"
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
tarball=${1:-$(ls .device/thaw-*-linux-x86_64.tar.xz | head -1)}
stages=${THAW_STAGES:-facts check tests native bench}
root=/tmp/thaw-run
rm -rf "$root" && mkdir -p "$root" && tar xJf "$tarball" -C "$root"
thaw="$root/thaw"
repo=$(pwd)
status=0

has() { [[ " $stages " == *" $1 "* ]]; }

if has facts; then
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(uname -srm)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
    echo "tarball: $(basename "$tarball") $(stat -c %s "$tarball") bytes"
    "$thaw/runtime/bin/java" -version 2>&1 | head -1
    "$thaw/bin/thaw" devices
  } 2>&1 | tee "$OUT/facts.txt"
fi

if has check; then
  THAW_DEVICE=cuda "$thaw/bin/thaw" check 2>&1 | tee "$OUT/check.txt" || status=1
fi

if has tests; then
  THAW_DEVICE=cuda "$thaw/bin/thaw-test" --reports-dir "$root/reports" 2>&1 | tee "$OUT/tests.txt" || status=1
  cp "$root"/reports/*.xml "$OUT/" 2>/dev/null
fi

if has native; then
  gcc -O2 -o "$root/launch_baseline" "$repo/benchmarks/src/main/native/launch_baseline.c" \
    -I/usr/local/cuda/include -L/usr/lib -lcuda && "$root/launch_baseline" 2>&1 | tee "$OUT/native.txt" || status=1
fi

if has bench; then
  THAW_DEVICE=cuda "$thaw/bin/thaw-bench" LaunchBenchmark -f 1 -wi 3 -w 2s -i 5 -r 2s 2>&1 | tee "$OUT/bench.txt" || status=1
fi
exit $status
