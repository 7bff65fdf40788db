#!/usr/bin/env bash
# Proves on a GPU that read-only weights are read-only once restored (docs/design/memory-tiers.md, "Write
# protection"). Two parts, under 4 minutes in all:
#  1. the GPU tests (dev.thaw.image.restore.SlabProtectionGpuTest): images built here (GPU profiling) of the memory
#     probe (its `values` only read by its profiled request: read-only, a 2 MiB page of its own) and GPT-2 small. In
#     child processes, restored on demand and whole: reads serve, a store into read-write memory succeeds, a store
#     into the protected weights is CUDA_ERROR_ILLEGAL_ADDRESS (sticky); a copy or memset into read-only memory is
#     answered as the sim device answers it; a copy queued before its mapping turned read-only (does cuMemSetAccess
#     wait for queued work?). In process: GPT-2 small restores on demand and whole with its weights protected and
#     answers as at build; the cost of cuMemSetAccess to read-only per slab (2 MiB .. 1.5 GiB), idle and while another
#     stream works.
#  2. the user's view: `thaw serve` (pool, host cache, HBM tier) serving the probe: a read, a store into `out`
#     (read-write), a store into `values` (read-only: 502 device_fault, the worker replaced), a read from a fresh
#     worker; after the instance is evicted into the HBM tier, a store into `values` from a worker that mapped the
#     tier's copy (502 again), then a read from the tier's copy: the image's values, unchanged.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/roslabs-run.sh <unpacked thaw dir>
# Writes $OUT/summary.txt (the lines to read), $OUT/tests.txt, $OUT/serve.json and $OUT/serve-log.txt. Exits non-zero
# on any failure.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=<dir> scripts/gpu/roslabs-run.sh <unpacked thaw dir>}
export THAW_DEVICE=${THAW_DEVICE:-cuda}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/thaw-roslabs.XXXX)
summary="$OUT/summary.txt"
: > "$summary"
status=0
say() { echo "$*" | tee -a "$summary"; }
strip() { sed 's/\x1b\[[0-9;]*m//g'; }

say "== device ($THAW_DEVICE)"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    | tee -a "$summary"

say "== 1. GPU tests: SlabProtectionGpuTest"
timeout -k 10 150 "$home/bin/thaw-test" --select-class dev.thaw.image.restore.SlabProtectionGpuTest \
    --reports-dir "$work/reports" 2>&1 | strip > "$OUT/tests.txt"
[[ ${PIPESTATUS[0]} == 0 ]] || status=1
grep -E "tests (successful|failed|skipped|aborted)|probe restored|copies into read-only|sim device, the same|queued before|GPT-2 small|protect cost|MethodSource|=> |Exception" \
    "$OUT/tests.txt" | cut -c1-600 | tee -a "$summary"

say "== 2. thaw serve: a store into read-only weights, from a restored slab and from the HBM tier"
export THAW_STORE="$work/store"
echo '{"offset": 1000, "count": 4}' > "$work/read.json"
timeout 60 "$home/bin/thaw" build --function dev.thaw.examples.probe.MemoryProbeFunction \
    --config '{"elements": 524288, "maxCount": 16}' --tag probe:1 --sample-request "$work/read.json" \
    > "$work/build.log" 2>&1 || { status=1; tail -20 "$work/build.log" | tee -a "$summary"; }
echo '{"functions": {"probe": {"image": "probe:1", "keepAlive": "1s"}}}' > "$work/serve-config.json"
port=18093
"$home/bin/thaw" serve --port $port --config "$work/serve-config.json" --idle-workers 2 --host-cache 512m \
    --hbm-tier 4g > "$work/serve.log" 2>&1 &
pid=$!
timeout 90 python3 - $port "$OUT/serve.json" <<'PY' 2>&1 | tee -a "$summary"
import json, re, sys, time, urllib.error, urllib.request
port, out_file = int(sys.argv[1]), sys.argv[2]
base = "http://127.0.0.1:%d" % port
READ = {"offset": 1000, "count": 4}
WRITE_WEIGHTS = {"offset": 1000, "count": 4, "fill": -7.5}
WRITE_OUT = {"offset": 524288, "count": 4, "fill": 3.25}
IMAGE = [1000.0, 1001.0, 1002.0, 1003.0]

def call(path, body=None):
    req = urllib.request.Request(base + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            st, text, h = r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        st, text, h = e.code, e.read().decode(), e.headers
    except Exception as e:
        return {"status": -1, "body": repr(e), "ms": 0, "start": None, "timing": ""}
    return {"status": st, "body": text, "ms": round((time.perf_counter() - t) * 1e3, 2),
            "start": h.get("Thaw-Start"), "timing": h.get("Server-Timing", "")}
def status():
    return json.loads(call("/v1/functions/probe")["body"] or "{}")
def pid():
    m = re.search(r"worker pid ([0-9]+)", call("/v1/functions/probe")["body"])
    return int(m.group(1)) if m else None
def values(r):
    try:
        return json.loads(r["body"])["values"]
    except Exception:
        return None
def faulted(r):
    try:
        b = json.loads(r["body"])
        # The sim names the faulting kernel; the GPU's error does not (cuStreamSynchronize's code only).
        return r["status"] == 502 and b.get("code") == "device_fault" and "CUDA_ERROR_ILLEGAL_ADDRESS" in b["error"]
    except Exception:
        return False
def wait(cond, s):
    t = time.time()
    while time.time() - t < s:
        try:
            if cond():
                return True
        except Exception:
            pass
        time.sleep(0.05)
    return False

out, errors = {"steps": []}, []
def step(name, r, ok):
    r["step"], r["ok"], r["pid"] = name, ok, pid()
    out["steps"].append(dict(r, body=r["body"][:800]))
    tier = re.search(r'tier;desc="([a-z-]+)"', r["timing"])
    print("%-44s %3d %-5s %7.2f ms  tier %-10s pid %-8s %s" % (name, r["status"], r["start"], r["ms"],
          tier.group(1) if tier else "-", r["pid"], r["body"][:160]))
    if not ok:
        errors.append(name)

wait(lambda: call("/v2/health/ready")["status"] == 200, 40)
wait(lambda: status()["image"]["hostCache"] == "cached", 20)
r = call("/v1/functions/probe/invoke", READ); step("read (cold, host cache)", r, values(r) == IMAGE)
r = call("/v1/functions/probe/invoke", WRITE_OUT); step("store into out (read-write)", r, values(r) == [3.25] * 4)
# The restore of 2 MiB of weights is long done by now (on demand, a slab is protected as its last copy lands).
time.sleep(0.2)
first = pid()
r = call("/v1/functions/probe/invoke", WRITE_WEIGHTS); step("store into values (restored slab)", r, faulted(r))
r = call("/v1/functions/probe/invoke", READ)
step("read (a fresh worker)", r, values(r) == IMAGE and r["start"] == "cold" and pid() != first)
held = wait(lambda: status()["image"]["hbmBytes"]["0"] > 0 and status()["state"] == "cold", 30)
print("evicted after its keep-alive; the HBM tier holds %s bytes" % (status()["image"].get("hbmBytes")))
if not held:
    errors.append("the HBM tier never took the evicted instance's weights")
r = call("/v1/functions/probe/invoke", WRITE_WEIGHTS); step("store into values (slab from the HBM tier)", r, faulted(r))
r = call("/v1/functions/probe/invoke", READ)
step("read (the HBM tier's copy)", r, values(r) == IMAGE and 'tier;desc="hbm"' in r["timing"])
r = call("/v1/functions/probe/invoke", WRITE_OUT); step("store into out (read-write)", r, values(r) == [3.25] * 4)
out["errors"] = errors
json.dump(out, open(out_file, "w"), indent=1)
print("serve trial: %s" % ("as expected" if not errors else "NOT as expected: %s" % errors))
sys.exit(1 if errors else 0)
PY
[[ ${PIPESTATUS[0]} == 0 ]] || status=1
kill -TERM $pid
( sleep 20; kill -KILL $pid 2> /dev/null ) & killer=$!
wait $pid; drain=$?
kill $killer 2> /dev/null
say "exit status after SIGTERM: $drain"
[[ $drain == 0 ]] || status=1
grep -v '^\[main\] INFO' "$work/serve.log" | strip | cut -c1-400 > "$OUT/serve-log.txt"
say "== status: $status"
rm -rf "$work"
exit $status
