#!/usr/bin/env bash
# Runs several GPU scripts in one device call and packs their logs into one archive (the device tool brings
# back at most 8 files). Each script gets its own folder and a time limit.
# Usage (repository root on the GPU machine):
#   OUT=<dir> scripts/gpu/wave-run.sh [-t SECONDS] NAME[:SECONDS] ...
# NAME is scripts/gpu/NAME-run.sh, or 'tests' for every shipped test suite under THAW_DEVICE=cuda.
# The tarball is .device/thaw-<version>-linux-x86_64.tar.xz (and .device/thaw-tools-*.tar.xz over it); it is unpacked once, to /tmp/thaw-wave/thaw (kept between
# calls on a warm machine when the tarball has not changed).
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
mkdir -p "$OUT"
default_limit=240
if [[ ${1:-} == -t ]]; then default_limit=$2; shift 2; fi
tarball=$(ls .device/thaw-*-linux-x86_64.tar.xz | grep -v thaw-tools | head -1)
root=/tmp/thaw-wave
stamp="$root/.tarball-sum"
sum=$(sha256sum "$tarball" | cut -c1-16)
if [[ ! -x "$root/thaw/bin/thaw" || "$(cat "$stamp" 2>/dev/null)" != "$sum" ]]; then
  rm -rf "$root" && mkdir -p "$root" && tar xJf "$tarball" -C "$root" && echo "$sum" > "$stamp"
  # The tools tarball (a registry for registry-run.sh), when carried, unpacks over the main one.
  for tools in .device/thaw-tools-*.tar.xz; do [[ -f $tools ]] && tar xJf "$tools" -C "$root"; done
  # A tarball made by slim-tarball.sh travels without the runtime's default class-data archive: made here.
  if [[ ! -f "$root/thaw/runtime/lib/server/classes.jsa" ]]; then
    "$root/thaw/runtime/bin/java" -Xshare:dump > /dev/null 2>&1 || echo "no default CDS archive: JVMs start slower"
  fi
fi
home="$root/thaw"
logs=/tmp/thaw-wave-logs
rm -rf "$logs" && mkdir -p "$logs"
export THAW_DEVICE=cuda

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
  uname -r; nproc; free -g | sed -n 2p
} > "$logs/device.txt" 2>&1
cat "$logs/device.txt"

status=0
for spec in "$@"; do
  name=${spec%%:*}
  limit=$default_limit
  [[ $spec == *:* ]] && limit=${spec##*:}
  dir="$logs/$name"
  mkdir -p "$dir"
  start=$(date +%s%N)
  if [[ $name == tests ]]; then
    timeout -k 10 "$limit" "$home/bin/thaw-test" --reports-dir "$dir/reports" > "$dir/out.txt" 2>&1
  else
    OUT="$dir" timeout -k 10 "$limit" "scripts/gpu/$name-run.sh" "$home" > "$dir/out.txt" 2>&1
  fi
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  sed -i 's/\x1b\[[0-9;]*m//g' "$dir/out.txt"
  echo "== $name: exit $rc in ${ms} ms" | tee -a "$logs/summary.txt"
  tail -n 25 "$dir/out.txt"
  [[ $rc == 0 ]] || status=1
done
tar czf "$OUT/logs.tar.gz" -C "$logs" .
exit $status
