#!/usr/bin/env bash
# `thaw serve --function` from process start to its first response (what a Knative pod's scale-from-zero costs in
# contract mode; goal <= 1 s). Builds the MLP image (and GPT-2 small, seeded), then for each configuration starts a
# fresh `thaw serve` 5 times, posts the function's request until it answers 200 (python3: the host has no Java or
# curl), stops it with SIGTERM (exit status 0 expected) and keeps the server's startup timeline line (its own steps,
# the first worker's start-up phases, the instance start's and the first request's phases). Configurations:
#   pool-nocache     the pool (the default), --host-cache 0: last session's step 1 of server-run.sh
#   in-process       --instances in-process: the context made in the server, beside its HTTP start
#   knative-pool     K_SERVICE set (contract mode), the pool; its default host cache is none
#   knative-inproc   K_SERVICE set, --instances in-process
#   (gpt2 small: knative-pool and knative-inproc)
# Each configuration runs with Thaw's class-data sharing archive (cds: lib/thaw.jsa, which bin/thaw-cds makes first,
# timed) and without (nocds: THAW_JAVA_OPTS=-Xshare:auto, the JDK's own archive only), alternating run by run. For
# every run it records whether the server's and its worker's JVMs mapped lib/thaw.jsa (/proc/PID/maps after the
# first response): a cds run where one did not fails the script.
# Usage (repository root on the GPU host): OUT=<dir> scripts/gpu/firststart-run.sh <unpacked thaw dir>
# RUNS (default 3) runs each; VARIANTS (default "cds nocds"; also "noprelaunch": cds with THAW_PRELAUNCH=0, the pool's
# first worker JVM started by the pool after option parsing, not by main before it); CONFIGS (default all) names
# the configurations to run. Writes $OUT/firststart.txt (log) and
# $OUT/results.json. Exits non-zero on any failure. Under 4 minutes.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
home=${1:?usage: OUT=dir scripts/gpu/firststart-run.sh <unpacked thaw dir>}
thaw="$home/bin/thaw"
root=$(mktemp -d /tmp/thaw-firststart.XXXX)
export THAW_DEVICE=${THAW_DEVICE:-cuda} THAW_STORE="$root/store"
RUNS=${RUNS:-3}
VARIANTS=${VARIANTS:-cds nocds}
status=0
mkdir -p "$OUT"
log="$OUT/firststart.txt"
: > "$log"
say() { echo "$*" | tee -a "$log"; }

say "== device ($THAW_DEVICE)"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$log" 2>&1
fi
mlp_req='{"inputs": [[0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8]]}'
gpt_req='{"tokens": [[464, 2068, 7586, 21831]], "maxNewTokens": 1}'
echo "$mlp_req" > "$root/mlp.json"; echo "$gpt_req" > "$root/gpt.json"

say "== build"
t=$(date +%s)
"$thaw" build --function dev.thaw.examples.mlp.MlpFunction --config '{"layers": [64, 256, 256, 10], "seed": 42}' \
    --tag mlp:1 --sample-request "$root/mlp.json" >> "$log" 2>&1 || { say "MLP build failed"; exit 1; }
gpt=1
if [[ "${SKIP_GPT2:-}" == "" ]]; then
  "$thaw" build --function dev.thaw.examples.gpt2.Gpt2Function \
      --config '{"model": "gpt2", "seed": 1, "maxBatch": 1, "maxTokens": 64}' \
      --tag gpt2:small --sample-request "$root/gpt.json" >> "$log" 2>&1 || { say "GPT-2 small build failed (skipped)"; gpt=0; }
else
  gpt=0
fi
say "built in $(( $(date +%s) - t )) s"

say "== class-data sharing archive (bin/thaw-cds)"
t=$(date +%s%N)
"$home/bin/thaw-cds" >> "$log" 2>&1 || { say "thaw-cds failed"; exit 1; }
say "made in $(( ($(date +%s%N) - t) / 1000000 )) ms"

cat > "$root/first.py" <<'PY'
import json, os, signal, socket, statistics, subprocess, sys, time, urllib.request
thaw, root, runs, gpt, variants = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5].split()
mlp = open(os.path.join(root, "mlp.json")).read().encode()
gpt_body = open(os.path.join(root, "gpt.json")).read().encode()

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def post(url, body):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, r.headers.get("Thaw-Start"), r.read()

def maps_archive(pid):
    try:
        return any(l.rstrip().endswith("/thaw.jsa") for l in open("/proc/%d/maps" % pid))
    except OSError:
        return None

def cpu_ms(pid):
    try:
        fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None

def children(pid):
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if int(open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return kids

def one(name, variant, function, tag, body, args, env_extra):
    port = free_port()
    env = dict(os.environ, **env_extra)
    env["PORT"] = str(port)
    if variant == "nocds":
        env["THAW_JAVA_OPTS"] = (env.get("THAW_JAVA_OPTS", "") + " -Xshare:auto").strip()
    if variant == "noprelaunch":
        env["THAW_PRELAUNCH"] = "0"
    logf = os.path.join(root, "%s.log" % name)
    out = open(logf, "w")
    t0 = time.time()
    p = subprocess.Popen([thaw, "serve", "--function", "%s=%s" % (function, tag)] + args, stdout=out,
                         stderr=subprocess.STDOUT, env=env)
    url = "http://127.0.0.1:%d/v1/functions/%s/invoke" % (port, function)
    result = {"config": name, "variant": variant, "ok": False}
    deadline = t0 + 60
    attempts = 0
    while time.time() < deadline:
        if p.poll() is not None:
            result["error"] = "thaw serve exited %d" % p.returncode
            break
        attempts += 1
        try:
            status, start, _ = post(url, body)
            if status == 200:
                result.update(ok=True, ms=(time.time() - t0) * 1e3, start=start, attempts=attempts)
                break
        except Exception:
            pass
        time.sleep(0.005)
    if not result["ok"] and "error" not in result:
        result["error"] = "no 200 within 60 s"
    result["serverMapsArchive"] = maps_archive(p.pid)
    workers = children(p.pid)
    # CPU time (user + system) up to the first response, which contention on a shared host stretches less than wall
    # time: the server's, and its workers' together.
    result["serverCpuMs"] = cpu_ms(p.pid)
    result["workersCpuMs"] = sum(cpu_ms(w) or 0 for w in workers)
    result["workersMappingArchive"] = "%d of %d" % (sum(1 for w in workers if maps_archive(w)), len(workers))
    time.sleep(0.3)   # the request log line is written after the response
    p.send_signal(signal.SIGTERM)
    try:
        result["exit"] = p.wait(timeout=40)
    except subprocess.TimeoutExpired:
        p.kill(); result["exit"] = "killed"
    out.close()
    text = open(logf).read()
    lines = [l for l in text.splitlines() if " startup " in l]
    result["timeline"] = lines[0].split(" - ", 1)[-1] if lines else None
    if not result["ok"] or result["exit"] != 0 or not lines:
        result["log"] = text[-3000:]
    return result

configs = [
    ("pool-nocache", "mlp", "mlp:1", mlp, ["--host-cache", "0"], {}),
    ("in-process", "mlp", "mlp:1", mlp, ["--instances", "in-process"], {}),
    ("knative-pool", "mlp", "mlp:1", mlp, [], {"K_SERVICE": "mlp-svc", "K_REVISION": "mlp-svc-1"}),
    ("knative-inproc", "mlp", "mlp:1", mlp, ["--instances", "in-process"], {"K_SERVICE": "mlp-svc"}),
]
if gpt:
    configs += [
        ("gpt2-knative-pool", "gpt2", "gpt2:small", gpt_body, [], {"K_SERVICE": "gpt2-svc"}),
        ("gpt2-knative-inproc", "gpt2", "gpt2:small", gpt_body, ["--instances", "in-process"], {"K_SERVICE": "gpt2-svc"}),
    ]
only = os.environ.get("CONFIGS", "").split()
if only:
    configs = [c for c in configs if c[0] in only]
results, failed = [], False
for name, function, tag, body, args, env in configs:
    for i in range(runs):
        for variant in variants:   # alternated, so a slow minute of the host weighs on both alike
            r = one(name, variant, function, tag, body, args, env)
            r["run"] = i + 1
            results.append(r)
            print("%-20s %-5s run %d: %s %s ms (cpu: server %s ms, workers %s ms), exit %s; lib/thaw.jsa mapped by the "
                  "server %s, workers %s" % (
                  name, variant, i + 1, "ok" if r["ok"] else "FAILED", "%.0f" % r["ms"] if r["ok"] else "-",
                  r["serverCpuMs"], r["workersCpuMs"], r["exit"], r["serverMapsArchive"], r["workersMappingArchive"]),
                  flush=True)
            print("    " + str(r["timeline"]), flush=True)
            if not r["ok"] or r["exit"] != 0 or r["timeline"] is None:
                failed = True
                print(r.get("error"), r.get("log", ""), flush=True)
            expect = variant != "nocds"
            pooled = "in-process" not in args
            if r["ok"] and (r["serverMapsArchive"] != expect
                            or (pooled and expect and r["workersMappingArchive"].startswith("0 "))
                            or (not expect and not r["workersMappingArchive"].startswith("0 "))):
                failed = True
                print("    FAILED: lib/thaw.jsa %s expected in the server%s" % (
                      "mapped" if expect else "not", " and its workers" if pooled else ""), flush=True)
summary = {}
for name, *_ in configs:
    for variant in variants:
        ok = [r for r in results if r["config"] == name and r["variant"] == variant and r["ok"]]
        ms = sorted(r["ms"] for r in ok)
        if ms:
            summary[name + " " + variant] = {"runs": len(ms), "medianMs": statistics.median(ms), "minMs": ms[0],
                                             "maxMs": ms[-1],
                                             "serverCpuMedianMs": statistics.median(r["serverCpuMs"] or 0 for r in ok),
                                             "workersCpuMedianMs": statistics.median(r["workersCpuMs"] for r in ok)}
print("== start to first response (ms; cpu: user + system time up to it, median)")
for name, s in summary.items():
    print("%-26s median %6.0f  min %6.0f  max %6.0f  (%d runs); cpu: server %6.0f, workers %6.0f" % (
          name, s["medianMs"], s["minMs"], s["maxMs"], s["runs"], s["serverCpuMedianMs"], s["workersCpuMedianMs"]))

def steps(timeline):
    """{step: ms} from the timeline: the process's steps (at ms), the worker's phases (worker.X), the first request's
    (request.X)."""
    out = {}
    for part in timeline.split("; "):
        head, _, rest = part.partition(": ")
        prefix = "worker." if head.startswith("worker spawn") else "request." if head.startswith("first request") else ""
        if head.endswith("at ms") or prefix:
            if prefix:
                words = rest.split()
                for k, v in zip(words[0::2], words[1::2]):
                    try:
                        out[prefix + k] = float(v)
                    except ValueError:
                        pass
            else:
                for item in rest.split(", "):
                    k, _, v = item.rpartition(" ")
                    try:
                        out[k] = float(v)
                    except ValueError:
                        pass
    return out

shown = ["main", "command", "options", "listening", "worker ready", "first response", "worker.jvm", "worker.store",
         "request.queue", "request.acquire", "request.map", "request.invoke"]
print("== medians of the timeline's steps (ms since process start; worker.* and request.* are phase durations)")
print("%-26s" % "" + "".join("%16s" % k for k in shown))
for name, *_ in configs:
    for variant in variants:
        parsed = [steps(r["timeline"]) for r in results if r["config"] == name and r["variant"] == variant
                  and r["ok"] and r["timeline"]]
        cells = []
        for k in shown:
            v = [p[k] for p in parsed if k in p]
            cells.append("%16.1f" % statistics.median(v) if v else "%16s" % "-")
        print("%-26s" % (name + " " + variant) + "".join(cells))
json.dump({"summary": summary, "runs": results}, open(os.path.join(root, "results.json"), "w"), indent=1)
sys.exit(1 if failed else 0)
PY

say "== start to first response, $RUNS runs each"
python3 "$root/first.py" "$thaw" "$root" "$RUNS" "$gpt" "$VARIANTS" 2>&1 | tee -a "$log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
cp "$root/results.json" "$OUT/results.json" 2>/dev/null || status=1
rm -rf "$root"
say "== status $status"
exit $status
