#!/usr/bin/env bash
# Regenerates the contract suite's PTX from contract.cu. The PTX is checked in so that nobody needs nvcc.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../resources/dev/thaw/runtime/gpu/contract/contract.ptx"
nvcc -arch=compute_80 -ptx -O3 -o "$out" "$here/contract.cu"
echo "wrote $out"
