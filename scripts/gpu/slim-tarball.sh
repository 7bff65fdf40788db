#!/usr/bin/env bash
# Makes the distribution tarball small enough to travel to a GPU machine beside the repository (the device tool
# carries at most 64 MiB in all): the jlink runtime's default class-data archive (lib/server/classes.jsa, 11.7 MB,
# remade there in seconds by wave-run.sh with `java -Xshare:dump`), JMH and its libraries (jmh-core, jopt-simple,
# commons-math3: bin/thaw-bench's JMH runs only, which no GPU script makes) and the plotting libraries (xchart,
# VectorGraphics2D: the runtime has no AWT, plots are drawn where a JDK is) are left out, and the rest is packed with
# xz -9e.
# Usage: scripts/gpu/slim-tarball.sh [TARBALL]   (default: distribution/target/thaw-*-linux-x86_64.tar.xz)
# Writes .device/thaw-<version>-linux-x86_64.tar.xz and prints its size.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:-$(ls "$root"/distribution/target/thaw-*-linux-x86_64.tar.xz | grep -v thaw-tools | head -1)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xJf "$src" -C "$work"
rm -f "$work"/thaw/runtime/lib/server/classes.jsa "$work"/thaw/lib/bench/{commons-math3,jmh-core,jopt-simple}-*.jar \
    "$work"/thaw/lib/bench/{xchart,VectorGraphics2D}-*.jar
mkdir -p "$root/.device"
out="$root/.device/$(basename "$src")"
tar cf - -C "$work" thaw | xz -9e -T2 > "$out.tmp"
mv "$out.tmp" "$out"
ls -la "$out"
