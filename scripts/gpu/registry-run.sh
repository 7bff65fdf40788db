#!/usr/bin/env bash
# Images across nodes on a GPU host: a real OCI registry (Debian's build of the CNCF distribution registry, from
# distribution/target/thaw-tools-linux-x86_64.tar.xz unpacked over the main tarball: thaw/tools/docker-registry)
# on loopback; GPT-2-large built on the GPU, pushed,
# pushed again (dedup), then two cold starts in new processes from fresh stores:
#   pull-then-run: `thaw pull REF` then `thaw run TAG`
#   lazy:          `thaw run REF` (the restore reads through the pull, which fetches in first-access order)
# Usage (repository root on the GPU machine): OUT=<logs> scripts/gpu/registry-run.sh <unpacked thaw dir>
# Writes $OUT/registry.txt; exits non-zero on any failure. Estimated 2 minutes on an idle 16-core host (a dry run
# with THAW_DEVICE=sim REGISTRY_RUN_MODEL=gpt2 on a loaded 2-core box took about 4); nothing here waits on a timer.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
dir=${1:?usage: OUT=... registry-run.sh <unpacked thaw dir>}
thaw="$dir/bin/thaw"
root=/tmp/thaw-registry-run
rm -rf "$root" && mkdir -p "$root"
log="$OUT/registry.txt"
# THAW_DEVICE=sim REGISTRY_RUN_MODEL=gpt2 make a dry run of this script's steps off the GPU host.
export THAW_DEVICE=${THAW_DEVICE:-cuda}
model=${REGISTRY_RUN_MODEL:-gpt2-large}
status=0
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f} s')" "$1" "$2"; }

if [ ! -x "$dir/tools/docker-registry" ]; then
  echo "no registry: $dir/tools/docker-registry is missing (unpack thaw-tools-linux-x86_64.tar.xz, which -Pdist" \
       "builds beside the main tarball where Debian's docker-registry is installed, over it); nothing measured" \
       | tee "$log"
  exit 1
fi
addr=$(REGISTRY_BIN="$dir/tools/docker-registry" bash scripts/test-registry.sh start "$root/registry" 2> "$root/reg.err")
if [ -z "$addr" ]; then
  { echo "the registry did not start:"; cat "$root/reg.err"; } | tee "$log"
  exit 1
fi
trap 'bash scripts/test-registry.sh stop "$root/registry"' EXIT
ref="$addr/thaw/gpt2-large:1"
request="$root/request.json"
echo '{"tokens": [[15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275, 21281, 39983, 5076, 24913, 29307]], "maxNewTokens": 1}' > "$request"
config='{"model": "'"$model"'", "seed": 1, "maxBatch": 1, "maxTokens": 64}'
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "no nvidia-smi"
  echo "device: $THAW_DEVICE, model $model"
  "$dir/tools/docker-registry" --version
  echo "registry at $addr (loopback, filesystem storage in $root/registry)"
  echo "== build"
  THAW_STORE="$root/built" "$thaw" build --function dev.thaw.examples.gpt2.Gpt2Function --config "$config" \
      --tag gpt2-large --sample-request "$request" || status=1
  echo "== push"
  THAW_STORE="$root/built" "$thaw" push gpt2-large "$ref" || status=1
  echo "== push again (dedup: nothing to send)"
  THAW_STORE="$root/built" "$thaw" push gpt2-large "$ref" || status=1
  echo "== push with packs to another repository"
  THAW_STORE="$root/built" "$thaw" push gpt2-large "$addr/thaw/gpt2-large-packed:1" --layout packs || status=1

  for i in 1; do
    echo "== cold start $i, pull then run (new processes, empty store)"
    t0=$(now)
    THAW_STORE="$root/pulled-$i" "$thaw" pull "$ref" gpt2-large || status=1
    t1=$(now)
    THAW_STORE="$root/pulled-$i" "$thaw" run gpt2-large --request "$request" || status=1
    t2=$(now)
    echo "pull $(elapsed "$t0" "$t1"), run $(elapsed "$t1" "$t2"): first response after $(elapsed "$t0" "$t2")"

    echo "== cold start $i, lazy: run from the reference (new process, empty store)"
    t0=$(now)
    THAW_STORE="$root/lazy-$i" "$thaw" run "$ref" --request "$request" || status=1
    t1=$(now)
    echo "first response after $(elapsed "$t0" "$t1")"
  done
  echo "== lazy run with --check (device memory vs the image, response vs the build's)"
  THAW_STORE="$root/lazy-check" "$thaw" run "$ref" --request "$request" --check || status=1
  echo "== packed image: pull and verify"
  THAW_STORE="$root/packed" "$thaw" pull "$addr/thaw/gpt2-large-packed:1" gpt2-large || status=1
  THAW_STORE="$root/packed" "$thaw" verify gpt2-large || status=1
  du -sh "$root/registry/data"
} > "$log" 2>&1
echo "exit status $status" >> "$log"
exit $status
