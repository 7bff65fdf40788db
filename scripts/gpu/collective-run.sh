#!/usr/bin/env bash
# Checks Thaw's tensor-parallel collectives (dev.thaw.examples.collective) on a host of 2 to 4 peer GPUs (an
# H200 x2 node), from the unpacked Thaw tarball, in about a minute (COLLECTIVE_BUDGET_S, default 60 s; each part
# under its own timeout, none can hang the run):
#   1. The GPUs and how they are joined: nvidia-smi topo -m (NV<n> is NVLink; PIX/PXB/PHB/NODE/SYS are PCIe
#      paths) and the peer-read matrix (topo -p2p r).
#   2. PeerGroupGpuTest: a PeerGroup over every visible device (up to 4) whose pairs are all peers; every rank's
#      all-reduce (fp32, bf16, fp16 partials; one vector unit, a partial block, past one grid, a TP Llama layer's
#      8192 x 4096 bf16 output) and vocabulary all-gather bit for bit against the host's rank-order sum and the
#      sim twins; a length off the vector unit refused; then the all-reduce's median time at 16 KiB, 1 MiB and
#      64 MiB (CUDA events over 50 back-to-back exchanges, and host to host) with algbw / busbw. Then the sim
#      PeerGroupTest in the same JVM, which must pass on any host.
#   3. The timing lines (ALLREDUCE-TIME), also in $OUT/timing.txt.
# The tarball must be built from this branch (mvn -B -Pdist package -DskipTests): its functions-examples test-jar
# carries PeerGroupGpuTest.
# Usage (repository root on the GPU machine): OUT=<dir> scripts/gpu/collective-run.sh <unpacked thaw dir>
# Writes $OUT/env.txt, topo.txt, tests.txt, timing.txt.
# Exit 0 when the GPU test ran (not skipped) and every test passed, 1 otherwise.
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
budget=${COLLECTIVE_BUDGET_S:-60}
elapsed() { echo "$(( $(date +%s) - start ))"; }
left() { echo "$(( budget - $(elapsed) ))"; }
log() { echo "[$(elapsed) s] $*" | tee -a "$OUT/env.txt"; }

{
  date -u +%FT%TZ
  timeout -k 2 10 nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader
  "$java" -version 2>&1 | head -1
  git -C "$repo" log --oneline -1 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if ! python3 - "$thaw_home" > /dev/null 2>&1 <<'EOF'
import glob, sys, zipfile
sys.exit(0 if any("dev/thaw/examples/collective/PeerGroupGpuTest.class" in zipfile.ZipFile(j).namelist()
                  for j in glob.glob(sys.argv[1] + "/lib/test/*-tests.jar")) else 1)
EOF
then
  log "the tarball at $thaw_home has no PeerGroupGpuTest: build it from this branch (mvn -B -Pdist package -DskipTests)"
  exit 1
fi

# 1. Topology.
{
  echo "== nvidia-smi topo -m"
  timeout -k 2 10 nvidia-smi topo -m 2>&1
  echo
  echo "== nvidia-smi topo -p2p r (peer reads)"
  timeout -k 2 10 nvidia-smi topo -p2p r 2>&1
} > "$OUT/topo.txt"
cat "$OUT/topo.txt"

# 2. The GPU test, then the sim one.
t=$(( $(left) - 5 ))
if [ "$t" -le 10 ]; then
  log "tests not run: $(left) s of the $budget s budget left"
  exit 1
fi
log "PeerGroupGpuTest, PeerGroupTest (timeout $t s)"
timeout -k 5 "$t" "$thaw_home/bin/thaw-test" --details=tree \
    --select-class=dev.thaw.examples.collective.PeerGroupGpuTest \
    --select-class=dev.thaw.examples.collective.PeerGroupTest 2>&1 \
    | sed 's/\x1b\[[0-9;]*m//g' > "$OUT/tests.txt"
rc=${PIPESTATUS[0]}
log "tests exit $rc ($( [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo 'timed out: see tests.txt for how far it got' || echo 'finished'))"
[ "$rc" -ne 0 ] && status=1
cat "$OUT/tests.txt"

# 3. Timing, and whether the GPU test ran at all (a skipped test passes the launcher).
grep -h "ALLREDUCE-TIME" "$OUT/tests.txt" > "$OUT/timing.txt"
aborted=$(sed -n 's/^\[ *\([0-9]*\) tests aborted *\]$/\1/p' "$OUT/tests.txt")
if [ "${aborted:-0}" != 0 ]; then
  log "$aborted tests skipped (aborted): $(grep -h -m1 -o 'Assumption failed: .*' "$OUT/tests.txt")"
  status=1
fi
if [ ! -s "$OUT/timing.txt" ]; then
  log "no ALLREDUCE-TIME line: PeerGroupGpuTest was skipped or failed before timing (see tests.txt)"
  status=1
fi
echo "== timing"
cat "$OUT/timing.txt"
log "done, status $status"
exit $status
