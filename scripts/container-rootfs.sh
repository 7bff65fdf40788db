#!/usr/bin/env bash
# The base of Thaw's container image, with no base image to pull: the shared libraries the jlink runtime, RocksDB
# and JNA need (glibc, libgcc, libstdc++, zlib), taken from this machine's Debian packages — the packages the
# runtime was linked against — plus the few files a container of it needs (passwd, ld.so config, /tmp).
# The way distroless images are made, on the packages at hand.
#   scripts/container-rootfs.sh OUT
# Writes OUT/ (replacing it). Symlinks are resolved to files: Jib copies a link's target anyway.
set -euo pipefail
out=${1:?usage: container-rootfs.sh OUT}
packages="libc6 libgcc-s1 libstdc++6 zlib1g"
rm -rf "$out"
mkdir -p "$out/usr/lib/x86_64-linux-gnu" "$out/lib64" "$out/etc/ld.so.conf.d" "$out/tmp" "$out/root" \
    "$out/var/lib/thaw" "$out/usr/share/thaw"
for p in $packages; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    echo "container-rootfs: Debian package $p is not installed here (apt-get install $p)" >&2
    exit 1
  fi
  dpkg-query -W -f='${Package}=${Version}\n' "$p" >> "$out/usr/share/thaw/base-packages.txt"
  mkdir -p "$out/usr/share/doc/$p"
  cp -L "/usr/share/doc/$p/copyright" "$out/usr/share/doc/$p/copyright"
  # Only the names the dynamic linker looks up (libfoo.so.N), never the versioned files they point at.
  dpkg -L "$p" | grep -E '/x86_64-linux-gnu/[^/]+\.so\.[0-9]+$' | while read -r f; do
    [ -e "$f" ] && cp -L "$f" "$out/usr/lib/x86_64-linux-gnu/$(basename "$f")"
  done
done
# The ELF interpreter every binary names (PT_INTERP).
cp -L /lib64/ld-linux-x86-64.so.2 "$out/lib64/ld-linux-x86-64.so.2"
printf 'include /etc/ld.so.conf.d/*.conf\n' > "$out/etc/ld.so.conf"
printf '/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n' \
    > "$out/etc/ld.so.conf.d/x86_64-linux-gnu.conf"
printf 'root:x:0:0:root:/root:/sbin/nologin\nthaw:x:1000:1000:thaw:/var/lib/thaw:/sbin/nologin\n' > "$out/etc/passwd"
printf 'root:x:0:\nthaw:x:1000:\n' > "$out/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$out/etc/nsswitch.conf"
du -sh "$out" | awk '{print "container-rootfs: " $1 " of base libraries in '"$out"'"}'
