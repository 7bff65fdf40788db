#!/usr/bin/env bash
# The GPU tests that share the GPT-2/Llama scaffold (dev.thaw.examples.transformer, function.CudaAndSim,
# GuardedLaunches, ProfiledRun) on CUDA: the kernels against their Java twins, the instrumented kernels with their
# buffers allowed, GPU profiling's verdicts and overhead lines, for both models (about 1.5 minutes on an H200).
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/scaffold-run.sh <unpacked thaw dir>
# Writes $OUT/tests.txt and $OUT/summary.txt (the counts, the overhead lines); exits non-zero if a test failed.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/scaffold-run.sh <unpacked thaw dir>}" && pwd)
export THAW_DEVICE=${THAW_DEVICE:-cuda}
mkdir -p "$OUT"
select=()
for c in gpt2.kernels.Gpt2KernelsGpuTest llama.kernels.LlamaKernelsGpuTest gpt2.kernels.Gpt2InstrumentedGpuTest \
    llama.kernels.LlamaInstrumentedGpuTest gpt2.Gpt2FunctionGpuProfileTest llama.LlamaFunctionGpuProfileTest; do
  select+=(--select-class "dev.thaw.examples.$c")
done
timeout -k 5 "${SCAFFOLD_LIMIT_S:-110}" "$home/bin/thaw-test" "${select[@]}" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' \
    > "$OUT/tests.txt"
status=${PIPESTATUS[0]}
{
  grep -E 'tests (successful|failed|skipped|aborted)' "$OUT/tests.txt"
  grep -hE 'overhead' "$OUT/tests.txt" | head -12
  echo "status $status"
} | tee "$OUT/summary.txt"
exit "$status"
