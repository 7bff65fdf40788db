#!/usr/bin/env bash
# Node mode's function pod, two candidates, on this machine (the sim device: the node server's GPU work is not what
# is measured): `thaw proxy`, and an existing proxy plus a registration step (socat in front of the socket, the
# function registered by curl). Per candidate, RUNS starts: from exec to ready (its GET /v2/health/ready answering 200;
# for socat, the registration's answer and then GET /v2/models/NAME through it) and the process's RSS once ready and
# after 300 warm requests; then the warm round trip of an MLP invoke, p50 over 300 on one kept-alive connection:
# straight to the node server (TCP, and its socket) and through each candidate.
#   scripts/bench/proxy-bench.sh [THAW_HOME] [WORKDIR]     THAW_HOME: a distribution layout, default
#                                                          distribution/target/thaw (-Pdist for Thaw's CDS archive)
# Writes WORKDIR/results.txt (default /tmp/thaw-proxy-bench). RUNS (default 10) sets the starts per candidate;
# EXTRA_JAVA_OPTS adds JVM options to the proxy's.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
home=$(cd "${1:-$repo/distribution/target/thaw}" && pwd)
work=${2:-/tmp/thaw-proxy-bench}
rm -rf "$work" && mkdir -p "$work"
thaw="$home/bin/thaw"
export THAW_DEVICE=sim
bash "$repo/scripts/install-test-tools.sh" socat curl > "$work/tools.log" 2>&1 \
  || echo "socat or curl cannot be installed ($(tail -1 "$work/tools.log")): thaw proxy alone is measured"
addr=$(bash "$repo/scripts/test-registry.sh" start "$work/registry")
node_pid=""
cleanup() {
  [[ -n "$node_pid" ]] && kill -TERM "$node_pid" 2> /dev/null && wait "$node_pid" 2> /dev/null
  bash "$repo/scripts/test-registry.sh" stop "$work/registry"
}
trap cleanup EXIT

python3 -c 'import json; json.dump({"inputs": [[0.1] * 64] * 2}, open("'"$work"'/mlp.json", "w"))'
THAW_STORE="$work/built" "$thaw" build --function dev.thaw.examples.mlp.MlpFunction \
    --config '{"layers": [64, 256, 10], "seed": 42}' --tag mlp:1 --sample-request "$work/mlp.json" > "$work/build.log"
THAW_STORE="$work/built" "$thaw" push mlp:1 "$addr/thaw/mlp:1" > "$work/push.log"

admin=bench-admin-token-0123456789
THAW_ADMIN_TOKEN=$admin "$thaw" serve --socket "$work/thaw.sock" --port 0 --store "$work/node" --idle-workers 1 \
    --host-cache 64m > "$work/node.log" 2>&1 &
node_pid=$!
for _ in $(seq 600); do
  grep -q "listening on" "$work/node.log" && break
  sleep 0.1
done
port=$(sed -n 's#.*listening on http://127.0.0.1:\([0-9]*\).*#\1#p' "$work/node.log")
[[ -n "$port" ]] || { cat "$work/node.log"; exit 1; }

RUNS=${RUNS:-10} EXTRA_JAVA_OPTS=${EXTRA_JAVA_OPTS:-} python3 - "$thaw" "$work" "$port" "$addr/thaw/mlp:1" "$admin" <<'PY' | tee "$work/results.txt"
import http.client, json, os, signal, socket, statistics, subprocess, sys, time, urllib.request, urllib.error
thaw, work, node_port, ref, admin = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
sock = work + "/thaw.sock"
runs = int(os.environ.get("RUNS", "10"))
key = "bench-tenant-key-0123456789"
body = open(work + "/mlp.json").read()
# The JVM options of the proxy's manifest (deploy/kubernetes/node/gpt2-proxy-service.yaml).
small = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -Xss256k -Xms8m -Xmx32m " \
        "-XX:ReservedCodeCacheSize=16m -XX:-UsePerfData -XX:+UnlockDiagnosticVMOptions -XX:ArchiveRelocationMode=0"
# EXTRA_JAVA_OPTS adds to them, e.g. -Xshare:auto (the JDK's class-data sharing archive only, not Thaw's).
small = (small + " " + os.environ.get("EXTRA_JAVA_OPTS", "")).strip()

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def status(port, path, headers=None):
    try:
        r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                                          headers=headers or {}), timeout=5)
        return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (ConnectionError, urllib.error.URLError, socket.timeout):
        return 0, ""

def rss(pid):
    """(VmRSS, RssAnon) in MiB: all resident pages, and those no other process can share (file-backed pages, such as
    the class-data sharing archive's, are shared with the node server's JVM where both run one image)."""
    got = {}
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith(("VmRSS:", "RssAnon:")):
                got[line.split(":")[0]] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return got.get("VmRSS", float("nan")), got.get("RssAnon", float("nan"))

class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("thaw", timeout=30); self.path = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); self.sock.connect(self.path)

def warm(conn, path, headers, n=300):
    h = {"Content-Type": "application/json"}; h.update(headers)
    times = []
    for i in range(n + 20):
        t = time.perf_counter()
        conn.request("POST", path, body, h); r = conn.getresponse(); r.read()
        if r.status != 200:
            raise SystemExit("%s answered %d" % (path, r.status))
        if i >= 20:
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)

def register(name):
    c = UnixConnection(sock)
    c.request("PUT", "/v1/functions/" + name, json.dumps({"image": ref, "keepAlive": "600s"}),
              {"Content-Type": "application/json", "Thaw-Function-Key": key})
    r = c.getresponse(); r.read(); c.close()
    return r.status, r.getheader("Thaw-Function-Token")

# The first registration pulls the image; every start measured below finds the node server holding it.
code, token = register("mlp")
for _ in range(600):
    c = UnixConnection(sock); c.request("GET", "/v2/models/mlp", headers={"Thaw-Function-Token": token})
    r = c.getresponse(); r.read(); c.close()
    if r.status == 200:
        break
    time.sleep(0.1)
print("node server on 127.0.0.1:%d and %s; %d cores; load %s; proxy JVM options: %s" % (node_port, sock,
      os.cpu_count(), open("/proc/loadavg").read().split()[:3], small))

results = {}
def thaw_proxy():
    starts, rss_ready, rss_after, p50 = [], [], [], None
    for i in range(runs):
        port = free_port()
        env = dict(os.environ, PORT=str(port), THAW_FUNCTION_KEY=key, THAW_JAVA_OPTS=small)
        t0 = time.perf_counter()
        p = subprocess.Popen([thaw, "proxy", "--socket", sock, "--function", "mlp=" + ref, "--keep-alive", "600s"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while status(port, "/v2/health/ready")[0] != 200:
            if p.poll() is not None:
                raise SystemExit("thaw proxy exited %d" % p.returncode)
            time.sleep(0.002)
        starts.append((time.perf_counter() - t0) * 1e3)
        rss_ready.append(rss(p.pid))
        if i == runs - 1:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            p50 = warm(conn, "/v1/functions/mlp/invoke", {})
            conn.close()
            rss_after.append(rss(p.pid))
        p.send_signal(signal.SIGTERM); p.wait(30)
    return starts, rss_ready, rss_after, p50

def socat_proxy():
    starts, rss_ready, rss_after, p50 = [], [], [], None
    for i in range(runs):
        port = free_port()
        t0 = time.perf_counter()
        reg = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", sock, "-X", "PUT",
                              "http://thaw/v1/functions/mlp", "-H", "Content-Type: application/json",
                              "-H", "Thaw-Function-Key: " + key, "-d", json.dumps({"image": ref,
                              "keepAlive": "600s"})], capture_output=True, text=True)
        if reg.stdout not in ("200", "201"):
            raise SystemExit("registration by curl answered " + reg.stdout)
        p = subprocess.Popen(["socat", "TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr" % port, "UNIX-CONNECT:" + sock],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # socat passes bytes: the function's token has to come from the client (here, this script).
        while status(port, "/v2/models/mlp", {"Thaw-Function-Token": token})[0] != 200:
            time.sleep(0.002)
        starts.append((time.perf_counter() - t0) * 1e3)
        rss_ready.append(rss(p.pid))
        if i == runs - 1:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            p50 = warm(conn, "/v1/functions/mlp/invoke", {"Thaw-Function-Token": token})
            conn.close()
            # socat forks a child per connection; the parent's RSS is what waits for the next one.
            rss_after.append(rss(p.pid))
        p.send_signal(signal.SIGTERM); p.wait(30)
    return starts, rss_ready, rss_after, p50

def show(name, r):
    starts, ready, after, p50 = r
    print("%-34s exec->ready ms: median %6.1f  min %6.1f  max %6.1f   RSS MiB ready %5.1f (anonymous %4.1f)  after "
          "300 requests %5.1f (%4.1f)   warm invoke p50 %.3f ms" % (name, statistics.median(starts), min(starts),
          max(starts), statistics.median(x[0] for x in ready), statistics.median(x[1] for x in ready), after[-1][0],
          after[-1][1], p50))

# The server's own path warmed first (its JIT), so that the order of what follows does not decide.
warm(UnixConnection(sock), "/v1/functions/mlp/invoke", {"Thaw-Function-Token": token}, 1000)
direct_tcp = warm(http.client.HTTPConnection("127.0.0.1", node_port, timeout=30), "/v1/functions/mlp/invoke",
                  {"Authorization": "Bearer " + admin})
direct_uds = warm(UnixConnection(sock), "/v1/functions/mlp/invoke", {"Thaw-Function-Token": token})
print("%-34s warm invoke p50 %.3f ms" % ("node server, TCP (admin token)", direct_tcp))
print("%-34s warm invoke p50 %.3f ms" % ("node server, socket (token)", direct_uds))
show("thaw proxy (%d starts)" % runs, thaw_proxy())
if subprocess.run(["sh", "-c", "command -v socat && command -v curl"], capture_output=True).returncode == 0:
    show("socat + curl registration (%d)" % runs, socat_proxy())
PY
