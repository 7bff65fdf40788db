#!/usr/bin/env bash
# Thaw's class-data sharing archive for the container image, where the distribution lives at /opt/thaw: made here,
# by the distribution's own runtime, from its class list (the dist build's training run), without /opt/thaw on this
# machine. JDK 17 records each class path entry as the dump was given it and checks, at every start, that the entry
# names the very jar the JVM is given (same file, size and time). So the dump is given each jar as ../ sixteen times
# then opt/thaw/lib/NAME, from a folder sixteen levels under a scratch root whose opt/thaw is the distribution: in the
# container, from any working directory up to sixteen levels deep, that name is /opt/thaw/lib/NAME (.. stops at /),
# the jar the entrypoint's class path names. Jib gives every file the same time (1970-01-01T00:00:01Z); the dist build
# has given the jars that time already.
#   scripts/container-cds.sh DIST OUT    DIST: distribution/target/thaw (-Pdist); OUT: replaced, gets
#     OUT/rootfs/opt/thaw/lib/thaw.jsa   the archive, for Jib's extra directories
#     OUT/classpath                      the entrypoint's class path (/opt/thaw/lib/*.jar one by one, in byte order)
set -euo pipefail
dist=$(cd "${1:?usage: container-cds.sh DIST OUT}" && pwd)
out=${2:?usage: container-cds.sh DIST OUT}
list="$dist/lib/thaw.classlist"
[[ -r "$list" && -x "$dist/runtime/bin/java" ]] || { echo "container-cds: $dist lacks lib/thaw.classlist or runtime/ (build with -Pdist)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/rootfs/opt/thaw/lib" "$out/scratch/opt"
ln -s "$dist" "$out/scratch/opt/thaw"
cwd="$out/scratch$(printf '/d%.0s' $(seq 16))"
mkdir -p "$cwd"
up=$(printf '../%.0s' $(seq 16))
names=()
while IFS= read -r jar; do
  names+=("$(basename "$jar")")
done < <(printf '%s\n' "$dist"/lib/*.jar | LC_ALL=C sort)
relative=$(printf "${up}opt/thaw/lib/%s:" "${names[@]}")
absolute=$(printf '/opt/thaw/lib/%s:' "${names[@]}")
if ! (cd "$cwd" && "$dist/runtime/bin/java" -Xshare:dump -XX:SharedClassListFile="$list" \
    -XX:SharedArchiveFile="$out/rootfs/opt/thaw/lib/thaw.jsa" -cp "${relative%:}" > "$out/dump.log" 2>&1); then
  cat "$out/dump.log" >&2
  echo "container-cds: the dump failed" >&2
  exit 1
fi
printf '%s' "${absolute%:}" > "$out/classpath"
rm -rf "$out/scratch"
echo "container-cds: $out/rootfs/opt/thaw/lib/thaw.jsa ($(( $(stat -c %s "$out/rootfs/opt/thaw/lib/thaw.jsa") >> 20 )) MiB) for /opt/thaw"
