#!/usr/bin/env bash
# Regenerates the checked-in PTX of the tensor-parallel collectives from collective.cu.
#
#   build-collective-ptx.sh [out.ptx]    (default: ../resources/dev/thaw/examples/collective/collective.ptx)
#
# compute_80 PTX, JIT-compiled by the driver for any newer GPU (A100 … H100/H200), like the other examples.
# Deterministic for one nvcc version: CollectivePtxTest regenerates it into a temp file and compares. Needs nvcc (CUDA
# 13.0 here), not a GPU.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../resources/dev/thaw/examples/collective/collective.ptx}"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
mkdir -p "$(dirname "$out")"
# Run from the source folder with a relative name, so nothing about this checkout can reach the output.
cd "$here"
"$nvcc" -arch=compute_80 -ptx -O3 -o "$out" collective.cu
echo "wrote $out ($("$nvcc" --version | tail -1))"
