#!/usr/bin/env bash
# Placement on a host with several GPUs (issue 11, item 9): one `thaw serve` owns every GPU, keeps one pool per GPU,
# and places each function's instances by free memory. Two functions (the MLP and GPT-2-large) are served cold, then
# their instances are listed with the device each runs on; then both answer again warm.
# Usage (repository root on the GPU machine, e.g. nvidia-h200-x2): OUT=<dir> scripts/gpu/placement-run.sh <thaw dir>
# Writes $OUT/placement.txt; exits non-zero unless both functions answered and sat on different GPUs.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the logs}
home=${1:?usage: OUT=dir scripts/gpu/placement-run.sh <unpacked thaw dir>}
thaw="$home/bin/thaw"
root=$(mktemp -d /tmp/thaw-placement.XXXX)
export THAW_DEVICE=cuda THAW_STORE="$root/store"
log="$OUT/placement.txt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > "$log" 2>&1
python3 -c 'import json; print(json.dumps({"inputs": [[0.1] * 64]}))' > "$root/mlp.json"
echo '{"tokens": [[464, 2068, 7586, 21831]], "maxNewTokens": 1}' > "$root/gpt.json"
"$thaw" build --function dev.thaw.examples.mlp.MlpFunction --config '{"layers": [64, 256, 256, 10], "seed": 42}' \
    --tag mlp:1 --sample-request "$root/mlp.json" >> "$log" 2>&1 || exit 1
"$thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
    --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}' \
    --tag gpt2:large --sample-request "$root/gpt.json" >> "$log" 2>&1 || exit 1
"$thaw" serve --port 18081 --function gpt2=gpt2:large --function mlp=mlp:1 --idle-workers 1 >> "$log" 2>&1 &
server=$!
python3 - "$root" >> "$log" 2>&1 <<'PY'
import json, sys, time, urllib.request
root, base = sys.argv[1], "http://127.0.0.1:18081"
def call(path, body=None):
    req = urllib.request.Request(base + path, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return r.status, r.headers, r.read().decode()
t = time.time()
while time.time() - t < 180:
    try:
        if call("/v2/health/ready")[0] == 200:
            break
    except Exception:
        time.sleep(0.1)
time.sleep(3)
for name, req in (("gpt2", "gpt.json"), ("mlp", "mlp.json")):
    for start in ("cold", "warm"):
        status, h, body = call("/v1/functions/%s/invoke" % name, open(root + "/" + req, "rb").read())
        print(name, start, status, h.get("Thaw-Start"), h.get("Server-Timing"), body[:80])
devices = {}
for name in ("gpt2", "mlp"):
    state = json.loads(call("/v1/functions/" + name)[2])
    print(name, json.dumps(state.get("instances"))[:600])
    devices[name] = sorted({i.get("device") for i in state.get("instances", [])})
print("devices by function:", devices)
print("RESULT:", "PASS" if devices["gpt2"] and devices["mlp"] and devices["gpt2"] != devices["mlp"] else "FAIL")
PY
kill -TERM $server; wait $server; echo "exit status after SIGTERM: $?" >> "$log"
rm -rf "$root"
grep -q "RESULT: PASS" "$log"
