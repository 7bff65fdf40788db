#!/usr/bin/env bash
# Proves images on a GPU host: the shipped test suites (incl. PTX instrumentation on the GPU), then a
# GPT-2-large image built into a fresh store, listed, verified, and restored in new processes with --check.
# Usage (repository root on the GPU machine): OUT=<logs> scripts/gpu/images-run.sh [tarball]
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
tarball=${1:-$(ls .device/thaw-*-linux-x86_64.tar.xz | head -1)}
root=/tmp/thaw-images
rm -rf "$root" && mkdir -p "$root" && tar xJf "$tarball" -C "$root"
thaw="$root/thaw/bin/thaw"
export THAW_DEVICE=cuda THAW_STORE="$root/store"
status=0

"$root/thaw/bin/thaw-test" --reports-dir "$root/reports" > "$root/tests.log" 2>&1 || status=1
sed 's/\x1b\[[0-9;]*m//g' "$root/tests.log" > "$OUT/tests.txt"

request="$root/request.json"
echo '{"tokens": [[15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275, 21281, 39983, 5076, 24913, 29307]], "maxNewTokens": 16}' > "$request"
config='{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}'
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "== build"; "$thaw" build --function dev.thaw.examples.gpt2.Gpt2Function --config "$config" \
      --tag gpt2-large --sample-request "$request" || status=1
  echo "== images"; "$thaw" images
  echo "== inspect"; "$thaw" inspect gpt2-large | grep -A14 "^profile" 
  echo "== run --check (new process)"; "$thaw" run gpt2-large --request "$request" --check || status=1
  echo "== run (new process)"; "$thaw" run gpt2-large --request "$request" || status=1
  echo "== run (new process, again)"; "$thaw" run gpt2-large --request "$request" || status=1
  echo "== verify"; "$thaw" verify gpt2-large || status=1
  du -sh "$THAW_STORE"
  echo "== demo"; "$thaw" demo || status=1
  echo "== demo (again: dedup)"; "$thaw" demo || status=1
} > "$OUT/images.txt" 2>&1
exit $status
