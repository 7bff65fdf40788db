#!/usr/bin/env bash
# Wake-ahead on the GPU: does polling for a long invoke's answer, from shortly before its predicted end, take the
# server's cost on long invokes back under 0.3 ms? overhead-run.sh's runs with each server twice in one run, without
# (":0") and with the default wake-ahead (0.5 ms): the wait function's sweep of invoke lengths (0.1-22 ms), GPT-2-large
# 8 tokens (~23 ms), and the MLP (short invokes: never woken ahead, must not move). Then the sweep's long end again
# with two other leads (0.25 ms, 1 ms), pooled. The counters thaw_wake_ahead_total are not read here: the
# threads-per-request lines show the event loop's and the pipe reader's CPU and wake-ups with and without it.
# About 6.5 minutes. Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/wakeahead-run.sh <unpacked thaw dir>
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=dir scripts/gpu/wakeahead-run.sh <unpacked thaw dir>}
here=$(cd "$(dirname "$0")" && pwd)
status=0
RUNS="wait gpt2-large mlp" SERIES=in-process:0,in-process,pool:0,pool GPT2_WARMUP=3000 OUT="$OUT" \
    "$here/overhead-run.sh" "$home" || status=1
mkdir -p "$OUT/leads"
RUNS="wait" SERIES=pool:0,pool:250us,pool:1ms OUT="$OUT/leads" "$here/overhead-run.sh" "$home" || status=1
exit $status
