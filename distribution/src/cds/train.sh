#!/usr/bin/env bash
# The training run of Thaw's class-data sharing archive (see docs/design/server.md, "Start to first response"): real
# work on the simulated device, with every JVM on the way (the CLI's, the server's, each pool worker's) writing the
# classes it loads (-XX:DumpLoadedClassList, one list per process), merged into one list, first use first.
#   train.sh HOME OUT     HOME: a distribution layout (bin/thaw, lib/, runtime/); OUT: the merged class list
# The work: `thaw demo` (builds the example MLP, serves it in process, invokes it cold and warm over HTTP), then
# `thaw serve --function` the way a Knative pod runs it (K_SERVICE set: the store read-only, the pool, no host cache)
# and in process, each up to its first response, a second one, the probes and /metrics, then SIGTERM; then node mode's
# function pod, `thaw proxy`, against a `thaw serve --socket-only`: registered by a reference to a registry that is
# not there (the build machine has none), so its probes, its forwarding and the server's refusal all run; SIGTERM.
# Runs in ~20 s on 2 cores; the dist build runs it (distribution/pom.xml), never CI.
set -euo pipefail
home=${1:?usage: train.sh HOME OUT}
out=${2:?usage: train.sh HOME OUT}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/thaw-cds-train.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists"
# A list per process (%p): the server and its workers run at once.
export JAVA_TOOL_OPTIONS="-XX:DumpLoadedClassList=$tmp/lists/%p.classlist"
export THAW_DEVICE=sim THAW_STORE="$tmp/store"
# No archive while training: what is loaded must come from the jars, as on a first start without one.
export THAW_JAVA_OPTS="-Xshare:auto"
unset K_SERVICE K_REVISION K_CONFIGURATION PORT

"$home/bin/thaw" demo --device sim > "$tmp/demo.log" 2>&1 || { cat "$tmp/demo.log" >&2; exit 1; }

# The demo's request: 2 rows of the MLP's 64 inputs.
row=$(printf '0.1,%.0s' $(seq 63))0.1
body="{\"inputs\": [[$row], [$row]]}"

# POST/GET over bash's /dev/tcp (the build machine may have no curl); prints the status code.
http() {
  local method=$1 path=$2 data=${3:-} status
  exec 3<> "/dev/tcp/127.0.0.1/$port" || return 1
  printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
      "$method" "$path" "${#data}" "$data" >&3
  IFS=' ' read -r _ status _ <&3 || status=000
  cat <&3 > /dev/null
  exec 3<&-
  echo "$status"
}

serve() {
  local name=$1 pid port="" status="" i
  shift
  "$home/bin/thaw" serve --device sim --port 0 --function mlp=demo:mlp "$@" > "$tmp/$name.log" 2>&1 &
  pid=$!
  for i in $(seq 600); do
    port=$(sed -n 's#.*listening on http://127.0.0.1:\([0-9]*\).*#\1#p' "$tmp/$name.log" | head -n1)
    [[ -n "$port" ]] && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  if [[ -z "$port" ]]; then
    kill "$pid" 2> /dev/null || true
    echo "train.sh: thaw serve ($name) did not listen" >&2; cat "$tmp/$name.log" >&2; return 1
  fi
  http GET /v2/health/live > /dev/null || true
  for i in $(seq 600); do
    status=$(http POST /v1/functions/mlp/invoke "$body" || echo 000)
    [[ "$status" == 200 ]] && break
    sleep 0.1
  done
  if [[ "$status" != 200 ]]; then
    kill "$pid" 2> /dev/null || true
    echo "train.sh: thaw serve ($name) never answered 200" >&2; cat "$tmp/$name.log" >&2; return 1
  fi
  http POST /v1/functions/mlp/invoke "$body" > /dev/null
  http GET /v2/health/ready > /dev/null
  http GET /v2/models/mlp/ready > /dev/null
  http GET /metrics > /dev/null
  kill -TERM "$pid"
  wait "$pid" || { echo "train.sh: thaw serve ($name) exited $?" >&2; cat "$tmp/$name.log" >&2; return 1; }
}

K_SERVICE=train K_REVISION=train-1 serve knative-pool
serve in-process --instances in-process --read-only-store

# Node mode: the server on a socket only, and a proxy in front of it, each JVM as small as a pod runs it.
node() {
  local sock="$tmp/node/thaw.sock" spid ppid i
  mkdir -p "$tmp/node"
  "$home/bin/thaw" serve --device sim --socket-only --socket "$sock" --store "$tmp/node/store" --instances in-process \
      > "$tmp/node.log" 2>&1 &
  spid=$!
  for i in $(seq 600); do
    [[ -S "$sock" ]] && break
    sleep 0.1
  done
  THAW_FUNCTION_KEY=train-key-0123456789 THAW_JAVA_OPTS="-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss256k -Xmx32m" \
      "$home/bin/thaw" proxy --port 0 --socket "$sock" --function train=127.0.0.1:9/thaw/train:1 \
      > "$tmp/proxy.log" 2>&1 &
  ppid=$!
  port=""
  for i in $(seq 300); do
    port=$(sed -n 's#.*listening on http://127.0.0.1:\([0-9]*\).*#\1#p' "$tmp/proxy.log" | head -n1)
    [[ -n "$port" ]] && grep -q "registered with" "$tmp/proxy.log" && break
    sleep 0.1
  done
  if [[ -z "$port" ]]; then
    kill "$ppid" "$spid" 2> /dev/null || true
    echo "train.sh: thaw proxy did not listen" >&2; cat "$tmp/proxy.log" "$tmp/node.log" >&2; return 1
  fi
  # Ready is never 200 here (the image cannot be pulled): probe while the pull fails, as a kubelet would.
  for i in $(seq 20); do
    http GET /v2/health/ready > /dev/null || true
    sleep 0.1
  done
  http GET /v2/health/live > /dev/null || true
  http GET /v2/health/ready > /dev/null || true
  http POST /v1/functions/train/invoke "$body" > /dev/null || true
  http GET /v2/models/train > /dev/null || true
  kill -TERM "$ppid" "$spid"
  wait "$ppid" || { echo "train.sh: thaw proxy exited $?" >&2; cat "$tmp/proxy.log" >&2; return 1; }
  wait "$spid" || { echo "train.sh: thaw serve --socket exited $?" >&2; cat "$tmp/node.log" >&2; return 1; }
}
node

# Merged, first use first; the dump loads every class a list names (a missing one is skipped with a warning).
cat "$tmp"/lists/*.classlist | grep -v '^#' | awk '!seen[$0]++' > "$out"
echo "train.sh: $(ls "$tmp"/lists | wc -l) processes, $(wc -l < "$out") entries (classes, lambda forms and proxies) in $out"
