#!/usr/bin/env bash
# Installs the Debian packages some tests use, when they are missing: wrk (the server's load trial).
# Tests call it themselves and skip with its reason when it fails (no root, no package index reachable).
# Usage: scripts/install-test-tools.sh [PACKAGE...]   (default: wrk)
set -euo pipefail
packages=("${@:-wrk}")
missing=()
for p in "${packages[@]}"; do
  command -v "$p" > /dev/null 2>&1 || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -ne 0 ]]; then
  echo "cannot install ${missing[*]}: not root (apt-get install -y ${missing[*]} as root)" >&2
  exit 1
fi
if ! command -v apt-get > /dev/null 2>&1; then
  echo "cannot install ${missing[*]}: no apt-get on this system" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq > /dev/null 2>&1 || true
apt-get install -y -qq "${missing[@]}" > /dev/null
for p in "${missing[@]}"; do
  command -v "$p" > /dev/null 2>&1 || { echo "$p did not install" >&2; exit 1; }
done
