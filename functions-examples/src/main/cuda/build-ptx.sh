#!/usr/bin/env bash
# Regenerates the checked-in PTX of the GPT-2 kernels from gpt2.cu.
#
#   build-ptx.sh [out.ptx]    (default: ../resources/dev/thaw/examples/gpt2/gpt2.ptx)
#
# compute_80 PTX is JIT-compiled by the driver for any newer GPU (sm_80 A100 … sm_90 H100/H200); WMMA
# needs sm_70+. The output is deterministic for one nvcc version (no paths, no timestamps, no line info), so
# Gpt2PtxTest regenerates it into a temp file and compares. Needs nvcc (CUDA 13.0 here), not a GPU.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../resources/dev/thaw/examples/gpt2/gpt2.ptx}"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
mkdir -p "$(dirname "$out")"
# Run from the source folder with a relative name, so nothing about this checkout can reach the output.
cd "$here"
"$nvcc" -arch=compute_80 -ptx -O3 -o "$out" gpt2.cu
echo "wrote $out ($("$nvcc" --version | tail -1))"
