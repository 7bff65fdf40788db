#!/usr/bin/env python3
"""Cold starts of a tensor-parallel group over HTTP against a running `thaw serve`, for scripts/gpu/tpserve-run.sh
(issue 28). The function `tp` serves the group image; --build is TensorParallelColdStart's build JSON, whose sample
request is sent and whose answer the server's must equal.

Per round: the function is registered again (PUT, THAW_ADMIN_TOKEN: its instance retires, its worker exits), the
script waits until no instance and no busy worker is left, a worker is idle on device 0 and every PREPARE sent to the
idle workers is answered (thaw_pool_prepares_pending: the group prepared whole), then --settle seconds (1), then
POSTs the sample request: the client's time from
sending it to the body in hand (a cold start: both ranks restored through their own GPU's link, the prompt's pass and
two greedy ids), the server's Server-Timing, Thaw-Start; then the same request warm. Prints one line per request and
SUMMARY lines; writes --out as JSON. Exit 1 if a request failed or an answer differed.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time
import urllib.request


def timing(header):
    t, tier = {}, None
    for part in (header or "").split(","):
        part = part.strip()
        if ";dur=" in part:
            k, v = part.split(";dur=")
            t[k.split(";")[0]] = float(v)
        elif part.startswith("tier;desc="):
            tier = part[len("tier;desc="):].strip('"')
    return t, tier


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    data = None if body is None else json.dumps(body).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    t = time.perf_counter()
    conn.request(method, path, data, h)
    r = conn.getresponse()
    out = r.read()
    ms = (time.perf_counter() - t) * 1e3
    conn.close()
    return r, out, ms


def state(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/v1/functions/tp" % port, timeout=30) as r:
        return json.loads(r.read().decode())


def workers(port, state, device=None):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        lines = r.read().decode().splitlines()
    return sum(float(l.rsplit(" ", 1)[1]) for l in lines
               if l.startswith("thaw_pool_workers{") and 'state="%s"' % state in l
               and (device is None or 'device="%d"' % device in l))


def pending(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
        lines = r.read().decode().splitlines()
    return sum(float(l.rsplit(" ", 1)[1]) for l in lines if l.startswith("thaw_pool_prepares_pending{"))


def wait(test, seconds, what):
    t = time.time()
    while time.time() - t < seconds:
        try:
            if test():
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise SystemExit("never: " + what)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--build", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", required=True)
    p.add_argument("--settle", type=float, default=1.0)
    a = p.parse_args()
    build = json.load(open(a.build))
    body, expected = build["sample_request"], build["sample_response"]["tokens"]
    admin = {"Authorization": "Bearer " + os.environ.get("THAW_ADMIN_TOKEN", "")}
    wait(lambda: state(a.port).get("image", {}).get("hostCache") == "cached", 600, "every rank in the host cache")
    print("ranks cached:", json.dumps(state(a.port).get("image")), flush=True)
    rounds, failed = [], False
    for i in range(a.rounds):
        if i > 0:
            r, out, _ = request(a.port, "PUT", "/v1/functions/tp", {"image": a.image}, admin)
            if r.status // 100 != 2:
                raise SystemExit("PUT answered %d: %s" % (r.status, out[:300]))
        # The retired instance's worker gone (its GPUs' memory and instance slots free), a worker idle on device 0;
        # then a pause for that worker to prepare the group (its PREPARE: contexts, manifests, modules), as an idle
        # node's would have. The server's log says how long each start still waited for its PREPARE.
        wait(lambda: not state(a.port).get("instances") and workers(a.port, "in_use") == 0
             and workers(a.port, "idle", 0) >= 1, 180, "no instance, no worker in use, one idle on device 0")
        wait(lambda: pending(a.port) == 0, 300, "the idle workers' PREPAREs answered")
        time.sleep(a.settle)
        row = {}
        for kind in ("cold", "warm"):
            r, out, ms = request(a.port, "POST", "/v1/functions/tp/invoke", body)
            st, tier = timing(r.headers.get("Server-Timing"))
            ok = r.status == 200 and json.loads(out).get("tokens") == expected
            failed |= not ok
            row[kind] = {"ms": ms, "status": r.status, "start": r.headers.get("Thaw-Start"), "tier": tier,
                         "timing": st, "same_ids": ok}
            print("round %d %s: %.1f ms, status %d, %s, tier %s, ids %s, Server-Timing %s" % (
                i + 1, kind, ms, r.status, r.headers.get("Thaw-Start"), tier, "the build's" if ok else
                "DIFFER: " + out[:200].decode(errors="replace"), r.headers.get("Server-Timing")), flush=True)
        s = state(a.port)
        row["instance"] = s.get("instances", [{}])[0] if s.get("instances") else {}
        rounds.append(row)
    cold = [r["cold"]["ms"] for r in rounds]
    warm = [r["warm"]["ms"] for r in rounds]
    print("SUMMARY tp group cold over HTTP (client: request sent to body in hand; restore of every rank + the prompt's "
          "pass + 2 greedy ids): median %.1f ms (%.1f-%.1f, %d); warm median %.1f ms (%.1f-%.1f); ids the build's: %s"
          % (statistics.median(cold), min(cold), max(cold), len(cold), statistics.median(warm), min(warm), max(warm),
             not failed))
    json.dump({"rounds": rounds, "build": {k: build[k] for k in build if not k.startswith("sample")}},
              open(a.out, "w"), indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
