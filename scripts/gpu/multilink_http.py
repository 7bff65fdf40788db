#!/usr/bin/env python3
"""Cold starts over HTTP against a running `thaw serve`, for scripts/gpu/multilink-run.sh (issue 27).

Modes (the server is started by the caller with the functions each mode names):
  one    R cold starts of `f` (keepAlive 1s): the host cache through one GPU's link (the server sees one GPU).
  two    R cold starts of `f` on a two-GPU server: the host cache through both links. Function `h` (the same image,
         minInstances 1) is warm on the other GPU; each round measures h's warm latency alone, then fires `f` cold
         and h 3 ms later, while f's restore borrows h's GPU's link: the helper's cost to a warm function.
  tiers  with the HBM tier and a budget of one instance per GPU: f cold (through both links), R cold starts of f
         from its own GPU's tier (`hbm`), then `blocker` (the same image) fills that GPU and f starts on the other
         one from the first GPU's tier by a peer copy (`hbm-peer`).
Every response's Server-Timing is kept; the time is the client's, from sending the request to the body in hand.
Prints one line per request and SUMMARY lines; writes --out as JSON. Exit 1 if a request failed.
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.request


def timing(header):
    t, tier = {}, None
    for part in (header or "").split(","):
        part = part.strip()
        if ";dur=" in part:
            k, v = part.split(";dur=")
            t[k] = float(v)
        elif part.startswith("tier;desc="):
            tier = part[len("tier;desc="):].strip('"')
    return t, tier


class Server:
    def __init__(self, port):
        self.port = port

    def post(self, function, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        data = json.dumps(body).encode()
        t = time.perf_counter()
        conn.request("POST", "/v1/functions/%s/invoke" % function, data, {"Content-Type": "application/json"})
        r = conn.getresponse()
        out = r.read()
        ms = (time.perf_counter() - t) * 1e3
        conn.close()
        st, tier = timing(r.headers.get("Server-Timing"))
        return {"function": function, "status": r.status, "ms": ms, "start": r.headers.get("Thaw-Start"),
                "tier": tier, "timing": st, "body": out[:160].decode(errors="replace")}

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=30) as r:
            return r.read().decode()

    def state(self, function):
        return json.loads(self.get("/v1/functions/" + function))

    def wait(self, function, test, seconds=120):
        t = time.time()
        while time.time() - t < seconds:
            try:
                s = self.state(function)
                if test(s):
                    return s
            except Exception:
                pass
            time.sleep(0.05)
        raise SystemExit("%s never reached the expected state" % function)

    def idle_workers(self):
        return sum(float(l.rsplit(" ", 1)[1]) for l in self.get("/metrics").splitlines()
                   if l.startswith("thaw_pool_workers") and 'state="idle"' in l)

    def settle(self, function, idle):
        """Scaled to zero, the pool's idle workers back (warm: they hold their links), then a moment more."""
        self.wait(function, lambda s: not s.get("instances"))
        t = time.time()
        while self.idle_workers() < idle and time.time() - t < 90:
            time.sleep(0.1)
        time.sleep(1.0)

    def device(self, function):
        traces = json.loads(self.get("/v1/functions/%s/trace" % function)).get("traceEvents", [])
        titles = [e["args"]["name"] for e in traces if e.get("ph") == "M" and e.get("name") == "process_name"]
        # "f cold start #3 on device 1": the latest cold start's device.
        latest = max(titles, key=lambda t: int(t.split("#")[1].split()[0]), default=None)
        return int(latest.rsplit(" ", 1)[1]) if latest else -1


def line(r, device=None):
    print("%-8s %-5s %-21s %8.1f ms  status %d%s  %s" % (r["function"], r["start"], r["tier"] or "-", r["ms"],
          r["status"], "" if device is None else "  GPU %d" % device,
          " ".join("%s=%.2f" % kv for kv in r["timing"].items())), flush=True)


def spread(xs):
    return "%.1f ms (%.1f-%.1f, %d)" % (statistics.median(xs), min(xs), max(xs), len(xs)) if xs else "none"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", choices=["one", "two", "tiers"], required=True)
    p.add_argument("--request", required=True)
    p.add_argument("--model", default="gpt2-large")
    p.add_argument("--image-gb", type=float, default=1.55)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--idle", type=int, default=2, help="idle workers the server keeps, all GPUs")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    request = json.load(open(a.request))
    s = Server(a.port)
    functions = ["f", "h"] if a.mode == "two" else ["f", "blocker"] if a.mode == "tiers" else ["f"]
    for f in functions:
        s.wait(f, lambda st: st.get("image", {}).get("hostCache") in ("cached", "store"), 300)
    out = {"mode": a.mode, "model": a.model, "cold": [], "hbm": [], "peer": [], "alone": [], "beside": []}
    failed = False

    if a.mode in ("one", "two"):
        if a.mode == "two":
            s.wait("h", lambda st: st.get("state") == "warm")
            s.post("h", request)
        for _ in range(a.rounds):
            s.settle("f", a.idle)
            if a.mode == "two":
                alone = [s.post("h", request) for _ in range(5)]
                out["alone"] += [r["ms"] for r in alone]
                time.sleep(0.3)  # h's GPU idle again: a GPU that served within 100 ms lends no link
            beside = []
            helper = threading.Thread(target=lambda: (time.sleep(0.003), beside.append(s.post("h", request))))
            if a.mode == "two":
                helper.start()
            r = s.post("f", request)
            if a.mode == "two":
                helper.join()
                out["beside"] += [b["ms"] for b in beside]
            line(r, s.device("f"))
            for b in beside:
                line(b)
            out["cold"].append(r)
            failed |= r["status"] != 200 or r["start"] != "cold" or any(b["status"] != 200 for b in beside)
        way = "host-cache-multilink" if a.mode == "two" else "host-cache"
        ms = [r["ms"] for r in out["cold"] if r["tier"] == way]
        print("SUMMARY http %s %s: cold from the host cache %s; %d of %d through %s" % (
            a.model, "2 GPUs" if a.mode == "two" else "1 GPU", spread(ms), len(ms), len(out["cold"]), way))
        if a.mode == "two":
            alone, beside = out["alone"], out["beside"]
            if alone and beside:
                cost = (statistics.median(beside) / statistics.median(alone) - 1) * 100
                print("SUMMARY http helper: warm %s alone %s, beside a cold start borrowing its GPU's link %s: %+.1f%% "
                      "(the default helper share's bound: 5%%)" % (a.model, spread(alone), spread(beside), cost))

    if a.mode == "tiers":
        s.settle("f", a.idle)
        first = s.post("f", request)
        line(first, s.device("f"))
        home = s.device("f")
        s.wait("f", lambda st: not st.get("instances")
               and st.get("image", {}).get("hbmBytes", {}).get(str(home), 0) > 0)
        for _ in range(a.rounds):
            s.settle("f", a.idle)
            r = s.post("f", request)
            line(r, s.device("f"))
            out["hbm"].append(r)
            failed |= r["status"] != 200
        s.settle("f", a.idle)
        b = s.post("blocker", request)
        line(b, s.device("blocker"))
        time.sleep(0.3)
        s.settle("f", a.idle)
        r = s.post("f", request)
        line(r, s.device("f"))
        out["peer"].append(r)
        failed |= r["status"] != 200 or b["status"] != 200
        hbm = [x["ms"] for x in out["hbm"] if x["tier"] == "hbm"]
        peer = [x["ms"] for x in out["peer"] if x["tier"] == "hbm-peer"]
        print("SUMMARY http %s tiers: same GPU's HBM tier %s; the other GPU's (hbm-peer) %s" % (
            a.model, spread(hbm), spread(peer)))
        if hbm and peer:
            goal = 1.1 * statistics.median(hbm) + a.image_gb / 300 * 1e3
            print("SUMMARY http %s hbm-peer goal: <= 1.1 x %.1f + %.2f GB at 300 GB/s = %.1f ms: %s (%.1f ms)" % (
                a.model, statistics.median(hbm), a.image_gb, goal, "met" if peer[0] <= goal else "NOT met", peer[0]))

    json.dump(out, open(a.out, "w"), indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
