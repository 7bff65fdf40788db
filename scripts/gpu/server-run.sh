#!/usr/bin/env bash
# The restore server on a GPU: builds the MLP and GPT-2-large (seeded) images, then
#  1. times a whole `thaw serve --function` process from start to its first response (Knative scale-from-zero),
#  2. serves both from one `thaw serve` (pool-backed instances, 2 idle workers, an 8 GiB host cache, the HBM tier,
#     keepAlive 2s) and measures, each with its Server-Timing (tier included): HTTP cold from the host cache (after
#     the registration prefetch), warm, then scale to zero (keepAlive) and cold again from the HBM tier; the
#     server's own overhead on a warm invoke (round trip minus the invoke phase), KServe v2 and completions once
#     each, the functions' image state and restore bytes per tier, and a SIGTERM drain (exit status 0),
#  3. the same warm MLP invoke through `thaw serve --instances in-process`, for the in-process baseline.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/server-run.sh <unpacked thaw dir>
# Writes $OUT/server.txt (log) and $OUT/results.json. Exits non-zero on any failure.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=dir scripts/gpu/server-run.sh <unpacked thaw dir>}
thaw="$home/bin/thaw"
root=$(mktemp -d /tmp/thaw-server.XXXX)
export THAW_DEVICE=cuda THAW_STORE="$root/store"
status=0
log="$OUT/server.txt"
: > "$log"
say() { echo "$*" | tee -a "$log"; }

say "== device"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$log" 2>&1
mlp_req='{"inputs": [[0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8]]}'
gpt_req='{"tokens": [[464, 2068, 7586, 21831]], "maxNewTokens": 8}'
echo "$mlp_req" > "$root/mlp.json"; echo "$gpt_req" > "$root/gpt.json"
say "== build"
"$thaw" build --function dev.thaw.examples.mlp.MlpFunction --config '{"layers": [64, 256, 256, 10], "seed": 42}' \
    --tag mlp:1 --sample-request "$root/mlp.json" >> "$log" 2>&1 || status=1
"$thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
    --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}' \
    --tag gpt2:large --sample-request "$root/gpt.json" >> "$log" 2>&1 || status=1

# Waits for readiness, then measures; the client is python3 (the host has no Java and maybe no curl).
cat > "$root/client.py" <<'PY'
import json, sys, time, urllib.request, statistics
base, mode = sys.argv[1], sys.argv[2]
def post(path, body, ctype="application/json"):
    t = time.perf_counter()
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            data, status, h = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        data, status, h = e.read(), e.code, e.headers
    ms = (time.perf_counter() - t) * 1e3
    timing = {}
    for part in (h.get("Server-Timing") or "").split(","):
        if ";dur=" in part:
            k, v = part.strip().split(";dur=")
            timing[k] = float(v)
    tier = None
    for part in (h.get("Server-Timing") or "").split(","):
        if part.strip().startswith("tier;desc="):
            tier = part.strip()[len("tier;desc="):].strip('"')
    return {"status": status, "ms": ms, "start": h.get("Thaw-Start"), "tier": tier, "timing": timing,
            "body": data[:300].decode(errors="replace")}
def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return r.read().decode()
def wait_ready(deadline_s=120):
    t = time.time()
    while time.time() - t < deadline_s:
        try:
            with urllib.request.urlopen(base + "/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception:
            pass
        time.sleep(0.01)
    return False
def wait_state(name, test, deadline_s=90):
    t = time.time()
    s = {}
    while time.time() - t < deadline_s:
        s = json.loads(get("/v1/functions/" + name))
        if test(s):
            return s
        time.sleep(0.05)
    s["timedOut"] = True
    return s
def warm_stats(name, body, n):
    warm = [post("/v1/functions/%s/invoke" % name, body) for _ in range(n)]
    ms = sorted(w["ms"] for w in warm)
    overhead = sorted(w["ms"] - w["timing"].get("invoke", 0) for w in warm)
    return {"warmP50Ms": statistics.median(ms), "warmMinMs": ms[0],
            "warmInvokeP50Ms": statistics.median(w["timing"].get("invoke", 0) for w in warm),
            "serverOverheadP50Ms": statistics.median(overhead), "warmStarts": sorted({w["start"] for w in warm}),
            # Server-Timing's server (request in to response out, inside the server) minus function (the function's
            # own invoke where it ran): the server's own cost, without this client's (a new connection each time).
            "serverMinusFunctionP50Ms": statistics.median(w["timing"].get("server", 0) - w["timing"].get("function", 0)
                                                          for w in warm),
            "errors": sum(1 for w in warm if w["status"] != 200)}
mlp = json.load(open(sys.argv[3])); gpt = json.load(open(sys.argv[4]))
out = {}
if mode == "first":
    t0 = float(sys.argv[5])
    while True:
        try:
            r = post("/v1/functions/mlp/invoke", mlp)
            if r["status"] == 200:
                break
        except Exception:
            pass
        time.sleep(0.005)
    out["startToFirstResponseMs"] = (time.time() - t0) * 1e3
    out["first"] = r
elif mode == "inproc":
    out["ready"] = wait_ready()
    cold = post("/v1/functions/mlp/invoke", mlp)
    out["mlp"] = dict(warm_stats("mlp", mlp, 30), cold=cold)
    out["mlp"]["errors"] += cold["status"] != 200
else:
    out["ready"] = wait_ready()
    fns = (("mlp", mlp, 30), ("gpt2", gpt, 10))
    # The registration prefetch: both images staged in the host cache before the first request.
    out["staged"] = {n: wait_state(n, lambda s: s.get("image", {}).get("hostCache") in ("cached", "store")).get("image")
                     for n, _, _ in fns}
    for name, body, n in fns:
        wait_ready(); time.sleep(3)   # the pool's idle workers all warm again: acquire must not wait for a JVM
        cold = post("/v1/functions/%s/invoke" % name, body)
        out[name] = dict(warm_stats(name, body, n), coldHostCache=cold)
        out[name]["errors"] += cold["status"] != 200
    out["kserve"] = post("/v2/models/mlp/infer", {"inputs": [{"name": "inputs", "datatype": "FP32", "shape": [1, 64], "data": mlp["inputs"][0]}]})
    out["completions"] = post("/v1/completions", {"model": "gpt2", "prompt": "The quick brown fox", "max_tokens": 8})
    # Scale to zero (keepAlive 2s): each instance hands its read-only weights to the HBM tier as its worker exits.
    for name, body, n in fns:
        out[name]["scaledIn"] = wait_state(name, lambda s: s.get("state") == "cold").get("image")
    for name, body, n in fns:
        wait_ready(); time.sleep(3)
        cold = post("/v1/functions/%s/invoke" % name, body)
        out[name]["coldHbm"] = cold
        out[name]["errors"] += cold["status"] != 200
        again = warm_stats(name, body, 5)
        out[name]["warmAfterHbmP50Ms"] = again["warmP50Ms"]
        out[name]["errors"] += again["errors"]
    out["restoreBytes"] = [l for l in get("/metrics").splitlines() if l.startswith("thaw_restore_bytes_total")]
print(json.dumps(out, indent=1))
PY

port=18080
say "== 1. thaw serve --function: process start to first response"
t0=$(python3 -c 'import time; print(time.time())')
# No host cache here: registering one costs its workers ~0.15 s per GiB at start, and a one-function pod would
# size it to its image; the worker reads the store, as the previous runs of this step did.
"$thaw" serve --port $port --function mlp=mlp:1 --host-cache 0 > "$root/first.log" 2>&1 &
pid=$!
timeout 120 python3 "$root/client.py" "http://127.0.0.1:$port" first "$root/mlp.json" "$root/gpt.json" "$t0" > "$root/first.json" || status=1
kill -TERM $pid; wait $pid; echo "exit status after SIGTERM: $?" >> "$log"
cat "$root/first.log" "$root/first.json" >> "$log"

say "== 2. pool-backed server: mlp + gpt2-large; host cache, warm, HBM tier"
cat > "$root/serve.json" <<'JSON'
{"functions": {"mlp": {"image": "mlp:1", "keepAlive": "2s"}, "gpt2": {"image": "gpt2:large", "keepAlive": "2s"}}}
JSON
"$thaw" serve --port $port --config "$root/serve.json" --idle-workers 2 --host-cache 8g --hbm-tier 16g \
    > "$root/pool.log" 2>&1 &
pid=$!
timeout 150 python3 "$root/client.py" "http://127.0.0.1:$port" pool "$root/mlp.json" "$root/gpt.json" > "$root/pool.json" || status=1
kill -TERM $pid; wait $pid; drain=$?
echo "exit status after SIGTERM: $drain" >> "$log"; [[ $drain == 0 ]] || status=1
cat "$root/pool.log" "$root/pool.json" >> "$log"

say "== 3. in-process server: mlp"
"$thaw" serve --port $port --instances in-process --function mlp=mlp:1 > "$root/inproc.log" 2>&1 &
pid=$!
timeout 100 python3 "$root/client.py" "http://127.0.0.1:$port" inproc "$root/mlp.json" "$root/gpt.json" > "$root/inproc.json" 2>> "$log"
kill -TERM $pid; wait $pid
cat "$root/inproc.log" "$root/inproc.json" >> "$log"

python3 - "$root" > "$OUT/results.json" <<'PY' || status=1
import json, sys
root = sys.argv[1]
r = {k: json.load(open("%s/%s.json" % (root, k))) for k in ("first", "pool")}
try:
    r["inproc"] = json.load(open(root + "/inproc.json"))
except Exception as e:
    r["inproc"] = {"error": str(e)}
print(json.dumps(r, indent=1))
bad = [n for n in ("mlp", "gpt2") if r["pool"].get(n, {}).get("errors", 1)]
sys.exit(1 if bad else 0)
PY
say "== results"; cat "$OUT/results.json" >> "$log"
python3 - "$OUT/results.json" <<'PY' | tee -a "$log"
import json, sys
r = json.load(open(sys.argv[1]))
p = r["pool"]
def row(label, c):
    if not c:
        return "%-28s (missing)" % label
    t = c.get("timing", {})
    return "%-28s %8.1f ms  tier=%-10s %s  %s" % (label, c["ms"], c.get("tier"), c.get("start"),
        " ".join("%s=%.3f" % kv for kv in t.items()))
print("process start to first response: %.0f ms" % r["first"].get("startToFirstResponseMs", -1))
for n in ("mlp", "gpt2"):
    f = p.get(n, {})
    print(row(n + " cold (host cache)", f.get("coldHostCache")))
    print(row(n + " cold (HBM tier)", f.get("coldHbm")))
    print("%-28s %8.2f ms  (invoke %.2f ms, round trip - invoke %.3f ms, server - function %.3f ms)" % (
        n + " warm p50", f.get("warmP50Ms", -1), f.get("warmInvokeP50Ms", -1), f.get("serverOverheadP50Ms", -1),
        f.get("serverMinusFunctionP50Ms", -1)))
    print("%-28s staged=%s scaledIn=%s" % (n + " image", p.get("staged", {}).get(n), f.get("scaledIn")))
if r.get("inproc", {}).get("mlp"):
    print("%-28s %8.2f ms" % ("mlp warm p50 (in-process)", r["inproc"]["mlp"]["warmP50Ms"]))
for l in p.get("restoreBytes", []):
    print(l)
PY
rm -rf "$root"
exit $status
