#!/usr/bin/env bash
# Regenerates the speculation tests' PTX from speculation.cu. The PTX is checked in so that nobody needs nvcc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../resources/dev/thaw/runtime/speculation/speculation.ptx"
nvcc -arch=compute_80 -ptx -O3 -o "$out" "$here/speculation.cu"
echo "wrote $out"
