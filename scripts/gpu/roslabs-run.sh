#!/usr/bin/env bash
# Proves on a GPU that read-only weights are write-protected once restored, and that protecting them never faults a
# cold start (docs/design/memory-tiers.md, "Write protection"): a slab is made read-only only while the worker is idle
# (after a request's answer is sent, before the next request runs, or at EXPORT), once every restore copy has landed
# and the context is synchronized. Three parts, under 4 minutes in all; exits non-zero on any fault or failure.
#  1. (a) the GPU tests (dev.thaw.image.restore.SlabProtectionGpuTest): the memory probe (its `values` only read by its
#     profiled request: read-only, a 2 MiB page of its own) and GPT-2 small, built here. In child processes, restored on
#     demand and whole: the restore leaves the slab writable until its owner protects it idle, reads serve, a store
#     into read-write memory succeeds, a store into the protected weights is CUDA_ERROR_ILLEGAL_ADDRESS; the device's
#     answers to copies into read-only memory; kernels running while a mapping turns read-only (the old ordering's
#     hazard, printed for the record). In process: GPT-2 small's weights protected after its first request, answers
#     as at build; what cuMemSetAccess costs.
#  2. (c) a store into protected weights is still refused through `thaw serve` (pool, host cache, HBM tier), with the
#     memory probe: a read, a store into `out` (read-write), a store into `values` (502 device_fault, the worker
#     replaced), a read from a fresh worker; after eviction into the HBM tier, a store into `values` from a worker that
#     mapped the tier's copy (502 again), then a read of the tier's copy: the image's values, unchanged.
#  3. (b) the trial: `thaw serve` (pool-backed, 4 idle workers, host cache, no HBM tier, so every cold start copies from
#     the host cache) with the same images registered under many names (keepAlive 1s): cycle after cycle, a
#     GPT-2-large cold start (16 tokens in, 1 out) and two warm requests on it, then a memory-probe cold start and a
#     warm read, each cold start on a fresh worker, until the time left runs out. Zero faults allowed: every response
#     200 with the build's answer, every cold start from the host cache. Before the fix 1 in 5 GPT-2-large cold starts
#     and a probe's first read faulted (CUDA_ERROR_ILLEGAL_ADDRESS). The workers' logs must show each one protecting
#     its slabs while idle.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/roslabs-run.sh <unpacked thaw dir>
# Writes $OUT/summary.txt (the lines to read), tests.txt, serve.json, serve-log.txt, trial.json, trial-log.txt,
# trial-workers.txt, build.txt. What must be there: "[ 7 tests successful ]" with 0 failed and 0 aborted; "serve trial:
# as expected"; "trial: N cold starts (G GPT-2-large, P probe) ... 0 faults, 0 failures" with G, P >= 20; "workers that
# protected their slabs while idle: M of N cold starts; worker lines with an error: 0" with M >= N; "== status: 0".
# The lines "GPU, kernels reading a mapping as it turns read-only" and "... while another mapping turns read-only" are
# the record of what the old ordering risked. A dry run on the sim device: THAW_DEVICE=sim GPT2_CONFIG='{"model":
# "tiny", "seed": 1, "maxBatch": 1, "maxTokens": 16}' GPT2_TOKENS='[5, 17, 3, 40, 2, 9]' [TRIAL_SECONDS=60 MIN_COLD=3].
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/roslabs-run.sh <unpacked thaw dir>}" && pwd)
export THAW_DEVICE=${THAW_DEVICE:-cuda}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/thaw-roslabs.XXXX)
summary="$OUT/summary.txt"
: > "$summary"
status=0
SECONDS=0
say() { echo "$*" | tee -a "$summary"; }
strip() { sed 's/\x1b\[[0-9;]*m//g'; }
fail() { say "FAILED: $*"; status=1; }

say "== device ($THAW_DEVICE)"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    | tee -a "$summary"

say "== 1. (a) GPU tests: SlabProtectionGpuTest"
timeout -k 10 100 "$home/bin/thaw-test" --select-class dev.thaw.image.restore.SlabProtectionGpuTest \
    --reports-dir "$work/reports" 2>&1 | strip > "$OUT/tests.txt"
[[ ${PIPESTATUS[0]} == 0 ]] || fail "SlabProtectionGpuTest"
# On the GPU every test must run: an aborted one (no usable GPU) proves nothing.
if [[ $THAW_DEVICE == cuda ]] && ! grep -qE '\[ +0 tests aborted' "$OUT/tests.txt"; then
  fail "SlabProtectionGpuTest: tests aborted (no usable GPU?)"
fi
if ! grep -qE '\[ +0 tests failed' "$OUT/tests.txt"; then
  fail "SlabProtectionGpuTest: a test failed"
fi
grep -E "tests (successful|failed|skipped|aborted)|probe restored|copies into read-only|sim device, the same|queued before|kernels (reading|running)|GPT-2 small|protect cost|MethodSource|=> |Exception" \
    "$OUT/tests.txt" | cut -c1-600 | tee -a "$summary"
say "(${SECONDS}s)"

export THAW_STORE="$work/store"
echo '{"offset": 1000, "count": 4}' > "$work/read.json"
# A dry run on the sim device may set GPT2_CONFIG and GPT2_TOKENS (e.g. the tiny model): GPT-2-large is the GPU's.
gpt2_config=${GPT2_CONFIG:-'{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}'}
python3 - "$work" "${GPT2_TOKENS:-}" <<'PY'
import json, sys
tokens = [15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275, 21281, 39983, 5076, 24913, 29307]
if len(sys.argv) > 2 and sys.argv[2]:
    tokens = json.loads(sys.argv[2])
json.dump({"tokens": [tokens], "maxNewTokens": 1}, open(sys.argv[1] + "/gpt2.json", "w"))
PY
{
  timeout 60 "$home/bin/thaw" build --function dev.thaw.examples.probe.MemoryProbeFunction \
      --config '{"elements": 524288, "maxCount": 16}' --tag probe:1 --sample-request "$work/read.json" \
    && timeout 90 "$home/bin/thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
      --config "$gpt2_config" --tag gpt2:large \
      --sample-request "$work/gpt2.json"
} > "$OUT/build.txt" 2>&1 || { fail "building the images"; tail -20 "$OUT/build.txt" | tee -a "$summary"; }
say "images built (${SECONDS}s)"

# Stops a server: SIGTERM, then SIGKILL after 20 s; says how it exited (a drain must exit 0).
stop() {
  local pid=$1 what=$2 drain killer
  kill -TERM "$pid"
  ( sleep 20; kill -KILL "$pid" 2> /dev/null ) & killer=$!
  wait "$pid"; drain=$?
  kill $killer 2> /dev/null
  say "$what: exit status after SIGTERM: $drain"
  [[ $drain == 0 ]] || fail "$what did not drain cleanly"
}

say "== 2. (c) thaw serve: a store into read-only weights, from a restored slab and from the HBM tier"
echo '{"functions": {"probe": {"image": "probe:1", "keepAlive": "1s"}}}' > "$work/serve-config.json"
port=18093
"$home/bin/thaw" serve --port $port --config "$work/serve-config.json" --idle-workers 2 --host-cache 512m \
    --hbm-tier 4g > "$work/serve.log" 2>&1 &
pid=$!
timeout 60 python3 - $port "$OUT/serve.json" <<'PY' 2>&1 | tee -a "$summary"
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
        with urllib.request.urlopen(req, timeout=30) as r:
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

wait(lambda: call("/v2/health/ready")["status"] == 200, 30)
wait(lambda: status()["image"]["hostCache"] == "cached", 20)
r = call("/v1/functions/probe/invoke", READ); step("read (cold, host cache)", r, values(r) == IMAGE)
# The worker protects the slab after this answer, before it takes the next request.
r = call("/v1/functions/probe/invoke", WRITE_OUT); step("store into out (read-write)", r, values(r) == [3.25] * 4)
first = pid()
r = call("/v1/functions/probe/invoke", WRITE_WEIGHTS); step("store into values (restored slab)", r, faulted(r))
r = call("/v1/functions/probe/invoke", READ)
step("read (a fresh worker)", r, values(r) == IMAGE and r["start"] == "cold" and pid() != first)
r = call("/v1/functions/probe/invoke", READ); step("read (warm, slab protected)", r, values(r) == IMAGE)
held = wait(lambda: status()["image"]["hbmBytes"]["0"] > 0 and status()["state"] == "cold", 20)
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
[[ ${PIPESTATUS[0]} == 0 ]] || fail "part 2: a store into protected weights"
stop $pid "part 2's server"
grep -v '^\[main\] INFO' "$work/serve.log" | strip | cut -c1-400 > "$OUT/serve-log.txt"
say "(${SECONDS}s)"

say "== 3. (b) the trial: host-cache cold starts through thaw serve, zero faults"
# Whatever time is left, leaving ~30 s for the teardown and the logs; at most 100 s.
budget=$(( 205 - SECONDS )); (( budget > 100 )) && budget=100; (( budget < 30 )) && budget=30
budget=${TRIAL_SECONDS:-$budget}
python3 - "$work" <<'PY'
import json, sys
f = {}
for i in range(150):
    f["g%d" % i] = {"image": "gpt2:large", "keepAlive": "1s"}
    f["p%d" % i] = {"image": "probe:1", "keepAlive": "1s"}
json.dump({"functions": f}, open(sys.argv[1] + "/trial-config.json", "w"))
PY
touch "$work/trial-start"
port=18094
"$home/bin/thaw" serve --port $port --config "$work/trial-config.json" --idle-workers 4 --host-cache 2g \
    --hbm-tier 0 > "$work/trial.log" 2>&1 &
pid=$!
timeout $(( budget + 15 )) python3 - $port "$work" "$OUT/trial.json" $budget ${MIN_COLD:-20} <<'PY' 2>&1 \
    | tee -a "$summary"
import http.client, json, re, sys, time
port, w, out_file, budget, least = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
t0 = time.time()
gpt = json.load(open(w + "/gpt2.json"))
READ = {"offset": 1000, "count": 4}
IMAGE = [1000.0, 1001.0, 1002.0, 1003.0]
def request(method, path, body=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t = time.perf_counter()
    try:
        conn.request(method, path, None if body is None else json.dumps(body).encode(),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        text = r.read().decode(errors="replace")
        tier = re.search(r'tier;desc="([a-z-]+)"', r.headers.get("Server-Timing") or "")
        return {"status": r.status, "body": text, "ms": round((time.perf_counter() - t) * 1e3, 2),
                "start": r.headers.get("Thaw-Start"), "tier": tier.group(1) if tier else None}
    except Exception as e:
        return {"status": -1, "body": repr(e), "ms": 0, "start": None, "tier": None}
    finally:
        conn.close()
def ready():
    return request("GET", "/v2/health/ready")["status"] == 200
def cached(name):
    r = request("GET", "/v1/functions/" + name)
    return r["status"] == 200 and json.loads(r["body"])["image"]["hostCache"] == "cached"
def wait(cond, s):
    t = time.time()
    while time.time() - t < s:
        if cond():
            return True
        time.sleep(0.05)
    return False
out = {"cycles": [], "failures": []}
if not (wait(ready, 40) and wait(lambda: cached("g0") and cached("p0"), 40)):
    out["failures"].append("the server never got ready with both images in the host cache")
deadline = t0 + budget
answer = None
counts = {"gpt2 cold": 0, "probe cold": 0, "requests": 0, "faults": 0, "warm ones that started cold": 0}
def check(name, r, cold, ok):
    counts["requests"] += 1
    good = r["status"] == 200 and ok
    if cold:
        good = good and r["start"] == "cold" and r["tier"] == "host-cache"
    elif r["start"] != "warm":
        # Not a fault (its instance was evicted first, or another one started): said, not failed.
        counts["warm ones that started cold"] += 1
    if "device_fault" in r["body"] or "CUDA_ERROR" in r["body"]:
        counts["faults"] += 1
    if not good:
        out["failures"].append({"request": name, "status": r["status"], "start": r["start"], "tier": r["tier"],
                                "body": r["body"][:400]})
        print("FAILED %-12s %3d %-5s tier %-10s %s" % (name, r["status"], r["start"], r["tier"], r["body"][:300]))
    return good
i = 0
while time.time() < deadline - 3 and i < 150 and not out["failures"]:
    cycle = {"i": i}
    g = "/v1/functions/g%d/invoke" % i
    r = request("POST", g, gpt)
    if answer is None and r["status"] == 200:
        answer = r["body"]
    check("g%d cold" % i, r, True, r["body"] == answer)
    counts["gpt2 cold"] += 1
    cycle["gpt2"] = [r["ms"]]
    for k in range(2):
        r = request("POST", g, gpt)
        check("g%d warm %d" % (i, k + 1), r, False, r["body"] == answer)
        cycle["gpt2"].append(r["ms"])
    p = "/v1/functions/p%d/invoke" % i
    r = request("POST", p, READ)
    ok = r["status"] == 200 and json.loads(r["body"]).get("values") == IMAGE
    check("p%d cold" % i, r, True, ok)
    counts["probe cold"] += 1
    cycle["probe"] = [r["ms"]]
    r = request("POST", p, READ)
    ok = r["status"] == 200 and json.loads(r["body"]).get("values") == IMAGE
    check("p%d warm" % i, r, False, ok)
    cycle["probe"].append(r["ms"])
    out["cycles"].append(cycle)
    i += 1
out["counts"] = counts
out["seconds"] = round(time.time() - t0, 1)
json.dump(out, open(out_file, "w"), indent=1)
colds = sorted(c["gpt2"][0] for c in out["cycles"])
pcolds = sorted(c["probe"][0] for c in out["cycles"])
if colds:
    print("GPT-2-large cold from the host cache: %d, client ms min %.1f median %.1f max %.1f; warm median %.1f" % (
        len(colds), colds[0], colds[len(colds) // 2], colds[-1],
        sorted(c["gpt2"][2] for c in out["cycles"])[len(colds) // 2]))
    print("probe cold from the host cache: %d, client ms min %.1f median %.1f max %.1f" % (
        len(pcolds), pcolds[0], pcolds[len(pcolds) // 2], pcolds[-1]))
print("trial: %d cold starts (%d GPT-2-large, %d probe), %d requests in %.0f s, %d faults, %d failures "
      "(warm requests that started cold: %d)" % (counts["gpt2 cold"] + counts["probe cold"], counts["gpt2 cold"],
      counts["probe cold"], counts["requests"], out["seconds"], counts["faults"], len(out["failures"]),
      counts["warm ones that started cold"]))
enough = counts["gpt2 cold"] >= least and counts["probe cold"] >= least
if not enough:
    print("too few cold starts to be convincing (need %d of each)" % least)
sys.exit(0 if enough and not out["failures"] and counts["faults"] == 0 else 1)
PY
[[ ${PIPESTATUS[0]} == 0 ]] || fail "the trial"
# The workers' logs (the pool's log folder is deleted when the server stops): each cold-started worker protects its
# slabs while idle, once; none reports a CUDA error.
logs=$(find /tmp -maxdepth 1 -name 'thaw-pool-*' -type d -newer "$work/trial-start" 2> /dev/null)
if [[ -z $logs ]]; then
  fail "the trial's worker logs were not found under /tmp/thaw-pool-*"
else
  cat $(find $logs -name 'worker-*.log') 2> /dev/null | strip \
    | grep -E 'read-only slabs protected|CUDA_ERROR|Exception|refused' > "$OUT/trial-workers.txt"
  protected=$(grep -c 'read-only slabs protected while idle' "$OUT/trial-workers.txt")
  errors=$(grep -cE 'CUDA_ERROR|Exception|refused' "$OUT/trial-workers.txt")
  colds=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['counts']; print(c['gpt2 cold'] + c['probe cold'])" \
      "$OUT/trial.json" 2> /dev/null || echo 0)
  say "workers that protected their slabs while idle: $protected of $colds cold starts; worker lines with an error: $errors"
  # By when and what (GPT-2-large: 1 slab of ~1476 MiB; the probe: 1 of 2.0 MiB), without the times.
  grep 'read-only slabs protected' "$OUT/trial-workers.txt" | sed -e 's/.*protected/protected/' -e 's/, cuMemSetAccess.*//' \
      | sort | uniq -c | sort -rn | head -6 | tee -a "$summary"
  grep -o 'cuMemSetAccess [0-9.]* ms, [0-9.]* ms in all' "$OUT/trial-workers.txt" | sort -t' ' -k2 -n \
      | sed -n '1p;$p' | sed 's/^/protect cost (min, max): /' | tee -a "$summary"
  (( errors == 0 )) || fail "a worker reported an error (trial-workers.txt)"
  # A worker protects once idle 20 ms after an answer with its restore resident: the last cycle's two workers may be
  # stopped with the server before that (wave 5 C: 137 of 138).
  (( protected >= colds - 2 && colds > 0 )) || fail "cold-started workers did not protect their slabs while idle"
fi
stop $pid "the trial's server"
grep -v '^\[main\] INFO' "$work/trial.log" | strip | grep -vE 'GET /v(1/functions/[gp][0-9]+|2/health)' \
    | cut -c1-400 > "$OUT/trial-log.txt"
grep -c 'cold start on worker' "$OUT/trial-log.txt" | sed 's/^/cold starts in the server log: /' | tee -a "$summary"
say "== status: $status (${SECONDS}s)"
rm -rf "$work"
exit $status
