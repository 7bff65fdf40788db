#!/usr/bin/env bash
# Regenerates the checked-in PTX of the Llama-family kernels from llama.cu: two builds of the one source.
#
#   build-llama-ptx.sh [out-dir]    (default: ../resources/dev/thaw/examples/llama)
#
#   llama.ptx        compute_80 (bf16 mma.sync needs sm_80+): JIT-compiled by the driver for any newer GPU
#                    (A100 ... H100/H200).
#   llama_sm90a.ptx  sm_90a: the same kernels plus the wgmma products (llama_wgmma_*, compiled only where
#                    __CUDA_ARCH_FEAT_SM90_ALL is defined); architecture-specific, so only a compute capability
#                    9.0 device loads it.
# Deterministic for one nvcc version (no paths, no timestamps, no line info): LlamaPtxTest regenerates both into
# a temp folder and compares. Needs nvcc (CUDA 13.0 here), not a GPU.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-$here/../resources/dev/thaw/examples/llama}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
# Run from the source folder with a relative name, so nothing about this checkout can reach the output.
cd "$here"
"$nvcc" -arch=compute_80 -ptx -O3 -o "$out/llama.ptx" llama.cu
"$nvcc" -arch=sm_90a -ptx -O3 -o "$out/llama_sm90a.ptx" llama.cu
echo "wrote $out/llama.ptx and $out/llama_sm90a.ptx ($("$nvcc" --version | tail -1))"
