#!/usr/bin/env bash
# Installs the Debian packages some tests use, when their command is missing: wrk (the server's load trial) and
# promtool from the prometheus package (the /metrics exposition checked as Prometheus checks it); and `openai`, the
# official OpenAI JS SDK (npm `openai` 6.x) into target/test-tools/openai under the repository (never committed),
# for the SDK trial of the OpenAI API.
# Tests call it themselves and skip with its reason when it fails (no root, no package index reachable).
# Usage: scripts/install-test-tools.sh [COMMAND...]   (default: wrk)
set -euo pipefail
commands=("${@:-wrk}")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rest=()
for c in "${commands[@]}"; do
  if [[ $c == openai ]]; then
    dir="$repo/target/test-tools/openai"
    if [[ ! -f $dir/node_modules/openai/package.json ]]; then
      command -v node > /dev/null 2>&1 || { echo "cannot install the openai SDK: no node on this system" >&2; exit 1; }
      command -v npm > /dev/null 2>&1 || { echo "cannot install the openai SDK: no npm on this system" >&2; exit 1; }
      mkdir -p "$dir"
      npm install --prefix "$dir" --no-audit --no-fund --silent 'openai@^6' > /dev/null 2>&1 \
          || { echo "cannot install the openai SDK: npm install openai@^6 failed (registry unreachable?)" >&2; exit 1; }
    fi
  else
    rest+=("$c")
  fi
done
[[ ${#rest[@]} -eq 0 ]] && exit 0
commands=("${rest[@]}")
package_of() {
  case "$1" in
    promtool) echo prometheus ;;
    *) echo "$1" ;;
  esac
}
missing=()
packages=()
for c in "${commands[@]}"; do
  if ! command -v "$c" > /dev/null 2>&1; then
    missing+=("$c")
    packages+=("$(package_of "$c")")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "cannot install ${missing[*]}: not root (apt-get install -y ${packages[*]} as root)" >&2
  exit 1
fi
if ! command -v apt-get > /dev/null 2>&1; then
  echo "cannot install ${missing[*]}: no apt-get on this system" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq > /dev/null 2>&1 || true
# The prometheus package would start its server where a service manager runs: a policy-rc.d of our own, for the
# install only, keeps every service the install brings stopped.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get install -y -qq --no-install-recommends "${packages[@]}" > /dev/null
for c in "${missing[@]}"; do
  command -v "$c" > /dev/null 2>&1 || { echo "$c did not install" >&2; exit 1; }
done
