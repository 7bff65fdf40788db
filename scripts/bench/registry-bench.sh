#!/usr/bin/env bash
# Push and pull throughput of a GPT-2-large-sized image against a real registry on loopback (Debian's
# docker-registry via scripts/test-registry.sh), with the thaw CLI of distribution/target/thaw (mvn package).
# The image is built on the SIMULATED device (GPT-2-large's 774M parameters, random weights from a seed, no sample
# request): its bytes and chunking are a real GPT-2-large image's, its build time is not a GPU's.
#   scripts/bench/registry-bench.sh [WORKDIR]      -> WORKDIR/results.txt
set -euo pipefail
work=${1:-/tmp/thaw-registry-bench}
repo=$(cd "$(dirname "$0")/../.." && pwd)
thaw="$repo/distribution/target/thaw/bin/thaw"
# A store from an earlier run is kept (building GPT-2-large on the sim device takes minutes); the rest is redone.
mkdir -p "$work" && find "$work" -mindepth 1 -maxdepth 1 ! -name a -exec rm -rf {} +
addr=$(bash "$repo/scripts/test-registry.sh" start "$work/registry")
trap 'bash "$repo/scripts/test-registry.sh" stop "$work/registry"' EXIT
export THAW_DEVICE=sim THAW_SIM_MEMORY=8g THAW_JAVA_OPTS="-Xmx3g"
out="$work/results.txt"
{
  echo "registry $addr: $(docker-registry --version 2>/dev/null || true); $(nproc) cores; $(date -u +%FT%TZ)"
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  if ! THAW_STORE="$work/a" "$thaw" images 2>/dev/null | grep -q "gpt2-large:b2"; then
    echo "== build gpt2-large (sim) and a variant (same weights, another KV-cache shape)"
    THAW_STORE="$work/a" "$thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
        --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}' --tag gpt2-large
    THAW_STORE="$work/a" "$thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
        --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 2, "maxTokens": 128}' --tag gpt2-large:b2
  fi
  for run in "chunks 4" "packs 8"; do
    read -r layout transfers <<< "$run"
    {
      echo "== push ($layout, $transfers transfers, empty repository)"
      THAW_STORE="$work/a" "$thaw" push gpt2-large "$addr/bench/$layout-$transfers:1" --layout "$layout" \
          --transfers "$transfers" --json
      echo "== pull ($layout, $transfers transfers, empty store)"
      THAW_STORE="$work/p-$layout-$transfers" "$thaw" pull "$addr/bench/$layout-$transfers:1" gpt2-large \
          --transfers "$transfers" --json
      rm -rf "$work/p-$layout-$transfers"
      echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    }
  done
  echo "== push again (same image, same repository)"
  THAW_STORE="$work/a" "$thaw" push gpt2-large "$addr/bench/chunks-4:1" --json
  echo "== push the variant to the same repository"
  THAW_STORE="$work/a" "$thaw" push gpt2-large:b2 "$addr/bench/chunks-4:b2" --json
  echo "== push to a new repository, mounting from the first"
  THAW_STORE="$work/a" "$thaw" push gpt2-large "$addr/other/gpt2-large:1" --mount-from bench/chunks-4 --json
  echo "== lazy run from the reference (sim device; restore + one invoke on the simulated device)"
  echo '{"tokens": [[464, 2068]], "maxNewTokens": 1}' > "$work/req.json"
  THAW_STORE="$work/lazy" "$thaw" run "$addr/bench/chunks-4:1" --request "$work/req.json" || true
  du -sh "$work/registry/data"
} 2>&1 | tee "$out"
