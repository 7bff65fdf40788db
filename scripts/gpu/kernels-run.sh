#!/usr/bin/env bash
# Checks and measures the Llama tensor-core kernels on a GPU host (H100/H200), from the unpacked Thaw tarball, in
# about 4 minutes (KERNELS_BUDGET_S, default 235 s; each part under its own timeout, none can hang the run):
#   1. LlamaKernelBench at Llama-3.1-8B shapes: every product tile the device's module has (the three mma.sync
#      tiles everywhere; on compute capability 9.0 the sm_90a module adds the three wgmma tiles), the WMMA matmul
#      and the gemv at M = 1, 16, 128, 512, 2000, 8000 for the qkv, o, gate|up (stored and SwiGLU-fused) and down
#      products and GPT-2-large's three (fp16, 512 rows), each checked against fp64 samples and the WMMA kernel's
#      rows; flash prefill, 64- and 128-row blocks, at 512/2000/8000/32000 tokens (fp64 samples;
#      llama_attention's whole output up to 4096); split-KV decode at 16/2000/8000/32000 positions and 4 rows at
#      2000 (fp64, every head). Times, TFLOP/s, and which kernel LlamaKernels picks.
#   2. scripts/llama/torch_kernels.py: torch.matmul (cuBLAS) and scaled_dot_product_attention (flash) on the same
#      shapes, in the same run: the anchors.
#   3. With the time left, the GPU JUnit tests: first the instrumenter's own GPU cases, zero-fill cp.async included
#      (InstrumentedKernelsGpuTest), every kernel instrumented with its buffers allowed -> no violation, same bits,
#      and the instrumentation overhead (LlamaInstrumentedGpuTest), the function profiled on the GPU -> every
#      kernel `exact` (LlamaFunctionGpuProfileTest); then every kernel against its Java twin at real shapes
#      (LlamaKernelsGpuTest), the wgmma tiles included on 9.0.
#   4. The summary table (scripts/llama/kernels_summary.py), also in $OUT/summary.txt: picked and fastest tile
#      beside cuBLAS, the winning tile at each shape and the gemm-tiles.json rules refitted to them, both flash
#      entries beside sdpa, decode beside sdpa, the checks and the JUnit verdicts.
# KERNELS_INSTRUMENTED=0 leaves out the instrumentation verdicts of part 3 (about 45 s on an H200).
# The whole 8B forward against PyTorch is scripts/gpu/forward-run.sh.
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

# 3. GPU JUnit tests in what is left: the instrumentation verdicts first, then the kernels against their twins.
: > "$OUT/tests.txt"
junit() {  # junit NAME SECONDS CLASS...
  local name=$1 t=$2
  shift 2
  if [ "$t" -le 20 ]; then
    echo "== $name: not run, $(left) s of the $budget s budget left" >> "$OUT/tests.txt"
    log "$name not run: $(left) s left"
    status=1
    return
  fi
  local selectors=()
  for c in "$@"; do selectors+=("--select-class=$c"); done
  log "$name (timeout $t s)"
  echo "== $name" >> "$OUT/tests.txt"
  timeout -k 5 "$t" "$thaw_home/bin/thaw-test" --details=tree "${selectors[@]}" 2>&1 \
      | sed 's/\x1b\[[0-9;]*m//g' >> "$OUT/tests.txt"
  local rc=${PIPESTATUS[0]}
  log "$name exit $rc ($( [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo 'timed out: see tests.txt for how far it got' || echo 'finished'))"
  [ "$rc" -ne 0 ] && status=1
}
if [ "${KERNELS_INSTRUMENTED:-1}" = 1 ]; then
  junit "instrumented kernels and profiling" $(( ($(left) - 8) * 3 / 5 )) \
      dev.thaw.runtime.ptx.instrument.InstrumentedKernelsGpuTest \
      dev.thaw.examples.llama.kernels.LlamaInstrumentedGpuTest \
      dev.thaw.examples.llama.LlamaFunctionGpuProfileTest
else
  echo "== instrumented kernels and profiling: not run (KERNELS_INSTRUMENTED=0)" >> "$OUT/tests.txt"
  log "instrumented kernels and profiling not run (KERNELS_INSTRUMENTED=0)"
fi
junit "kernels against their twins" $(( $(left) - 8 )) dev.thaw.examples.llama.kernels.LlamaKernelsGpuTest

# 4. Summary.
python3 "$repo/scripts/llama/kernels_summary.py" "$OUT/thaw-kernels.json" "$OUT/torch-kernels.json" \
    "$OUT/tests.txt" 2>&1 | tee "$OUT/summary.txt"
grep -h "RESULT:" "$OUT/bench.txt" 2>/dev/null | tee -a "$OUT/summary.txt"
log "done, status $status"
exit $status
