#!/usr/bin/env bash
# The pooled cold path on a GPU, where issue 11's goal is measured: GPT-2-large cold over HTTP (<= 45 ms).
#  1. PoolBench: BECOME + first invoke of the MLP and GPT-2-large from the store, the host cache, and the host cache
#     with the image prepared ahead (the worker parsed, planned, loaded class, state and modules while idle), each
#     with the BECOME's phases, against the worker's spawn phases (the rehearsal among them).
#  2. `thaw serve` (pool-backed, 2 idle workers, 8 GiB host cache, HBM tier, keepAlive 1s): GPT-2-large 16 tokens in,
#     1 out (the request of the in-process 34.4 ms) cold over HTTP five times, scaled to zero between (the first
#     from the host cache, the rest from the HBM tier), then 8 tokens out cold once, warm p50 over a kept-alive
#     connection; every response's Server-Timing; per cold start, from the server's trace, when its BECOME ran in the
#     worker, when the invoke was sent after the worker's answer, when its last copy landed and first kernel launched.
#  0. First, the prepared path's tests on CUDA (PreparedImageTest, the rehearsal, the host cache's extent leases).
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/coldpath-run.sh <unpacked thaw dir>  (~4 minutes)
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/coldpath-run.sh <unpacked thaw dir>}" && pwd)
java="$home/runtime/bin/java"; [[ -x "$java" ]] || java=java
work=$(mktemp -d /tmp/thaw-coldpath.XXXXXX)
export THAW_DEVICE=${THAW_DEVICE:-cuda} THAW_STORE="$work/store"
mkdir -p "$OUT"
status=0
strip() { sed 's/\x1b\[[0-9;]*m//g'; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1

python3 - "$work" <<'PY'
import json, random, sys
w = sys.argv[1]
r = random.Random(7)
json.dump({"inputs": [[round(r.uniform(-1, 1), 3) for _ in range(64)] for _ in range(2)]}, open(w + "/mlp.json", "w"))
tokens = [15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275, 21281, 39983, 5076, 24913, 29307]
json.dump({"tokens": [tokens], "maxNewTokens": 1}, open(w + "/gpt2.json", "w"))
json.dump({"tokens": [tokens], "maxNewTokens": 8}, open(w + "/gpt2-8.json", "w"))
PY
{
  "$home/bin/thaw" build --function dev.thaw.examples.mlp.MlpFunction \
      --config '{"layers": [64, 256, 256, 10], "seed": 42}' --tag mlp:1 --sample-request "$work/mlp.json" || status=1
  "$home/bin/thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
      --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}' --tag gpt2:large \
      --sample-request "$work/gpt2.json" || status=1
} > "$OUT/build.txt" 2>&1

echo "== 0. the prepared path's tests on CUDA"
tests=(dev.thaw.pool.PreparedImageTest dev.thaw.pool.worker.WorkerWarmupTest dev.thaw.pool.cache.HostImageCacheTest
  dev.thaw.pool.ContextPoolTest dev.thaw.pool.HostCacheWorkerTest)
selectors=(); for t in "${tests[@]}"; do selectors+=(--select-class "$t"); done
timeout 150 "$home/bin/thaw-test" "${selectors[@]}" --reports-dir "$work/reports" 2>&1 | strip > "$OUT/tests.txt" \
  || status=1
grep -E 'tests (successful|failed|skipped|aborted)' "$OUT/tests.txt"

echo "== 1. PoolBench"
timeout 150 "$java" ${THAW_JAVA_OPTS:-} -cp "$home/lib/*:$home/lib/bench/*" dev.thaw.bench.pool.PoolBench \
  --store "$THAW_STORE" --image "mlp:1=$work/mlp.json" --image "gpt2:large=$work/gpt2.json" --runs 3 \
  --acquires 2000 --cache-bytes 4294967296 --out "$OUT/pool-bench.json" 2>&1 | grep -v '^\[main\] INFO' | strip \
  > "$OUT/pool-bench.txt" || status=1
grep -E '^(worker|acquire|mlp|gpt2)' "$OUT/pool-bench.txt"

echo "== 2. thaw serve: GPT-2-large cold over HTTP"
cat > "$work/client.py" <<'PY'
import http.client, json, sys, time, statistics, urllib.request
port, w = int(sys.argv[1]), sys.argv[2]
gpt = json.load(open(w + "/gpt2.json")); gpt8 = json.load(open(w + "/gpt2-8.json"))
def timing(h):
    t, tier = {}, None
    for part in (h.get("Server-Timing") or "").split(","):
        part = part.strip()
        if ";dur=" in part:
            k, v = part.split(";dur="); t[k] = float(v)
        elif part.startswith("tier;desc="):
            tier = part[len("tier;desc="):].strip('"')
    return t, tier
def post(conn, body):
    data = json.dumps(body).encode()
    t = time.perf_counter()
    conn.request("POST", "/v1/functions/gpt2/invoke", data, {"Content-Type": "application/json"})
    r = conn.getresponse(); out = r.read()
    ms = (time.perf_counter() - t) * 1e3
    st, tier = timing(r.headers)
    return {"status": r.status, "ms": ms, "start": r.headers.get("Thaw-Start"), "tier": tier, "timing": st,
            "body": out[:200].decode(errors="replace")}
def get(path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        return r.read().decode()
def state():
    return json.loads(get("/v1/functions/gpt2"))
def wait(test, s=90):
    t = time.time()
    while time.time() - t < s:
        try:
            st = state()
            if test(st):
                return st
        except Exception:
            pass
        time.sleep(0.05)
    return None
def idle_workers():
    return sum(float(l.rsplit(" ", 1)[1]) for l in get("/metrics").splitlines()
               if l.startswith("thaw_pool_workers") and 'state="idle"' in l)
def settle():
    # Scaled to zero, and the pool's idle workers all back (a fresh JVM each) and done preparing the image.
    wait(lambda s: s.get("state") == "cold")
    t = time.time()
    while idle_workers() < 2 and time.time() - t < 60:
        time.sleep(0.1)
    time.sleep(2)
out = {"staged": wait(lambda s: s.get("image", {}).get("hostCache") in ("cached", "store"))}
colds = []
for i in range(4):
    settle()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    colds.append(post(conn, gpt)); conn.close()
out["cold16to1"] = colds
settle()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
out["cold16to8"] = post(conn, gpt8)
warm = [post(conn, gpt) for _ in range(30)]
conn.close()
out["warm16to1"] = {"p50Ms": statistics.median(w["ms"] for w in warm),
                    "invokeP50Ms": statistics.median(w["timing"].get("invoke", 0) for w in warm),
                    "overheadP50Ms": statistics.median(w["ms"] - w["timing"].get("invoke", 0) for w in warm),
                    "errors": sum(w["status"] != 200 for w in warm)}
out["trace"] = json.loads(get("/v1/functions/gpt2/trace"))
json.dump(out, open(w + "/serve.json", "w"), indent=1)
for c in colds + [out["cold16to8"]]:
    print("cold %-10s %7.1f ms  status %d  %s" % (c["tier"], c["ms"], c["status"],
          " ".join("%s=%.2f" % kv for kv in c["timing"].items())))
print("warm 16->1 p50 %.2f ms (invoke %.2f, outside the invoke %.3f), errors %d" % (out["warm16to1"]["p50Ms"],
      out["warm16to1"]["invokeP50Ms"], out["warm16to1"]["overheadP50Ms"], out["warm16to1"]["errors"]))
# Each cold start on the server's trace, in ms after its request reached the scheduler: when its BECOME ran in the
# worker (the worker's own row, on the server's clock), when the server sent the invoke and how long after the worker's
# answer (the server's first request spent ~21 ms there before ColdPathWarmup, later ones ~1.5), when the restore's
# last copy landed and its first kernel launched.
rows = {}
for e in out["trace"].get("traceEvents", []):
    rows.setdefault(e["pid"], []).append(e)
for pid, es in sorted(rows.items()):
    spans = [e for e in es if e.get("ph") == "X"]
    queue = [e for e in spans if e["tid"] == 1 and e["name"] == "queue"]
    invoke = [e for e in spans if e["tid"] == 1 and e["name"] == "invoke"]
    become = [e for e in spans if e["tid"] == 10 and e["name"].startswith("BECOME")]
    if not queue or not invoke:
        continue
    t0 = queue[0]["ts"]
    ms = lambda us: (us - t0) / 1e3
    sent = ms(invoke[0]["ts"])
    copies = [e["ts"] + e["dur"] for e in spans if e["tid"] == 12 and e["name"].startswith("copies")]
    launches = [e["ts"] for e in es if e.get("ph") != "M" and e["tid"] == 13]
    worker = ("BECOME in the worker %.2f-%.2f, invoke sent %.2f (%.2f after the worker's answer)" % (
        ms(become[0]["ts"]), ms(become[0]["ts"] + become[0]["dur"]), sent,
        sent - ms(become[0]["ts"] + become[0]["dur"]))) if become else "invoke sent %.2f" % sent
    first = [e["ts"] for e in spans if e["tid"] == 12 and not e["name"].endswith("coalesced")]
    host = {e["name"]: ms(e["ts"]) for e in es if e.get("ph") == "i" and e["tid"] == 11}
    print("trace #%d: %s, done %.2f; last copy landed %s, first launch %s; restore thread %s, first copy call %s, "
          "first copies queued %s, first copy starts %s" % (pid, worker,
          ms(invoke[0]["ts"] + invoke[0]["dur"]), "%.2f" % ms(max(copies)) if copies else "-",
          "%.2f" % ms(min(launches)) if launches else "-",
          "%.2f" % host["restore thread starts"] if "restore thread starts" in host else "-",
          "%.2f" % host["first copy call"] if "first copy call" in host else "-",
          "%.2f" % host["first copies queued"] if "first copies queued" in host else "-",
          "%.2f" % ms(min(first)) if first else "-"))
sys.exit(1 if any(c["status"] != 200 for c in colds) else 0)
PY
port=18090
echo '{"functions": {"gpt2": {"image": "gpt2:large", "keepAlive": "1s"}}}' > "$work/serve-config.json"
# Twice: the host cache alone (every cold start copies the weights), then with the HBM tier (from the second cold
# start on, the weights an evicted instance left on the GPU are mapped, not copied).
for tier in host-cache hbm; do
  echo "-- $tier"
  hbm=0; [[ $tier == hbm ]] && hbm=16g
  "$home/bin/thaw" serve --port $port --config "$work/serve-config.json" --idle-workers 2 --host-cache 8g \
      --hbm-tier $hbm > "$work/serve-$tier.log" 2>&1 &
  pid=$!
  timeout 120 python3 "$work/client.py" $port "$work" || status=1
  kill -TERM $pid; wait $pid; echo "exit status after SIGTERM: $?"
  cp "$work/serve.json" "$OUT/serve-$tier.json" 2>/dev/null
  grep -v '^\[main\] INFO' "$work/serve-$tier.log" | strip | grep -v 'warm queue=' > "$OUT/serve-$tier-log.txt"
  grep 'cold start on worker' "$OUT/serve-$tier-log.txt" | sed 's/.*dev.thaw.server.instances - //'
done
rm -rf "$work"
exit $status
