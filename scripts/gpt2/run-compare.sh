#!/usr/bin/env bash
# Compare Thaw's gpt2 function with PyTorch on this GPU host, for gpt2 (small) and gpt2-large.
#
#   scripts/gpt2/run-compare.sh [THAW_HOME] [MODEL...]
#
# THAW_HOME is the unpacked Thaw tarball (default ./thaw: runtime/bin/java and lib/*). Logs, the saved
# models, the reference JSON and Thaw's summary go to $OUT (default ./gpt2-compare-<date>). Exit status is
# non-zero if any comparison fails.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
THAW_HOME="${1:-${THAW_HOME:-thaw}}"
shift || true
MODELS=("$@")
[ ${#MODELS[@]} -eq 0 ] && MODELS=(gpt2 gpt2-large)
OUT="${OUT:-$PWD/gpt2-compare-$(date +%Y%m%d-%H%M%S)}"
JAVA="$THAW_HOME/runtime/bin/java"
mkdir -p "$OUT"

if [ ! -x "$JAVA" ]; then
  echo "no Java runtime at $JAVA: pass the unpacked Thaw tarball's folder" >&2
  exit 2
fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1
  "$JAVA" -version 2>&1 | head -1
} | tee "$OUT/env.txt"

status=0
for model in "${MODELS[@]}"; do
  dir="$OUT/$model"
  mkdir -p "$dir"
  echo "=== $model: PyTorch reference ==="
  if ! python3 "$here/hf_reference.py" --model "$model" --dir "$dir/hf" --out "$dir/reference.json" \
      2>&1 | tee "$dir/hf_reference.log"; then
    echo "$model: hf_reference.py failed (see $dir/hf_reference.log)" >&2
    status=1
    continue
  fi
  echo "=== $model: Thaw ==="
  # THAW_DEVICE=cuda: fail rather than fall back to the simulated device.
  THAW_DEVICE=cuda "$JAVA" -Xmx8g -cp "$THAW_HOME/lib/*" dev.thaw.examples.gpt2.Gpt2Compare \
      --dir "$dir/hf" --reference "$dir/reference.json" --out "$dir/thaw-summary.json" \
      2>&1 | tee "$dir/thaw-compare.log"
  rc=${PIPESTATUS[0]}
  echo "$model: Gpt2Compare exit $rc" | tee -a "$dir/thaw-compare.log"
  [ "$rc" -ne 0 ] && status=1
  # The saved weights are large (1.5 GB for gpt2-large) and can be rebuilt from the seed: keep logs only.
  [ "${KEEP_MODELS:-0}" = 1 ] || rm -rf "$dir/hf"
done
echo "logs in $OUT; overall status $status"
exit $status
