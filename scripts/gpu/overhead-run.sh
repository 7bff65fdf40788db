#!/usr/bin/env bash
# The restore server's own cost on a warm invoke, on the GPU (issue 11's goal: <= 0.3 ms). Runs the benchmark
# dev.thaw.bench.server.ServerOverhead from the tarball: it builds the image on the GPU, measures the function's warm
# invoke in its own process (the anchor), then a ThawServer on loopback with in-process instances and one with a
# pooled worker process, each request timed on one keep-alive HTTP/1.1 connection by a client that adds no thread of
# its own; overhead = round trip - anchor p50. Server-Timing's `server` (request in to response out, inside the
# server) and `function` (the function's own invoke where it ran) split the round trip into client + loopback,
# server, and function. Each run is a fresh JVM, warmed up until the JIT compiled the server's path.
# A method the server calls once per request reaches C2 after ~5000 calls, so each run warms up past that first.
#   mlp          the MLP of server-run.sh (6000 warm-up, 2000 timed)
#   gpt2-large   8 new tokens per request (~23 ms), timed after 5000 warm-up requests of 1 new token (a few hundred
#                8-token requests, as wave 3 batch E ran, leave the server's path in C1's profiled code)
#   wait         the wait function (a kernel that waits N us) at N = 100, 1000, 4000, 10000, 22000: does the server's
#                cost grow with the invoke's length? (10000 warm-up at N = 0)
#   wait-spin    N = 100 and 22000, pooled only, with a client that polls for its response instead of sleeping in
#                read(): round trip - server with and without it is the client's own wake-up after a long wait
# RUNS (default "mlp gpt2-large wait wait-spin") picks the runs, SERIES (default "in-process,pool") the servers each
# compares: a kind with the server's wake-ahead after a colon where not the default (ServerOverhead's --instances),
# e.g. SERIES=in-process:0,in-process,pool:0,pool measures each kind without and with it in one run.
# GPT2_WARMUP (default 5000) sets GPT-2's warm-up requests per server.
# Each timed series also says, per thread of the server's process and of its worker, the CPU time, the time spent
# runnable but waiting for a core, and the wake-ups per request (from /proc).
# About 3.5 minutes in all (at most 60 + 150 + 70 + 30 s).
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/overhead-run.sh <unpacked thaw dir>
# Writes $OUT/overhead.txt (summaries and log), one JSON per run, and GPT-2's GC logs (gc-gpt2-*.log: the server's
# process, each worker). Exits non-zero on failure.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=dir scripts/gpu/overhead-run.sh <unpacked thaw dir>}
java="$home/runtime/bin/java"
[[ -x "$java" ]] || java=java
cp="$home/lib/*:$home/lib/bench/*"
export THAW_DEVICE=cuda
log="$OUT/overhead.txt"
status=0
root=$(mktemp -d /tmp/thaw-overhead.XXXX)
{
  echo "== device"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc; grep -m1 "model name" /proc/cpuinfo
  echo "cpuidle: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null)" \
      "states: $(cat /sys/devices/system/cpu/cpu0/cpuidle/state*/name 2>/dev/null | tr '\n' ' ')" \
      "guest_halt_poll_ns: $(cat /sys/module/haltpoll/parameters/guest_halt_poll_ns 2>/dev/null)"
} > "$log" 2>&1

echo '{"tokens": [[464, 2068, 7586, 21831]], "maxNewTokens": 8}' > "$root/gpt.json"
echo '{"tokens": [[464, 2068, 7586, 21831]], "maxNewTokens": 1}' > "$root/gpt-warm.json"
run() {
  local name=$1 limit=$2; shift 2
  echo "== $name" >> "$log"
  timeout "$limit" "$java" ${BENCH_JVM:-} -cp "$cp" dev.thaw.bench.server.ServerOverhead --out "$OUT/$name.json" "$@" \
      >> "$log" 2>&1 || { echo "FAILED: $name (exit $?)" >> "$log"; status=1; }
}
RUNS=${RUNS:-mlp gpt2-large wait wait-spin}
SERIES=${SERIES:-in-process,pool}
servers=$(( $(tr -cd , <<< "$SERIES" | wc -c) + 1 ))
for r in $RUNS; do
  case $r in
    mlp) run mlp $(( 30 * servers )) --requests 2000 --warmup 6000 --instances "$SERIES" ;;
    # GC logs of the server's process and of its workers (does a collection land inside the measured requests?)
    gpt2-large) BENCH_JVM="-Xlog:gc:file=$OUT/gc-gpt2-server.log" run gpt2-large $(( 30 + 60 * servers )) \
        --function dev.thaw.examples.gpt2.Gpt2Function \
        --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}' --request "$root/gpt.json" \
        --warmup-request "$root/gpt-warm.json" --requests 200 --warmup "${GPT2_WARMUP:-5000}" --instances "$SERIES" \
        --worker-jvm "-XX:+UseSerialGC -Xmx2g -Xlog:gc:file=$OUT/gc-gpt2-worker-%p.log" ;;
    wait) run wait $(( 35 * servers )) --wait-micros 100,1000,4000,10000,22000 --requests 2000 --warmup 10000 \
        --instances "$SERIES" ;;
    wait-spin) run wait-spin 30 --wait-micros 100,22000 --requests 2000 --warmup 10000 --instances pool --spin-client ;;
    *) echo "unknown run $r" >> "$log"; status=1 ;;
  esac
done

python3 - "$OUT" <<'PY' | tee -a "$log" || status=1
import json, sys, os
out = sys.argv[1]
print("== summary (microseconds, p50 / p99)")
def show(label, r):
    print("%s: anchor (in-process invoke) p50 %.1f (before %.1f, after %.1f)" % (label, r["anchorP50Micros"],
          r["anchor"]["invokeMicros"]["p50"], r["anchorAfter"]["invokeMicros"]["p50"]))
    for kind, s in r["servers"].items():
        st = s["serverTimingMicros"]
        print("  %-10s round trip %8.1f / %8.1f | overhead %7.1f / %7.1f | server - function %6.1f / %6.1f | "
              "round trip - server %6.1f | server %8.1f invoke %8.1f function %8.1f | GET health %5.1f | "
              "first 100 warm %8.1f" % (kind,
              s["roundTripMicros"]["p50"], s["roundTripMicros"]["p99"], s["overheadMicros"]["p50"],
              s["overheadMicros"]["p99"], s["serverMinusFunctionMicros"]["p50"], s["serverMinusFunctionMicros"]["p99"],
              s["roundTripMicros"]["p50"] - st["server"]["p50"],
              st["server"]["p50"], st["invoke"]["p50"], st["function"]["p50"], s["healthRoundTripMicros"]["p50"],
              s.get("firstWarmRoundTripMicros", {}).get("p50", -1)))
        print("             threads per request (cpu us / waiting for a core us / wake-ups): " + " ".join(
              "%s %.0f/%.0f/%.2f" % (t, u["cpuMicros"], u["runQueueMicros"], u["wakes"])
              for t, u in s.get("threadsPerRequest", {}).items()))
for name in ("mlp", "gpt2-large", "wait", "wait-spin"):
    if name not in os.environ.get("RUNS", "mlp gpt2-large wait wait-spin").split():
        continue
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        print("%s: no result" % name)
        continue
    r = json.load(open(path))
    if "steps" in r:
        for step, s in r["steps"].items():
            show("%s %s on %s%s" % (name, step, r["device"], ", spinning client" if r.get("spinClient") else ""), s)
    else:
        show("%s on %s" % (name, r["device"]), r)
PY
rm -rf "$root"
exit $status
