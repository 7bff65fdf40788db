#!/usr/bin/env bash
# A real OCI registry on loopback for tests and benchmarks: the CNCF distribution registry as Debian packages
# it (docker-registry), installed when missing, started with a generated config on a free 127.0.0.1 port.
#
#   scripts/test-registry.sh start DIR [USER:PASSWORD]   prints HOST:PORT once the registry answers
#   scripts/test-registry.sh stop DIR
#
# DIR holds the config, the blobs, the log and the pid. With USER:PASSWORD the registry asks for basic auth
# (an htpasswd file with a bcrypt hash of cost 4: the registry checks it on every request, and cost 12
# takes ~0.3 s of CPU each time). REGISTRY_BIN overrides the binary (e.g. one shipped in a tarball).
# Exit 3 when the registry cannot be installed or started: callers skip and say why (the last line of stderr).
set -euo pipefail

cmd=${1:?usage: test-registry.sh start|stop DIR [USER:PASSWORD]}
dir=${2:?usage: test-registry.sh start|stop DIR [USER:PASSWORD]}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

fail() { echo "test-registry: $*" >&2; exit 3; }

if [ "$cmd" = stop ]; then
  if [ -f "$dir/registry.pid" ]; then
    kill "$(cat "$dir/registry.pid")" 2>/dev/null || true
    rm -f "$dir/registry.pid"
  fi
  exit 0
fi
[ "$cmd" = start ] || fail "unknown command $cmd"

bin=${REGISTRY_BIN:-$(command -v docker-registry || true)}
if [ -z "$bin" ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; then
    fail "docker-registry is not installed and cannot be (needs root and apt-get): apt-get install docker-registry"
  fi
  # The package's service is not wanted: tests start their own instance. policy-rc.d stops dpkg from starting it.
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry; } \
      > "$dir/apt.log" 2>&1 || fail "apt-get install docker-registry failed: $(tail -1 "$dir/apt.log")"
  bin=$(command -v docker-registry) || fail "docker-registry installed but not on PATH"
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    2>/dev/null || echo $((20000 + RANDOM % 40000)))

auth=""
if [ -n "${3:-}" ]; then
  user=${3%%:*}
  password=${3#*:}
  hash=$(python3 -W ignore -c 'import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))' \
      "$password" 2>/dev/null || true)
  if [ -z "$hash" ] && command -v htpasswd > /dev/null; then
    hash=$(htpasswd -nbB -C 4 "$user" "$password" | cut -d: -f2-)
  fi
  [ -n "$hash" ] || fail "cannot make a bcrypt hash for the htpasswd file (needs python3's crypt or htpasswd)"
  printf '%s:%s\n' "$user" "$hash" > "$dir/htpasswd"
  auth="auth:
  htpasswd:
    realm: thaw-test
    path: $dir/htpasswd"
fi

cat > "$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:$port
  secret: thaw-test-registry
$auth
EOF

"$bin" serve "$dir/config.yml" > "$dir/registry.log" 2>&1 &
echo $! > "$dir/registry.pid"
for _ in $(seq 1 100); do
  code=$(python3 -c 'import sys, urllib.request, urllib.error
try: print(urllib.request.urlopen(sys.argv[1], timeout=1).status)
except urllib.error.HTTPError as e: print(e.code)
except Exception: print(0)' "http://127.0.0.1:$port/v2/" 2>/dev/null || echo 0)
  if [ "$code" = 200 ] || [ "$code" = 401 ]; then
    echo "127.0.0.1:$port"
    exit 0
  fi
  if ! kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null; then
    fail "docker-registry exited: $(tail -1 "$dir/registry.log")"
  fi
  sleep 0.1
done
kill "$(cat "$dir/registry.pid")" 2>/dev/null || true
fail "docker-registry did not answer on 127.0.0.1:$port within 10 s: $(tail -1 "$dir/registry.log")"
