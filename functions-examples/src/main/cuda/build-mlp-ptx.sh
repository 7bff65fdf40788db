#!/usr/bin/env bash
# Regenerates the checked-in PTX of the mlp example function from mlp.cu.
#
# compute_80 PTX (tensor-core TF32 WMMA needs sm_80) is JIT-compiled by the driver for any newer GPU
# (A100 ... H100/H200). Run from anywhere; needs nvcc (CUDA 13.0 on our machines), not a GPU. MlpPtxTest
# compiles mlp.cu the same way and fails when the checked-in PTX is stale.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/../resources/dev/thaw/examples/mlp/mlp.ptx"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
"$nvcc" -arch=compute_80 -ptx -O3 -o "$out" "$here/mlp.cu"
echo "wrote $out ($("$nvcc" --version | tail -1))"
