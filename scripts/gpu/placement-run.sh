#!/usr/bin/env bash
# Placement on a host with several GPUs (issue 11, item 9): one `thaw serve` owns every GPU, keeps one pool per GPU,
# and places each new instance where the image's weights already are (the HBM tier), else by free memory.
#  1. by free memory: `mlp0` (the MLP, minInstances 1) starts on device 0 at registration; GPT-2-large, invoked
#     cold then warm, goes to device 1 (more free);
#  2. GPT-2-large scales in (keepAlive 3s): its worker hands its read-only weights to device 1's HBM tier;
#  3. `mlp` (the MLP again) is invoked cold: device 1 (empty now) has more free memory, it goes there and stays;
#     then `mlp0` is deleted, so device 0 is empty and device 1 is not;
#  4. by the HBM tier: GPT-2-large's next cold start goes back to device 1 (`tier;desc="hbm"`), although device 0
#     has more free memory — free memory alone would have picked device 0;
#  5. the trace of its pool-backed cold starts (`/v1/functions/gpt2/trace`) is fetched and checked: valid JSON, the
#     worker's BECOME phases and the restore's copy spans under each cold start (kept as gpt2-trace.json).
# Usage (repository root on the GPU machine, e.g. nvidia-h200-x2): OUT=<dir> scripts/gpu/placement-run.sh <thaw dir>
# Writes $OUT/placement.txt and $OUT/gpt2-trace.json; exits non-zero unless every step above held.
# A dry run without GPUs: THAW_DEVICE=sim THAW_SIM_DEVICES=2 with BIG_FUNCTION/BIG_CONFIG/BIG_REQUEST naming a
# function the sim runs quickly (e.g. a wide MLP) in place of GPT-2-large.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
home=${1:?usage: OUT=dir scripts/gpu/placement-run.sh <unpacked thaw dir>}
thaw="$home/bin/thaw"
root=$(mktemp -d /tmp/thaw-placement.XXXX)
export THAW_DEVICE=${THAW_DEVICE:-cuda} THAW_STORE="$root/store"
big_function=${BIG_FUNCTION:-dev.thaw.examples.gpt2.Gpt2Function}
big_config=${BIG_CONFIG:-'{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}'}
big_request=${BIG_REQUEST:-'{"tokens": [[464, 2068, 7586, 21831]], "maxNewTokens": 1}'}
log="$OUT/placement.txt"
port=18081
{ nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; \
  echo "THAW_DEVICE=$THAW_DEVICE THAW_SIM_DEVICES=${THAW_SIM_DEVICES:-}"; } > "$log" 2>&1
python3 -c 'import json; print(json.dumps({"inputs": [[0.1] * 64]}))' > "$root/mlp.json"
echo "$big_request" > "$root/gpt.json"
"$thaw" build --function dev.thaw.examples.mlp.MlpFunction --config '{"layers": [64, 256, 256, 10], "seed": 42}' \
    --tag mlp:1 --sample-request "$root/mlp.json" >> "$log" 2>&1 || exit 1
"$thaw" build --function "$big_function" --config "$big_config" \
    --tag gpt2:large --sample-request "$root/gpt.json" >> "$log" 2>&1 || exit 1
cat > "$root/serve.json" <<'JSON'
{"functions": {"mlp0": {"image": "mlp:1", "minInstances": 1},
               "gpt2": {"image": "gpt2:large", "keepAlive": "3s"},
               "mlp": {"image": "mlp:1"}}}
JSON
"$thaw" serve --port $port --config "$root/serve.json" --idle-workers 1 >> "$log" 2>&1 &
server=$!
timeout 200 python3 - "$root" "$OUT/gpt2-trace.json" >> "$log" 2>&1 <<'PY'
import json, sys, time, urllib.request, urllib.error
root, trace_file, base = sys.argv[1], sys.argv[2], "http://127.0.0.1:18081"
failures = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
def call(path, body=None, method=None, auth=False):
    headers = {"Content-Type": "application/json"}
    if auth:
        headers["Authorization"] = "Bearer " + open(root + "/store/admin-token").read().strip()
    req = urllib.request.Request(base + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()
def state(name):
    return json.loads(call("/v1/functions/" + name)[2])
def wait(what, test, seconds=120):
    t = time.time()
    while time.time() - t < seconds:
        try:
            if test():
                return True
        except Exception:
            pass
        time.sleep(0.1)
    check(False, what + " within %d s" % seconds)
    return False
def ready():
    wait("ready", lambda: call("/v2/health/ready")[0] == 200)
    time.sleep(4)   # the pools' idle workers warm again (readiness needs one on any device; acquire waits for its own)
def cold_starts(name):
    """The cold starts in the function's trace: [(title, events)], oldest first."""
    starts = []
    for e in json.loads(call("/v1/functions/%s/trace" % name)[2])["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            starts.append((e["args"]["name"], []))
        starts[-1][1].append(e)
    return starts
def invoke(name, request, start):
    status, h, body = call("/v1/functions/%s/invoke" % name, open(root + "/" + request, "rb").read())
    tier = [p.strip()[len("tier;desc="):].strip('"') for p in (h.get("Server-Timing") or "").split(",")
            if p.strip().startswith("tier;desc=")]
    print(name, start, status, h.get("Thaw-Start"), h.get("Server-Timing"), body[:80], flush=True)
    check(status == 200 and h.get("Thaw-Start") == start, "%s answered %s" % (name, start))
    return tier[0] if tier else None
def devices(name):
    return sorted({i.get("device") for i in state(name).get("instances", [])})

wait("ready", lambda: call("/v2/health/ready")[0] == 200, 180)
for name in ("gpt2", "mlp"):
    wait(name + " staged in the host cache", lambda: state(name).get("image", {}).get("hostCache") == "cached")
ready()
# 1. By free memory.
invoke("gpt2", "gpt.json", "cold")
invoke("gpt2", "gpt.json", "warm")
by_function = {n: devices(n) for n in ("mlp0", "gpt2")}
print("devices by function:", by_function)
check(by_function["mlp0"] == [0] and by_function["gpt2"] == [1], "mlp0 on device 0, gpt2 on device 1 (free memory)")
# 2. gpt2 scales in; its weights stay in device 1's HBM tier.
wait("gpt2 scaled in, its weights in device 1's HBM tier",
     lambda: state("gpt2")["state"] == "cold" and state("gpt2")["image"]["hbmBytes"].get("1", 0) > 0)
print("gpt2 image:", json.dumps(state("gpt2").get("image")))
# 3. mlp goes to the emptier device 1 and stays; mlp0 is deleted: device 0 is now the emptier one.
ready()
invoke("mlp", "mlp.json", "cold")
check(devices("mlp") == [1], "mlp on device 1 (more free memory than device 0 with mlp0): %s" % devices("mlp"))
status, _, body = call("/v1/functions/mlp0", method="DELETE", auth=True)
check(status == 200, "mlp0 deleted: %d %s" % (status, body[:120]))
wait("mlp0 gone", lambda: call("/v1/functions/mlp0")[0] == 404)
# 4. By the HBM tier: back to device 1, though device 0 has more free memory.
ready()
tier = invoke("gpt2", "gpt.json", "cold")
check(tier == "hbm", "gpt2's cold start restored from the HBM tier (tier=%s)" % tier)
check(devices("gpt2") == [1], "gpt2 back on device 1: %s" % devices("gpt2"))
starts = cold_starts("gpt2")
check(len(starts) == 2 and starts[-1][0].endswith("on device 1"), "its cold start's trace says device 1: %s"
      % [s[0] for s in starts])
# 5. The pool-backed cold starts' traces: the worker's BECOME phases and the copies.
wait("the worker's restore timeline attached to both cold starts", lambda: all(
    any(e.get("tid") == 10 and e.get("ph") == "X" for e in ev) and any(e.get("tid") == 12 and e.get("ph") == "X" for e in ev)
    for _, ev in cold_starts("gpt2")) and len(cold_starts("gpt2")) == 2, 60)
raw = call("/v1/functions/gpt2/trace")[2]
open(trace_file, "w").write(raw)
trace = json.loads(raw)
check(all({"name", "ph", "pid", "tid"} <= set(e) and e["ph"] in ("X", "i", "M") and ("ts" in e or e["ph"] == "M")
          for e in trace["traceEvents"]), "the trace is Chrome trace JSON (%d events, %d bytes)"
      % (len(trace["traceEvents"]), len(raw)))
for title, ev in cold_starts("gpt2"):
    become = [e for e in ev if e.get("tid") == 10 and e.get("ph") == "X"]
    copies = [e for e in ev if e.get("tid") == 12 and e.get("ph") == "X"]
    notes = [e["name"] for e in ev if e.get("ph") == "i" and "coalesced" in e.get("name", "")]
    print(title + ": BECOME row", ["%s %.2f ms" % (e["name"], e["dur"] / 1e3) for e in become])
    print(title + ": %d copy spans, %d bytes; %s" % (len(copies), sum(e.get("args", {}).get("bytes", 0) for e in copies),
                                                       notes or "no coalescing"))
    check(len(become) > 3 and len(copies) > 0, title + ": worker phases and copies")
print("RESULT:", "PASS" if not failures else "FAIL " + "; ".join(failures))
PY
kill -TERM $server; wait $server; echo "exit status after SIGTERM: $?" >> "$log"
rm -rf "$root"
grep -q "RESULT: PASS" "$log"
