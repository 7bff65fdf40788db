#!/usr/bin/env bash
# The cold-start harness on a GPU host: Thaw's fresh process (thaw run), Thaw's pooled worker (full restore from
# the store; on-demand from the host cache), the Thaw server over HTTP (cold on demand from the store, warm), PyTorch from scratch and NVIDIA's driver
# checkpoint, side by side, on the MLP and GPT-2-large (5 cold starts each); then 1, 2, 4, 8 GPT-2-large cold
# starts at once through the context pool; then, as time allows, the image-size sweep (GPT-2 small, medium,
# xl; 3 each: the pooled worker from the host cache, the driver checkpoint). What has not begun by 280 s is
# skipped and the report says so.
# Writes into $OUT: env.txt, harness.log, cold-start.json (every sample), cold-start.md (the tables), traces/ (the
# server's Chrome trace of its cold starts). The tarball's Java has no AWT, so the table and the plots are drawn
# again afterwards, where a full JDK 17 is: java -cp 'thaw/lib/*:thaw/lib/bench/*'
# dev.thaw.bench.coldstart.ColdStart plot --from $OUT/cold-start.json --out DIR
# Finishes in under 6 minutes (nothing new starts after 280 s; the harness is stopped at 345 s, and its JSON then
# holds every model it finished).
# Usage (on the GPU machine): OUT=<dir> scripts/gpu/harness-run.sh <unpacked thaw dir | thaw tarball>
# Exit status: the harness's (0: every contender that could run ran and every answer agreed).
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
arg=${1:-$(ls .device/thaw-*-linux-x86_64.tar.xz 2>/dev/null | head -1)}
if [[ -f "$arg" ]]; then
  root=/tmp/thaw-harness
  rm -rf "$root" && mkdir -p "$root" && tar xJf "$arg" -C "$root"
  thaw_home="$root/thaw"
elif [[ -x "$arg/bin/thaw-bench" ]]; then
  thaw_home="$arg"
else
  echo "usage: OUT=<dir> $0 <unpacked thaw dir | thaw tarball>" >&2
  exit 2
fi
# Weights (GPT-2 small to xl: 5.7 GB) and the image store (as much again) go here, not into $OUT.
work=/tmp/thaw-harness-work
rm -rf "$work"
mkdir -p "$OUT"

{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
      --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  "$thaw_home/runtime/bin/java" -version 2>&1 | head -1
  nproc; free -g | head -2; df -h /tmp | tail -1
} > "$OUT/env.txt" 2>&1

# --device cuda: Thaw fails rather than fall back to the simulated device.
# The pooled worker on demand from the store and warm are left out: the server's cold and warm contenders take
# the same paths (plus HTTP); the pooled full restore from the store is the baseline beside them.
timeout 345 "$thaw_home/bin/thaw-bench" cold-start --device cuda \
    --models mlp,gpt2-large --runs 5 --concurrency 1,2,4,8 \
    --contenders thaw-process,thaw-pool-cold-full,thaw-pool-cold-cache,thaw-server-cold,thaw-server-warm,pytorch-scratch,driver-checkpoint \
    --sweep gpt2,gpt2-medium,gpt2-xl --sweep-runs 3 \
    --sweep-contenders thaw-pool-cold-cache,driver-checkpoint --deadline 280 \
    --out "$OUT" --work "$work" > "$OUT/harness.log" 2>&1
status=$?
[[ $status -eq 124 ]] && echo "harness-run.sh: the harness ran past 345 s and was stopped" >> "$OUT/harness.log"
rm -rf "$work"
tail -5 "$OUT/harness.log"
exit $status
