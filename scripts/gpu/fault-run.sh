#!/usr/bin/env bash
# The fault trial on a GPU: one function faults the GPU with an illegal address while another serves, and the
# other never notices. Builds the MLP and the memory probe (dev.thaw.examples.probe.MemoryProbeFunction, a kernel
# that reads wherever its caller says, with no bounds check) and serves both from one pool-backed `thaw serve`
# (one worker process per instance). Then, while python threads keep the MLP busy over keep-alive connections, it
# sends the probe an offset 256 GiB past its buffer (reserved, unmapped device addresses: CUDA_ERROR_ILLEGAL_ADDRESS,
# sticky, the probe's worker process is poisoned) a few times, each followed by a good probe request, and reports:
#  - MLP requests ok / errors and latency p50 / p99 before, during and after the faults;
#  - each fault response (status and body: 502, code device_fault, naming CUDA_ERROR_ILLEGAL_ADDRESS);
#  - each recovery (the probe's next good request: 200, right values, a cold start on a fresh worker);
#  - worker pids: the MLP's before and after (the same), the probe's (a new one after each fault).
# Exits non-zero on any MLP error or wrong MLP result, an MLP worker change, a fault not reported as such, or a
# probe that does not recover. Then the same fault in an in-process server (--instances in-process): a 502, then
# liveness and readiness 503 and every later request 503 device_fault (CUDA in that process is unusable). THAW_DEVICE=sim runs it without a GPU (a dry run: not a GPU result).
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/fault-run.sh <unpacked thaw dir>
# Writes $OUT/fault.txt (log) and $OUT/results.json. Takes under a minute; every step is bounded (3 minutes in all).
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=dir scripts/gpu/fault-run.sh <unpacked thaw dir>}
thaw="$home/bin/thaw"
root=$(mktemp -d /tmp/thaw-fault.XXXX)
export THAW_DEVICE=${THAW_DEVICE:-cuda} THAW_STORE="$root/store"
status=0
log="$OUT/fault.txt"
mkdir -p "$OUT"
: > "$log"
say() { echo "$*" | tee -a "$log"; }

say "== device ($THAW_DEVICE)"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$log" 2>&1
fi
mlp_req='{"inputs": [[0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8]]}'
echo "$mlp_req" > "$root/mlp.json"
echo '{"offset": 100, "count": 4}' > "$root/probe.json"
say "== build"
timeout 50 "$thaw" build --function dev.thaw.examples.mlp.MlpFunction --config '{"layers": [64, 256, 256, 10], "seed": 42}' \
    --tag mlp:1 --sample-request "$root/mlp.json" >> "$log" 2>&1 || status=1
timeout 50 "$thaw" build --function dev.thaw.examples.probe.MemoryProbeFunction --config '{}' \
    --tag probe:1 --sample-request "$root/probe.json" >> "$log" 2>&1 || status=1

cat > "$root/client.py" <<'PY'
import http.client, json, re, statistics, sys, threading, time, urllib.request
port, mlp_file, fault_offset = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
THREADS, FAULTS, STEADY_S = 4, 3, 3.0
mlp_body = open(mlp_file).read().encode()
probe_good = json.dumps({"offset": 100, "count": 4}).encode()
probe_fault = json.dumps({"offset": fault_offset, "count": 1}).encode()
base = "http://127.0.0.1:%d" % port

def post(conn, path, body):
    t = time.perf_counter()
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    return {"status": r.status, "ms": (time.perf_counter() - t) * 1e3, "start": r.getheader("Thaw-Start"),
            "body": data.decode(errors="replace"), "t0": t, "t1": time.perf_counter()}
def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read().decode()
def wait_ready(deadline_s=40):
    t = time.time()
    while time.time() - t < deadline_s:
        try:
            with urllib.request.urlopen(base + "/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception:
            pass
        time.sleep(0.02)
    return False
def pid(name):
    s = get("/v1/functions/" + name)
    m = re.search(r"worker pid ([0-9]+)", s)
    return int(m.group(1)) if m else None
def served(name):
    i = json.loads(get("/v1/functions/" + name)).get("instances", [])
    return i[0].get("served") if i else None
def probe_ok(r):
    try:
        return r["status"] == 200 and json.loads(r["body"])["values"] == [100.0, 101.0, 102.0, 103.0]
    except Exception:
        return False
def same(a, b):
    if a["argmax"] != b["argmax"]:
        return False
    for ra, rb in zip(a["outputs"], b["outputs"]):
        for x, y in zip(ra, rb):
            if abs(x - y) > 1e-4 * max(1.0, abs(y)):
                return False
    return True

out = {"ready": wait_ready(), "errors": []}
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
cold = post(conn, "/v1/functions/mlp/invoke", mlp_body)
expected = json.loads(cold["body"]) if cold["status"] == 200 else None
out["mlpCold"] = {k: cold[k] for k in ("status", "ms", "start")}
pc = post(conn, "/v1/functions/probe/invoke", probe_good)
out["probeCold"] = {k: pc[k] for k in ("status", "ms", "start", "body")}
if expected is None or not probe_ok(pc):
    out["errors"].append("the functions do not serve before the trial")
mlp_pid, probe_pids = pid("mlp"), [pid("probe")]

seen, stop = [], threading.Event()
def load():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while not stop.is_set():
        t = time.perf_counter()
        try:
            r = post(c, "/v1/functions/mlp/invoke", mlp_body)
            r["ok"] = r["status"] == 200 and r["start"] == "warm" and expected is not None and same(json.loads(r["body"]), expected)
        except Exception as e:
            r = {"status": -1, "ok": False, "body": repr(e), "t0": t, "t1": time.perf_counter(), "ms": (time.perf_counter() - t) * 1e3, "start": None}
            c.close()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        if not r["ok"]:
            r["body"] = r["body"][:300]
        else:
            r["body"] = None
        seen.append(r)
threads = [threading.Thread(target=load, daemon=True) for _ in range(THREADS)]
for th in threads:
    th.start()
time.sleep(STEADY_S)

faults, recoveries = [], []
t_fault = time.perf_counter()
pconn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
for i in range(FAULTS):
    f = post(pconn, "/v1/functions/probe/invoke", probe_fault)
    try:
        body = json.loads(f["body"])
    except Exception:
        body = {}
    fault_ok = f["status"] == 502 and body.get("code") == "device_fault" and "CUDA_ERROR_ILLEGAL_ADDRESS" in body.get("error", "")
    faults.append({"status": f["status"], "ms": round(f["ms"], 2), "body": f["body"][:600], "asExpected": fault_ok})
    r = post(pconn, "/v1/functions/probe/invoke", probe_good)
    recoveries.append({"status": r["status"], "ms": round(r["ms"], 2), "start": r["start"], "ok": probe_ok(r),
                       "body": r["body"][:200]})
    probe_pids.append(pid("probe"))
    if not fault_ok:
        out["errors"].append("fault %d was not a 502 device_fault naming CUDA_ERROR_ILLEGAL_ADDRESS" % i)
    if not probe_ok(r) or r["start"] != "cold":
        out["errors"].append("the probe did not recover after fault %d (a 200 with its values, cold, on a fresh worker)" % i)
t_recovered = time.perf_counter()
time.sleep(STEADY_S)
stop.set()
for th in threads:
    th.join(90)

def phase(rs):
    ms = sorted(r["ms"] for r in rs)
    q = lambda p: ms[min(len(ms) - 1, int(p * len(ms)))] if ms else None
    return {"requests": len(rs), "ok": sum(1 for r in rs if r["ok"]), "errors": sum(1 for r in rs if not r["ok"]),
            "p50Ms": q(0.5), "p99Ms": q(0.99), "maxMs": ms[-1] if ms else None}
out["mlp"] = {
    "before": phase([r for r in seen if r["t1"] < t_fault]),
    "during": phase([r for r in seen if r["t1"] >= t_fault and r["t0"] <= t_recovered]),
    "after": phase([r for r in seen if r["t0"] > t_recovered]),
}
out["mlp"]["faultWindowMs"] = round((t_recovered - t_fault) * 1e3, 1)
out["mlp"]["firstErrors"] = [{k: r[k] for k in ("status", "start", "body")} for r in seen if not r["ok"]][:5]
out["faults"], out["recoveries"] = faults, recoveries
out["pids"] = {"mlpBefore": mlp_pid, "mlpAfter": pid("mlp"), "probe": probe_pids}
out["mlpInstanceServed"] = served("mlp")
out["mlpRequests"] = len(seen) + 1
if any(not r["ok"] for r in seen):
    out["errors"].append("%d MLP requests failed or were wrong" % sum(1 for r in seen if not r["ok"]))
if out["mlp"]["during"]["requests"] == 0:
    out["errors"].append("no MLP request overlapped the faults")
if mlp_pid is None or out["pids"]["mlpAfter"] != mlp_pid or out["mlpInstanceServed"] != out["mlpRequests"]:
    out["errors"].append("the MLP's worker changed, or its instance did not serve every request")
if len(set(probe_pids)) != len(probe_pids) or None in probe_pids:
    out["errors"].append("the probe did not get a fresh worker after every fault")
out["invocationMetrics"] = [l for l in get("/metrics").splitlines() if l.startswith("thaw_invocations_total")]
print(json.dumps(out, indent=1))
sys.exit(1 if out["errors"] else 0)
PY

port=18087
say "== serve: pool-backed, mlp + probe"
cat > "$root/serve.json" <<'JSON'
{"functions": {"mlp": {"image": "mlp:1"}, "probe": {"image": "probe:1"}}}
JSON
"$thaw" serve --port $port --config "$root/serve.json" --idle-workers 2 --host-cache 512m > "$root/serve.log" 2>&1 &
pid=$!
# 1 << 36 elements: 256 GiB past the probe's buffer (MemoryProbeFunction.FAULT_OFFSET).
timeout 75 python3 "$root/client.py" $port "$root/mlp.json" $((1 << 36)) > "$OUT/results.json" 2>> "$log" || status=1
echo "== worker processes (nvidia-smi) before SIGTERM" >> "$log"
command -v nvidia-smi > /dev/null && nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >> "$log" 2>&1
kill -TERM $pid
( sleep 20; kill -KILL $pid 2> /dev/null ) & killer=$!
wait $pid; drain=$?
kill $killer 2> /dev/null
echo "exit status after SIGTERM: $drain" >> "$log"; [[ $drain == 0 ]] || status=1
# The serve log without the thousands of warm MLP 200s (counted instead).
echo "== serve log ($(grep -c ' 200 .* mlp warm ' "$root/serve.log") warm MLP 200 lines left out)" >> "$log"
grep -v ' 200 .* mlp warm ' "$root/serve.log" | cut -c1-400 >> "$log"

# In process (--instances in-process): a sticky fault leaves CUDA in the server's process unusable, so the server must
# fail liveness and answer every later request 503 device_fault (the kubelet restarts the pod).
say "== serve: in process, mlp + probe: a sticky fault fails liveness"
port2=18088
"$thaw" serve --port $port2 --config "$root/serve.json" --instances in-process > "$root/serve-inproc.log" 2>&1 &
pid2=$!
timeout 60 python3 - $port2 "$root/mlp.json" $((1 << 36)) <<'PY' | tee -a "$log" || status=1
import json, sys, time, urllib.error, urllib.request
port, mlp, offset = int(sys.argv[1]), open(sys.argv[2]).read().encode(), int(sys.argv[3])
base = "http://127.0.0.1:%d" % port
def call(path, body=None):
    req = urllib.request.Request(base + path, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except Exception as e:
        return -1, repr(e)
t = time.time()
while call("/v2/health/ready")[0] != 200 and time.time() - t < 40:
    time.sleep(0.05)
seen = {"mlp": call("/v1/functions/mlp/invoke", mlp), "probeGood": call("/v1/functions/probe/invoke",
        json.dumps({"offset": 100, "count": 4}).encode()),
        "probeFault": call("/v1/functions/probe/invoke", json.dumps({"offset": offset, "count": 1}).encode()),
        "live": call("/v2/health/live"), "ready": call("/v2/health/ready"),
        "mlpAfter": call("/v1/functions/mlp/invoke", mlp)}
for k, (st, body) in seen.items():
    print("in-process %-10s %d %s" % (k, st, body[:300]))
code = lambda k: json.loads(seen[k][1]).get("code") if seen[k][0] >= 400 else None
ok = (seen["mlp"][0] == 200 and seen["probeGood"][0] == 200 and seen["probeFault"][0] == 502
      and code("probeFault") == "device_fault" and seen["live"][0] == 503 and seen["ready"][0] == 503
      and seen["mlpAfter"][0] == 503 and code("mlpAfter") == "device_fault")
print("in-process sticky fault: %s" % ("as expected" if ok else "NOT as expected"))
sys.exit(0 if ok else 1)
PY
kill -TERM $pid2
( sleep 20; kill -KILL $pid2 2> /dev/null ) & killer=$!
wait $pid2; drain2=$?
kill $killer 2> /dev/null
echo "in-process exit status after SIGTERM: $drain2" >> "$log"; [[ $drain2 == 0 ]] || status=1
echo "== in-process serve log" >> "$log"
cut -c1-400 "$root/serve-inproc.log" >> "$log"

say "== results"
python3 - "$OUT/results.json" <<'PY' | tee -a "$log"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("no results: %s" % e)
    sys.exit(1)
for name in ("before", "during", "after"):
    p = r["mlp"][name]
    print("MLP %-6s %5d requests  ok %5d  errors %d  p50 %s ms  p99 %s ms  max %s ms" % (name, p["requests"], p["ok"],
        p["errors"], p["p50Ms"] and round(p["p50Ms"], 2), p["p99Ms"] and round(p["p99Ms"], 2), p["maxMs"] and round(p["maxMs"], 2)))
print("fault window %.1f ms (%d faults, each followed by a good probe request)" % (r["mlp"]["faultWindowMs"], len(r["faults"])))
for f, g in zip(r["faults"], r["recoveries"]):
    print("probe fault    %d in %.1f ms: %s" % (f["status"], f["ms"], f["body"]))
    print("probe recovery %d in %.1f ms (%s): %s" % (g["status"], g["ms"], g["start"], g["body"]))
print("pids: MLP %s -> %s (served %s of %s requests); probe %s" % (r["pids"]["mlpBefore"], r["pids"]["mlpAfter"],
    r["mlpInstanceServed"], r["mlpRequests"], " -> ".join(str(p) for p in r["pids"]["probe"])))
print("errors: %s" % (r["errors"] or "none"))
PY
rm -rf "$root"
exit $status
