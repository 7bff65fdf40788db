#!/usr/bin/env bash
# Checks and measures the Llama tensor-core kernels on a GPU host (H100/H200), from the unpacked Thaw tarball, in
# about 4 minutes (KERNELS_BUDGET_S, default 235 s; each part under its own timeout, none can hang the run):
#   1. LlamaKernelBench at Llama-3.1-8B shapes: the three mma.sync product tiles, the WMMA matmul and the gemv at
#      M = 1, 16, 128, 512, 2000, 8000 for the qkv, o, gate|up (stored and SwiGLU-fused) and down products and
#      GPT-2-large's three (fp16, 512 rows), each checked against fp64 samples and the WMMA kernel's rows;
#      flash prefill at 512/2000/8000/32000 tokens (fp64 samples; llama_attention's whole output up to 4096);
#      split-KV decode at 16/2000/8000/32000 positions and 4 rows at 2000 (fp64, every head). Times, TFLOP/s.
#   2. scripts/llama/torch_kernels.py: torch.matmul (cuBLAS) and scaled_dot_product_attention (flash) on the same
#      shapes, in the same run: the anchors.
#   3. With the time left, the GPU JUnit tests: every kernel against its Java twin at real shapes
#      (LlamaKernelsGpuTest), every kernel instrumented with its buffers allowed -> no violation, same bits, and the
#      instrumentation overhead (LlamaInstrumentedGpuTest), the function profiled on the GPU -> every kernel
#      `exact` (LlamaFunctionGpuProfileTest), the instrumenter's own GPU cases, zero-fill cp.async included
#      (InstrumentedKernelsGpuTest).
#   4. The summary table (scripts/llama/kernels_summary.py), also in $OUT/summary.txt.
# The tarball must be built from this branch (mvn -B -Pdist package -DskipTests): it carries LlamaKernelBench and
# the test jars.
# Usage (repository root on the GPU machine): OUT=<dir> scripts/gpu/kernels-run.sh <unpacked thaw dir>
# Writes $OUT/env.txt, bench.txt, thaw-kernels.json, torch.txt, torch-kernels.json, tests.txt, summary.txt.
# Exit 0 when every part ran and every check passed, 1 otherwise.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
thaw_home=$(cd "${1:?usage: OUT=<dir> $0 <unpacked thaw dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
java="$thaw_home/runtime/bin/java"
mkdir -p "$OUT"
trap 'exit 143' TERM INT
export THAW_DEVICE=cuda
status=0
start=$(date +%s)
budget=${KERNELS_BUDGET_S:-235}
elapsed() { echo "$(( $(date +%s) - start ))"; }
left() { echo "$(( budget - $(elapsed) ))"; }
log() { echo "[$(elapsed) s] $*" | tee -a "$OUT/env.txt"; }

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  "$java" -version 2>&1 | head -1
  (command -v nvcc >/dev/null && nvcc --version | tail -1) || echo "no nvcc on the PATH"
  git -C "$repo" log --oneline -1 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
if ! python3 - "$thaw_home" > /dev/null 2>&1 <<'EOF'
import glob, sys, zipfile
sys.exit(0 if any("dev/thaw/examples/llama/LlamaKernelBench.class" in zipfile.ZipFile(j).namelist()
                  for j in glob.glob(sys.argv[1] + "/lib/*.jar")) else 1)
EOF
then
  log "the tarball at $thaw_home has no LlamaKernelBench: build it from this branch (mvn -B -Pdist package -DskipTests)"
  exit 1
fi

# 1. Thaw's kernels: checks and times.
log "LlamaKernelBench (timeout 120 s)"
timeout -k 5 120 "$java" -Xmx16g -cp "$thaw_home/lib/*" dev.thaw.examples.llama.LlamaKernelBench \
    --out "$OUT/thaw-kernels.json" > "$OUT/bench.txt" 2>&1
rc=$?
log "LlamaKernelBench exit $rc ($( [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo 'timed out' || echo 'finished'))"
[ "$rc" -ne 0 ] && status=1

# 2. The PyTorch anchors on the same shapes.
t=$(( $(left) > 70 ? 60 : $(left) - 10 ))
if [ "$t" -gt 10 ]; then
  log "torch_kernels.py (timeout $t s)"
  timeout -k 5 "$t" python3 "$repo/scripts/llama/torch_kernels.py" --out "$OUT/torch-kernels.json" \
      > "$OUT/torch.txt" 2>&1
  rc=$?
  log "torch_kernels.py exit $rc"
  [ "$rc" -ne 0 ] && status=1
else
  log "torch_kernels.py not run: $(left) s left"
  status=1
fi

# 3. GPU JUnit tests in what is left.
t=$(( $(left) - 8 ))
if [ "$t" -gt 30 ]; then
  log "GPU tests (timeout $t s)"
  timeout -k 5 "$t" "$thaw_home/bin/thaw-test" --details=tree \
      --select-class=dev.thaw.examples.llama.kernels.LlamaKernelsGpuTest \
      --select-class=dev.thaw.examples.llama.kernels.LlamaInstrumentedGpuTest \
      --select-class=dev.thaw.examples.llama.LlamaFunctionGpuProfileTest \
      --select-class=dev.thaw.runtime.ptx.instrument.InstrumentedKernelsGpuTest > "$OUT/tests.log" 2>&1
  rc=$?
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/tests.log" > "$OUT/tests.txt" && rm -f "$OUT/tests.log"
  log "GPU tests exit $rc ($( [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo 'timed out: see tests.txt for how far they got' || echo 'finished'))"
  [ "$rc" -ne 0 ] && status=1
else
  echo "not run: $(left) s of the $budget s budget left" > "$OUT/tests.txt"
  log "GPU tests not run: $(left) s left"
  status=1
fi

# 4. Summary.
python3 "$repo/scripts/llama/kernels_summary.py" "$OUT/thaw-kernels.json" "$OUT/torch-kernels.json" \
    "$OUT/tests.txt" 2>&1 | tee "$OUT/summary.txt"
grep -h "RESULT:" "$OUT/bench.txt" 2>/dev/null | tee -a "$OUT/summary.txt"
log "done, status $status"
exit $status
