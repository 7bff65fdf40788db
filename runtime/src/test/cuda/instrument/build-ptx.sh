#!/usr/bin/env bash
# Regenerates the instrumentation tests' PTX from instrument.cu. The PTX is checked in so that nobody needs nvcc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../../resources/dev/thaw/runtime/ptx/instrument/instrument.ptx"
nvcc -arch=compute_80 -ptx -O3 -o "$out" "$here/instrument.cu"
echo "wrote $out"
