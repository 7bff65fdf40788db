#!/usr/bin/env bash
# Under the PCIe floor (issue 27), on a host with two or more GPUs joined by NVLink (nvidia-h200-x2), at most 5
# minutes (the contract ~30 s, the harness ~2 minutes; limits 75 s and 210 s):
#  0. the GPUs, their topology (nvidia-smi topo -m: NV18 between them) and how many there are;
#  1. the driver contract on CUDA, the new calls among them: canAccessPeer, memoryInfo, setAccessFor (cuMemSetAccess
#     for another device), copyPeerAsync (cuMemcpyPeerAsync) and the unified-addressing peer copy, another device's
#     exported memory imported, mapped read-only here and read by a kernel, scratch ranges from the top of the arena;
#  2. MultiLinkHarness: GPT-2-large- (1.55 GB) and Llama-3.1-8B-shaped (16.06 GB) images restored onto GPU 0 through
#     its own link, through GPU 1's as well, and with everything queued at once; from GPU 0's own HBM tier, from GPU
#     1's by a peer copy and peer-mapped (with a read kernel's GB/s on local and on peer-mapped weights); a warm
#     GPT-2-large on GPU 1 alone and beside two-link restores through its GPU (whole link, half); one restore per GPU
#     at once against one alone. Every first round checks every device byte.
# Each part runs under its own timeout. Writes $OUT/summary.txt (the SUMMARY lines, the test counts), $OUT/tests.txt,
# $OUT/harness.txt, $OUT/multilink-results.json, $OUT/device.txt; exits non-zero if a part failed.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/multilink-run.sh <unpacked thaw dir>
# A dry run without GPUs: THAW_DEVICE=sim THAW_SIM_DEVICES=2 THAW_SIM_COPY_GBPS=2 SHAPES=tiny (the contract then runs
# on the sim device; nothing it measures is a GPU number).
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/multilink-run.sh <unpacked thaw dir>}" && pwd)
java="$home/runtime/bin/java"; [[ -x "$java" ]] || java=java
export THAW_DEVICE=${THAW_DEVICE:-cuda}
shapes=${SHAPES:-gpt2-large,llama-8b}
rounds=${ROUNDS:-5}
mkdir -p "$OUT"
status=0
strip() { sed 's/\x1b\[[0-9;]*m//g'; }

echo "== 0. the GPUs"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
      --format=csv,noheader 2>&1 || echo "no nvidia-smi"
  nvidia-smi topo -m 2>&1 | head -12
  uname -r; nproc; free -g | sed -n 2p
} > "$OUT/device.txt"
cat "$OUT/device.txt"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[[ $THAW_DEVICE == sim ]] && gpus=${THAW_SIM_DEVICES:-1}
echo "GPUs: $gpus (THAW_DEVICE=$THAW_DEVICE)"

echo "== 1. the driver contract on $THAW_DEVICE"
contract=dev.thaw.runtime.gpu.contract.CudaDriverContractTest
[[ $THAW_DEVICE == sim ]] && contract=dev.thaw.runtime.gpu.contract.SimDriverContractTest
timeout -k 10 75 "$home/bin/thaw-test" --select-class "$contract" --reports-dir "$OUT/reports" 2>&1 | strip \
    > "$OUT/tests.txt" || status=1
grep -E 'tests (successful|failed|skipped|aborted)' "$OUT/tests.txt"
# The calls this issue added, one line each (a skipped one names its reason).
grep -E 'eer|nother|cratch|FreeAndTotal|KnowsItsDevice' "$OUT/tests.txt" | sed 's/^[ │├└─]*//' | head -12

if (( gpus < 2 )); then
  echo "== 2. skipped: one GPU; the harness needs two"
  { echo "one GPU: the multi-link harness did not run"; grep -E 'tests (successful|failed)' "$OUT/tests.txt"; } \
      > "$OUT/summary.txt"
  exit 1
fi

echo "== 2. MultiLinkHarness ($shapes, $rounds rounds)"
timeout -k 10 210 "$java" ${THAW_JAVA_OPTS:-} -cp "$home/lib/*:$home/lib/bench/*" \
    dev.thaw.bench.restore.MultiLinkHarness --out "$OUT" --shapes "$shapes" --rounds "$rounds" 2>&1 \
    | grep -v '^\[main\] INFO' | strip > "$OUT/harness.txt"
rc=${PIPESTATUS[0]}
[[ $rc == 0 ]] || { echo "harness exit status $rc"; status=1; }
grep -v '^SUMMARY' "$OUT/harness.txt" | grep -E '^(\||link|peers|GPU|read kernel|impact|sweep|FAILED|[a-z0-9-]+: )' \
    | head -60

{
  grep '^SUMMARY' "$OUT/harness.txt" | sed 's/^SUMMARY //'
  grep -E 'tests (successful|failed|skipped)' "$OUT/tests.txt" | sed 's/^\[ */contract: /; s/ *\]$//'
  echo "harness exit status $rc"
} > "$OUT/summary.txt"
echo "== summary"
cat "$OUT/summary.txt"
exit $status
