#!/usr/bin/env bash
# Regenerates the checked-in PTX of the device-check kernels from check.cu.
#
# compute_80 PTX is JIT-compiled by the driver for any newer GPU (sm_80 A100 … sm_90 H100/H200), which is
# what DeviceCheck measures. Run from anywhere; needs nvcc (CUDA 13.0 on our machines), not a GPU.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/../resources/dev/thaw/runtime/check/check.ptx"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
"$nvcc" -arch=compute_80 -ptx -O3 -o "$out" "$here/check.cu"
echo "wrote $out ($("$nvcc" --version | tail -1))"
