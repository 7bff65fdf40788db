#!/usr/bin/env bash
# Measures the store's snapshot on a GPU host, on tmpfs (/dev/shm) and on disk (/tmp):
#  1. SnapshotWriteHarness: 4 GiB of random chunks cut, hashed, put and synced into a fresh store, against
#     dd bs=64M conv=fsync of the same size into the same directory, in the same run;
#  2. a real GPT-2-large build into a fresh store there (its snapshot + sync GB/s), then a restore in a new
#     process with --check (device memory byte-identical to the image) and verify.
# Usage: OUT=<dir> scripts/gpu/store-run.sh <unpacked thaw dir>   (the dir holds bin/thaw, lib/, runtime/)
# Writes $OUT/summary.txt (the figures), $OUT/harness.txt, $OUT/builds.txt. Exits non-zero on any failure.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=<dir> scripts/gpu/store-run.sh <unpacked thaw dir>}
home=$(cd "$home" && pwd)
[[ -x "$home/bin/thaw" ]] || home="$home/thaw" # the tarball unpacks to thaw/
java="$home/runtime/bin/java"
[[ -x "$java" ]] || java=java
cp="$home/lib/*:$home/lib/test/*:$home/lib/bench/*"
mkdir -p "$OUT"
status=0
export THAW_DEVICE=${THAW_DEVICE:-cuda}
mib=${STORE_RUN_MIB:-4096} # the harness's size; the default is what the record is about

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc; free -g | head -2
  for dir in /dev/shm /tmp; do
    df -h "$dir" | tail -1
    timeout 90 "$java" -Xmx10g -XX:MaxDirectMemorySize=10g -cp "$cp" dev.thaw.bench.store.SnapshotWriteHarness \
        "$dir" "$mib" || status=1
  done
} > "$OUT/harness.txt" 2>&1

request=$(mktemp)
echo '{"tokens": [[11, 22, 33, 44, 55, 66, 77, 88]], "maxNewTokens": 4}' > "$request"
config=${STORE_RUN_CONFIG:-'{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}'}
{
  for dir in /dev/shm /tmp; do
    store="$dir/thaw-store-run-$$"
    rm -rf "$store"
    export THAW_STORE="$store"
    echo "== build into $store ($(df --output=fstype "$dir" | tail -1))"
    timeout 120 "$home/bin/thaw" build --function dev.thaw.examples.gpt2.Gpt2Function --config "$config" \
        --tag gpt2-large --json > "$OUT/build.json" || status=1
    grep -E '"(totalBytes|chunks|snapshotMillis|syncMillis|snapshotGBps)"' "$OUT/build.json"
    echo "snapshot GB/s on $dir: $(python3 -c 'import json, sys; b = json.load(open(sys.argv[1]));
print("%.3f (%d bytes, snapshot %.0f ms + sync %.0f ms)" % (b["snapshotGBps"], b["totalBytes"],
      b["timings"]["snapshotMillis"], b["timings"]["syncMillis"]))' "$OUT/build.json")"
    ls "$store/packs" | wc -l | sed 's/^/pack files: /'
    du -sh "$store"
    echo "== run --check (new process)"
    timeout 60 "$home/bin/thaw" run gpt2-large --request "$request" --check | tail -4 || status=1
    echo "== verify"
    timeout 60 "$home/bin/thaw" verify gpt2-large || status=1
    rm -rf "$store"
  done
} > "$OUT/builds.txt" 2>&1
rm -f "$OUT/build.json" "$request"

{
  head -1 "$OUT/harness.txt"
  grep -E '^# |^\| snapshot|^\| store|^\| dd|^\{' "$OUT/harness.txt"
  grep -E '^snapshot GB/s|^pack files|byte-identical|DIFFERS|^OK|^FAIL' "$OUT/builds.txt"
  echo "status $status"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $status
