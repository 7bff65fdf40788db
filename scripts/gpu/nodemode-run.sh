#!/usr/bin/env bash
# Node mode on a GPU, where issue 25's goal is measured: a request through a running `thaw proxy` to a scaled-to-zero
# GPT-2-large instance in the node server costs <= 1 ms more than the same request sent to the server directly
# (~40 ms from the host cache).
#  1. GPT-2-large built on the GPU and pushed to a real registry on loopback (thaw/tools/docker-registry, from the
#     tools tarball unpacked over the main one, as registry-run.sh uses it).
#  2. The node server as its DaemonSet runs it (`thaw serve --socket`, pool-backed, 2 idle workers, 8 GiB host cache,
#     no HBM tier: every cold start copies from the host cache), and a proxy as its function pod runs it (`thaw proxy`,
#     the small JVM of the manifest, keep-alive 1s): the proxy registers the function by reference, the server pulls it.
#  3. Cold starts, the instance scaled to zero before each (idle workers back, the image staged): 16 tokens in, 1 out,
#     in rounds of three, rotating their order: through the proxy, straight to the server's TCP port (admin token),
#     straight to its socket (the function's token), 7 rounds. Per path the median and every sample with its
#     Server-Timing; the proxy's cost is the median of its per-round difference to each direct path (a cold start's own
#     spread, ~1-2 ms, is in it). Then warm p50 on each path: the proxy's hop is the same warm or cold, and the warm
#     difference measures it without the cold start's spread.
#  4. The proxy's own start on this host: SIGTERM, a new proxy registering again (the server holds the image), from
#     exec to ready, 5 times, and its RSS.
# Then, with the HBM tier (16 GiB), the cold rounds again: from the second cold start on, the weights come from the GPU.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/nodemode-run.sh <unpacked thaw dir>  (~8 minutes)
# Prints the per-path lines and "proxy cost: +X ms (median of N rounds) against TCP, +Y against the socket"; exits
# non-zero on any failed request. THAW_DEVICE=sim NODEMODE_MODEL=tiny make a dry run of its steps off the GPU host.
# NODEMODE_ROUNDS (7) and NODEMODE_TIERS ("host-cache hbm") shorten it.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/nodemode-run.sh <unpacked thaw dir>}" && pwd)
thaw="$home/bin/thaw"
work=$(mktemp -d /tmp/thaw-nodemode.XXXXXX)
export THAW_DEVICE=${THAW_DEVICE:-cuda}
model=${NODEMODE_MODEL:-gpt2-large}
mkdir -p "$OUT"
status=0
strip() { sed 's/\x1b\[[0-9;]*m//g'; }
node_pid="" proxy_pid=""
cleanup() {
  [[ -n "$proxy_pid" ]] && kill -TERM "$proxy_pid" 2> /dev/null
  [[ -n "$node_pid" ]] && kill -TERM "$node_pid" 2> /dev/null
  wait 2> /dev/null
  bash scripts/test-registry.sh stop "$work/registry" > /dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1

registry_bin="$home/tools/docker-registry"
[[ -x "$registry_bin" ]] || registry_bin=$(command -v docker-registry || true)
if [[ -z "$registry_bin" ]]; then
  echo "no registry: $home/tools/docker-registry is missing (unpack thaw-tools-linux-x86_64.tar.xz over the main" \
       "tarball); nothing measured" | tee "$OUT/nodemode.txt"
  exit 1
fi
addr=$(REGISTRY_BIN="$registry_bin" bash scripts/test-registry.sh start "$work/registry" 2> "$work/registry.err")
if [[ -z "$addr" ]]; then
  { echo "the registry did not start:"; cat "$work/registry.err"; } | tee "$OUT/nodemode.txt"
  exit 1
fi
ref="$addr/thaw/$model:1"
# Thaw's class-data sharing archive for this folder (seconds, once): the proxy's start is measured with it.
[[ -r "$home/lib/thaw.jsa" || ! -x "$home/bin/thaw-cds" ]] || "$home/bin/thaw-cds" > "$OUT/cds.txt" 2>&1

python3 - "$work" "$model" <<'PY'
import json, sys
tokens = [15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275, 21281, 39983, 5076, 24913, 29307]
if sys.argv[2] == "tiny":
    tokens = [t % 97 for t in tokens]   # the dry run's model has 97 tokens
json.dump({"tokens": [tokens], "maxNewTokens": 1}, open(sys.argv[1] + "/gpt2.json", "w"))
PY
echo "== 1. build $model and push it to $ref"
{
  THAW_STORE="$work/built" "$thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
      --config '{"model": "'"$model"'", "seed": 1, "maxBatch": 1, "maxTokens": 64}' --tag gpt2:1 \
      --sample-request "$work/gpt2.json" && THAW_STORE="$work/built" "$thaw" push gpt2:1 "$ref"
} > "$OUT/build.txt" 2>&1 || { echo "build or push failed"; tail -5 "$OUT/build.txt"; exit 1; }
tail -2 "$OUT/build.txt"

cat > "$work/client.py" <<'PY'
import http.client, json, os, signal, socket, statistics, subprocess, sys, time, urllib.request, urllib.error
work, node_port, proxy_port, admin, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
sock = work + "/thaw.sock"
body = open(work + "/gpt2.json").read().encode()
token = open(work + "/token").read().strip()
class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("thaw", timeout=120); self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); self.sock.connect(self.path)
paths = {
    "proxy": (lambda: http.client.HTTPConnection("127.0.0.1", proxy_port, timeout=120), {}),
    "server-tcp": (lambda: http.client.HTTPConnection("127.0.0.1", node_port, timeout=120),
                   {"Authorization": "Bearer " + admin}),
    "server-socket": (lambda: UnixConnection(sock), {"Thaw-Function-Token": token}),
}
def timing(h):
    t, tier = {}, None
    for part in (h.get("Server-Timing") or "").split(","):
        part = part.strip()
        if ";dur=" in part:
            k, v = part.split(";dur="); t[k] = float(v)
        elif part.startswith("tier;desc="):
            tier = part[len("tier;desc="):].strip('"')
    return t, tier
def post(conn, extra):
    h = {"Content-Type": "application/json"}; h.update(extra)
    t = time.perf_counter()
    conn.request("POST", "/v1/functions/gpt2/invoke", body, h)
    r = conn.getresponse(); out = r.read()
    ms = (time.perf_counter() - t) * 1e3
    st, tier = timing(r.headers)
    return {"status": r.status, "ms": ms, "start": r.headers.get("Thaw-Start"), "tier": tier, "timing": st,
            "body": out[:160].decode(errors="replace")}
def admin_get(path):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (node_port, path), headers={"Authorization": "Bearer " + admin})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()
def idle_workers():
    return sum(float(l.rsplit(" ", 1)[1]) for l in admin_get("/metrics").splitlines()
               if l.startswith("thaw_pool_workers") and 'state="idle"' in l)
def settle():
    t = time.time()
    while time.time() - t < 90:
        s = json.loads(admin_get("/v1/functions/gpt2"))
        if s.get("state") == "cold" and s.get("image", {}).get("hostCache") in ("cached", "store") \
                and idle_workers() >= 2:
            break
        time.sleep(0.1)
    time.sleep(2)
order = list(paths)
cold = {k: [] for k in paths}
for i in range(rounds):
    for k in order[i % 3:] + order[:i % 3]:
        settle()
        make, extra = paths[k]
        c = make(); r = post(c, extra); c.close()
        cold[k].append(r)
        print("cold %-13s %7.2f ms  status %d  %s tier %s  %s" % (k, r["ms"], r["status"], r["start"], r["tier"],
              " ".join("%s=%.2f" % kv for kv in r["timing"].items())), flush=True)
print()
for k, rs in cold.items():
    print("%-13s cold median %7.2f ms (min %.2f, max %.2f; server %.2f)" % (k, statistics.median(r["ms"] for r in rs),
          min(r["ms"] for r in rs), max(r["ms"] for r in rs), statistics.median(r["timing"].get("server", 0) for r in rs)))
for direct in ("server-tcp", "server-socket"):
    d = [p["ms"] - s["ms"] for p, s in zip(cold["proxy"], cold[direct])]
    print("proxy cost against %-13s +%.2f ms (median of %d rounds; each round %s)" % (direct, statistics.median(d),
          len(d), " ".join("%+.2f" % x for x in d)))
warm = {}
for k, (make, extra) in paths.items():
    c = make(); rs = [post(c, extra) for _ in range(40)][10:]; c.close()
    warm[k] = statistics.median(r["ms"] for r in rs)
    print("warm %-13s p50 %.3f ms (invoke %.3f)" % (k, warm[k], statistics.median(r["timing"].get("invoke", 0) for r in rs)))
print("proxy cost warm: +%.3f ms against TCP, +%.3f against the socket" % (warm["proxy"] - warm["server-tcp"],
      warm["proxy"] - warm["server-socket"]))
json.dump({"cold": cold, "warm": warm}, open(work + "/nodemode.json", "w"), indent=1)
bad = [r for rs in cold.values() for r in rs if r["status"] != 200]
sys.exit(1 if bad else 0)
PY

# The JVM options of the proxy's manifest (deploy/kubernetes/node/gpt2-proxy-service.yaml).
small="-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -Xss256k -Xms8m -Xmx32m"
small="$small -XX:ReservedCodeCacheSize=16m -XX:-UsePerfData -XX:+UnlockDiagnosticVMOptions -XX:ArchiveRelocationMode=0"
key=nodemode-tenant-key-0123456789
admin=nodemode-admin-token-0123456789
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
start_proxy() {
  PORT=$proxy_port THAW_FUNCTION_KEY=$key THAW_JAVA_OPTS="$small" "$thaw" proxy --socket "$work/thaw.sock" \
      --function "gpt2=$ref" --keep-alive 1s >> "$work/proxy.log" 2>&1 &
  proxy_pid=$!
}
await_ready() {
  python3 - "$proxy_port" "$1" <<'PY'
import sys, time, urllib.request, urllib.error
port, limit = int(sys.argv[1]), float(sys.argv[2])
t = time.time()
while time.time() - t < limit:
    try:
        if urllib.request.urlopen("http://127.0.0.1:%d/v2/health/ready" % port, timeout=5).status == 200:
            sys.exit(0)
    except (urllib.error.URLError, ConnectionError, OSError):
        pass
    time.sleep(0.002)
sys.exit(1)
PY
}

for tier in ${NODEMODE_TIERS:-host-cache hbm}; do
  echo "== 2-3. node server ($tier) and proxy: cold through the proxy and straight to the server"
  hbm=0; [[ $tier == hbm ]] && hbm=16g
  node_port=$(free_port); proxy_port=$(free_port)
  rm -f "$work/proxy.log"
  THAW_ADMIN_TOKEN=$admin "$thaw" serve --socket "$work/thaw.sock" --port "$node_port" --store "$work/node" \
      --idle-workers 2 --host-cache 8g --hbm-tier $hbm > "$work/node-$tier.log" 2>&1 &
  node_pid=$!
  start_proxy
  if ! await_ready 600; then
    echo "the proxy never became ready"; tail -5 "$work/proxy.log"; tail -20 "$work/node-$tier.log"; status=1
  else
    # The function's token, as the proxy holds it: the registration by the same key hands it over again.
    python3 - "$work" "$key" "$ref" <<'PY'
import http.client, json, socket, sys
work, key, ref = sys.argv[1:4]
class U(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); self.sock.connect(work + "/thaw.sock")
c = U("thaw")
c.request("PUT", "/v1/functions/gpt2", json.dumps({"image": ref, "keepAlive": "1s"}),
          {"Content-Type": "application/json", "Thaw-Function-Key": key})
r = c.getresponse(); r.read()
open(work + "/token", "w").write(r.getheader("Thaw-Function-Token"))
print("registration by the same key: %d (nothing changes)" % r.status)
PY
    timeout 900 python3 "$work/client.py" "$work" "$node_port" "$proxy_port" "$admin" "${NODEMODE_ROUNDS:-7}" | strip \
        | tee "$OUT/nodemode-$tier.txt" || status=1
    cp "$work/nodemode.json" "$OUT/nodemode-$tier.json" 2> /dev/null
    if [[ $tier == host-cache ]]; then
      echo "== 4. the proxy's start: a new one registering again, exec to ready, and its RSS"
      for i in 1 2 3 4 5; do
        kill -TERM "$proxy_pid"; wait "$proxy_pid"
        t0=$(date +%s%N); start_proxy
        await_ready 60 || { echo "not ready"; status=1; }
        t1=$(date +%s%N)
        echo "proxy start $i: $(( (t1 - t0) / 1000000 )) ms to ready; RSS $(awk '/VmRSS/ {print int($2/1024)}' \
            /proc/$proxy_pid/status) MiB ($(awk '/RssAnon/ {print int($2/1024)}' /proc/$proxy_pid/status) MiB its own)"
      done > "$OUT/proxy-start.txt"
      cat "$OUT/proxy-start.txt"
    fi
  fi
  kill -TERM "$proxy_pid" 2> /dev/null; wait "$proxy_pid" 2> /dev/null; proxy_pid=""
  kill -TERM "$node_pid"; wait "$node_pid"; echo "node server exit status after SIGTERM: $?"; node_pid=""
  grep -v '^\[main\] INFO' "$work/node-$tier.log" | strip | grep -v 'warm queue=' > "$OUT/node-$tier-log.txt"
  cp "$work/proxy.log" "$OUT/proxy-$tier-log.txt"
done
exit $status
