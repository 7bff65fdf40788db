#!/usr/bin/env bash
# Many functions on one node, on a GPU (issue 21's benchmark): thaw-bench node-trace with GPT-2 small images (250 MB
# each: distinct seeded weights, plus variants sharing a base's weights), FUNCTIONS functions registered on one
# thaw serve, one open-loop trace (Zipf popularity, bursty arrivals) per policy: recency (the default: tiers by
# cold-start recency, workers recycled when they scale to zero), no-recycle (recency with --recycle-limit 0: every
# cold start of another function takes a fresh worker process, the comparison), off (no host cache, no HBM tier,
# recycled). POLICIES=recency,registration,off gives the tier-policy comparison instead (registration: the
# policy-free baseline). Before the traces, the same single-function probes of each tier, against a server serving
# one function.
# Writes $OUT/node-trace.json, node-trace.md, node-trace.log. The store goes to /dev/shm (the images, deduplicated).
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/nodetrace-run.sh <unpacked thaw dir>
# Knobs (environment): FUNCTIONS (500), IMAGES (24), VARIANTS (6), SECONDS_PER_TRACE (45), RATE (4), POLICIES,
# HOST_CACHE (4g), HBM_TIER (2g), PROBES (3), IDLE_WORKERS (3), MAX_WORKERS (10), MAX_STARTING (4), KEEP_ALIVE (2s),
# RECYCLE_LIMIT (the server's default, 64), NODE_TRACE_LIMIT_S (480).
# What to look for (node-trace.md, "The trace, per policy"): recency against no-recycle, the cold p50 / p99 and
# p99 / p50 (issue 21: p99 at most 2x p50, 0 errors), and "workers recycled during the trace" below the table.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=$(cd "${1:?usage: OUT=<dir> scripts/gpu/nodetrace-run.sh <unpacked thaw dir>}" && pwd)
work=/dev/shm/thaw-node-trace
rm -rf "$work" && mkdir -p "$work" "$OUT"
trap 'rm -rf "$work"' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max \
    --format=csv,noheader > "$OUT/device.txt" 2>&1
# Thaw's class-data sharing archive, as a node would have it: every worker JVM starts sooner with it.
[[ -f "$home/lib/thaw.jsa" ]] || "$home/bin/thaw-cds" > "$OUT/cds.txt" 2>&1 || echo "no CDS archive (see cds.txt)"
THAW_DEVICE=cuda timeout -k 10 "${NODE_TRACE_LIMIT_S:-480}" "$home/bin/thaw-bench" node-trace --device cuda \
    --model gpt2 --images "${IMAGES:-24}" --variants "${VARIANTS:-6}" --functions "${FUNCTIONS:-500}" \
    --seconds "${SECONDS_PER_TRACE:-45}" --rate "${RATE:-4}" --keep-alive "${KEEP_ALIVE:-2s}" \
    --host-cache "${HOST_CACHE:-4g}" --hbm-tier "${HBM_TIER:-2g}" --idle-workers "${IDLE_WORKERS:-3}" \
    --max-workers "${MAX_WORKERS:-10}" --max-starting "${MAX_STARTING:-4}" --probes "${PROBES:-3}" --policies "${POLICIES:-recency,no-recycle,off}" \
    ${RECYCLE_LIMIT:+--recycle-limit "$RECYCLE_LIMIT"} \
    --work "$work" --out "$OUT" > "$OUT/node-trace.log" 2>&1
status=$?
tail -n 40 "$OUT/node-trace.log"
exit $status
