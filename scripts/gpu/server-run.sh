#!/usr/bin/env bash
# The restore server on a GPU: builds the MLP and GPT-2-large (seeded) images, then
#  1. times a whole `thaw serve --function` process from start to its first response (Knative scale-from-zero),
#  2. serves both from one `thaw serve` (pool-backed instances) and measures HTTP cold and warm end to end with each
#     Server-Timing, the server's own overhead on a warm invoke (round trip minus the invoke phase), KServe v2 and
#     completions once each, and a SIGTERM drain (exit status 0),
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
    return {"status": status, "ms": ms, "start": h.get("Thaw-Start"), "timing": timing, "body": data[:300].decode(errors="replace")}
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
else:
    out["ready"] = wait_ready()
    for name, body in (("mlp", mlp),) if mode == "inproc" else (("mlp", mlp), ("gpt2", gpt)):
        cold = post("/v1/functions/%s/invoke" % name, body)
        warm = [post("/v1/functions/%s/invoke" % name, body) for _ in range(30 if name == "mlp" else 10)]
        ms = sorted(w["ms"] for w in warm)
        overhead = sorted(w["ms"] - w["timing"].get("invoke", 0) for w in warm)
        out[name] = {"cold": cold, "warmP50Ms": statistics.median(ms), "warmMinMs": ms[0],
                     "warmInvokeP50Ms": statistics.median(w["timing"].get("invoke", 0) for w in warm),
                     "serverOverheadP50Ms": statistics.median(overhead), "warmStarts": sorted({w["start"] for w in warm}),
                     "errors": sum(1 for w in warm if w["status"] != 200) + (cold["status"] != 200)}
    if mode == "pool":
        out["kserve"] = post("/v2/models/mlp/infer", {"inputs": [{"name": "inputs", "datatype": "FP32", "shape": [1, 64], "data": mlp["inputs"][0]}]})
        out["completions"] = post("/v1/completions", {"model": "gpt2", "prompt": "The quick brown fox", "max_tokens": 8})
print(json.dumps(out, indent=1))
PY

port=18080
say "== 1. thaw serve --function: process start to first response"
t0=$(python3 -c 'import time; print(time.time())')
"$thaw" serve --port $port --function mlp=mlp:1 > "$root/first.log" 2>&1 &
pid=$!
timeout 120 python3 "$root/client.py" "http://127.0.0.1:$port" first "$root/mlp.json" "$root/gpt.json" "$t0" > "$root/first.json" || status=1
kill -TERM $pid; wait $pid; echo "exit status after SIGTERM: $?" >> "$log"
cat "$root/first.log" "$root/first.json" >> "$log"

say "== 2. pool-backed server: mlp + gpt2-large"
"$thaw" serve --port $port --function mlp=mlp:1 --function gpt2=gpt2:large > "$root/pool.log" 2>&1 &
pid=$!
timeout 200 python3 "$root/client.py" "http://127.0.0.1:$port" pool "$root/mlp.json" "$root/gpt.json" > "$root/pool.json" || status=1
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
say "== results"; cat "$OUT/results.json" | tee -a "$log" | head -80
rm -rf "$root"
exit $status
