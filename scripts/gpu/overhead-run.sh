#!/usr/bin/env bash
# The restore server's own cost on a warm invoke, on the GPU (issue 11's goal: <= 0.3 ms). Runs the benchmark
# dev.thaw.bench.server.ServerOverhead from the tarball: it builds the image on the GPU, measures the function's warm
# invoke in its own process (the anchor), then a ThawServer on loopback with in-process instances and one with a
# pooled worker process, each request timed on one keep-alive HTTP/1.1 connection by a client that adds no thread of
# its own; overhead = round trip - anchor p50. Server-Timing's `server` (request in to response out, inside the
# server) and `function` (the function's own invoke where it ran) split the round trip into client + loopback,
# server, and function. Once for the MLP of server-run.sh, once for GPT-2-large.
# Each run is a fresh JVM: warm-up requests let the JIT compile the server's path first (GPT-2-large: 300 x ~25 ms).
# About 1.5 minutes in all (at most 100 s + 130 s).
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/overhead-run.sh <unpacked thaw dir>
# Writes $OUT/overhead.txt (summaries and log) and $OUT/mlp.json, $OUT/gpt2-large.json. Exits non-zero on failure.
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
} > "$log" 2>&1

echo '{"tokens": [[464, 2068, 7586, 21831]], "maxNewTokens": 8}' > "$root/gpt.json"
run() {
  local name=$1 limit=$2; shift 2
  echo "== $name" >> "$log"
  timeout "$limit" "$java" -cp "$cp" dev.thaw.bench.server.ServerOverhead --out "$OUT/$name.json" "$@" \
      >> "$log" 2>&1 || { echo "FAILED: $name (exit $?)" >> "$log"; status=1; }
}
run mlp 100 --requests 2000 --warmup 3000
run gpt2-large 130 --function dev.thaw.examples.gpt2.Gpt2Function \
    --config '{"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens": 64}' --request "$root/gpt.json" \
    --requests 200 --warmup 300

python3 - "$OUT" <<'PY' | tee -a "$log" || status=1
import json, sys, os
out = sys.argv[1]
print("== summary (microseconds, p50 / p99)")
for name in ("mlp", "gpt2-large"):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        print("%s: no result" % name)
        continue
    r = json.load(open(path))
    print("%s on %s: anchor (in-process invoke) p50 %.1f (before %.1f, after %.1f)" % (name, r["device"],
          r["anchorP50Micros"], r["anchor"]["invokeMicros"]["p50"], r["anchorAfter"]["invokeMicros"]["p50"]))
    for kind, s in r["servers"].items():
        st = s["serverTimingMicros"]
        print("  %-10s round trip %8.1f / %8.1f | overhead %7.1f / %7.1f | server - function %6.1f / %6.1f | "
              "server %8.1f invoke %8.1f function %8.1f | GET health %5.1f | first 100 warm %8.1f" % (kind,
              s["roundTripMicros"]["p50"], s["roundTripMicros"]["p99"], s["overheadMicros"]["p50"],
              s["overheadMicros"]["p99"], s["serverMinusFunctionMicros"]["p50"], s["serverMinusFunctionMicros"]["p99"],
              st["server"]["p50"], st["invoke"]["p50"], st["function"]["p50"], s["healthRoundTripMicros"]["p50"],
              s.get("firstWarmRoundTripMicros", {}).get("p50", -1)))
PY
rm -rf "$root"
exit $status
