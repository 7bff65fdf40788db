#!/usr/bin/env bash
# A tensor-parallel group served over HTTP on a multi-GPU H200 host (issue 28, the server part): the Qwen2.5-32B
# shape at TP 2 (TPS_SHAPE, TPS_RANKS, TPS_LAYERS), seeded weights (never a file), in about 6 minutes:
#  1. TensorParallelColdStart --phase build: the split model recorded one session per rank, one sample request (a
#     16-token prompt, 2 new ids) profiled on every rank, every rank snapshotted into a store under TPS_WORK
#     (/dev/shm/thaw-tpserve; 65 GB for the 32B); its JSON keeps the tag, the sample request and the group's answer;
#  2. `thaw serve` (pool-backed instances, a host cache of TPS_HOST_CACHE, 72g; no HBM tier) serving the group's tag
#     as function `tp`: each rank's image staged into the host cache at registration;
#  3. tpserve_http.py: TPS_ROUNDS (3) cold starts over HTTP, each after the function was registered again (its
#     instance retired, its worker gone): the client's time from sending the sample request to the body in hand,
#     the server's Server-Timing, and the ids against the build's; the same request warm after each.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/tpserve-run.sh <unpacked thaw dir>
# A dry run without a GPU (no figure is a GPU figure): THAW_DEVICE=sim THAW_SIM_DEVICES=2 TPS_SHAPE=llama-3.2-1b
# TPS_LAYERS=1 TPS_HOST_CACHE=6g.
# Llama-3.1-70B at TP 4 (four GPUs; 141 GB of store and of host cache: the store on disk): TPS_SHAPE=llama-3.1-70b
# TPS_RANKS=4 TPS_HOST_CACHE=150g TPS_WORK=/tmp/thaw-tpserve TPS_BUILD_S=300 TPS_ROUNDS=2.
# Writes $OUT/summary.txt, build.json, build.txt, serve.log, http.txt, tpserve.json. Exits non-zero if a part failed.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
home=$(cd "${1:?usage: OUT=<dir> $0 <unpacked thaw dir>}" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
java="$home/runtime/bin/java"; [[ -x "$java" ]] || java=java
work=${TPS_WORK:-/dev/shm/thaw-tpserve}
shape=${TPS_SHAPE:-qwen2.5-32b}
ranks=${TPS_RANKS:-2}
rounds=${TPS_ROUNDS:-3}
port=${TPS_PORT:-18090}
budget=${TPS_BUDGET_S:-540}
mkdir -p "$OUT"
rm -rf "$work" && mkdir -p "$work"
server=""
cleanup() {
  [[ -n $server ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
export THAW_DEVICE=${THAW_DEVICE:-cuda} THAW_STORE="$work/store"
export THAW_ADMIN_TOKEN=${THAW_ADMIN_TOKEN:-tpserve-$RANDOM$RANDOM$RANDOM}
status=0
start=$(date +%s)
: > "$OUT/summary.txt"
say() { echo "[$(( $(date +%s) - start )) s] $*" | tee -a "$OUT/summary.txt"; }
limit() { local left=$(( budget - ($(date +%s) - start) )); (( left < $1 )) && echo $(( left > 5 ? left : 5 )) || echo "$1"; }
{
  date -u +%FT%TZ
  timeout -k 2 10 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
  nproc; free -g | sed -n 2p; df -h /dev/shm | tail -1
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

say "== 1. build $shape at TP $ranks into $work/store"
layers=(); [[ -n ${TPS_LAYERS:-} ]] && layers=(--layers "$TPS_LAYERS")
timeout -k 10 "$(limit "${TPS_BUILD_S:-200}")" "$java" -Xmx16g -cp "$home/lib/*:$home/lib/bench/*" \
    dev.thaw.bench.tp.TensorParallelColdStart --phase build --shape "$shape" --ranks "$ranks" "${layers[@]}" \
    --store "$work/store" --out "$OUT/build.json" > "$OUT/build.txt" 2>&1
rc=$?
grep '^TP-COLD' "$OUT/build.txt" | tee -a "$OUT/summary.txt"
(( rc == 0 )) || { say "build: exit $rc (see build.txt)"; tail -20 "$OUT/build.txt"; exit 1; }
tag=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tag"])' "$OUT/build.json")

say "== 2. thaw serve: function tp = group $tag, host cache ${TPS_HOST_CACHE:-72g}"
THAW_JAVA_OPTS="-Xmx4g" "$home/bin/thaw" serve --port "$port" --function "tp=$tag" \
    --host-cache "${TPS_HOST_CACHE:-72g}" --hbm-tier 0 --idle-workers 1 > "$OUT/serve.log" 2>&1 &
server=$!
ready=0
for _ in $(seq 1 "$(limit 120)"); do
  if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v2/health/ready', timeout=2)" \
      2> /dev/null; then
    ready=1
    break
  fi
  kill -0 "$server" 2>/dev/null || break
  sleep 1
done
(( ready )) || { say "thaw serve never became ready"; tail -30 "$OUT/serve.log"; exit 1; }
say "ready"

say "== 3. $rounds cold starts over HTTP"
timeout -k 5 "$(limit 400)" python3 "$repo/scripts/gpu/tpserve_http.py" --port "$port" --build "$OUT/build.json" \
    --image "$tag" --rounds "$rounds" --out "$OUT/tpserve.json" > "$OUT/http.txt" 2>&1
rc=$?
cat "$OUT/http.txt"
grep '^SUMMARY' "$OUT/http.txt" >> "$OUT/summary.txt"
(( rc == 0 )) || { say "tpserve_http.py: exit $rc"; status=1; }
grep -a "cold start on worker" "$OUT/serve.log" | tail -"$rounds" | tee -a "$OUT/summary.txt"
kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
server=""
say "status $status"
exit $status
