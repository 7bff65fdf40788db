#!/usr/bin/env python3
"""Cold starts over HTTP against a running `thaw serve`, for scripts/gpu/multilink-run.sh (issue 27).

Modes (the server is started by the caller with the functions each mode names):
  one    R cold starts of `f` (keepAlive 1s): the host cache through one GPU's link (the server sees one GPU).
  two    R cold starts of `f` on a two-GPU server: the host cache through both links. Function `h` (the same image,
         minInstances 1) is warm on the other GPU; each round measures h's warm latency alone, then fires `f` cold
         and h 3 ms later, while f's restore borrows h's GPU's link: the helper's cost to a warm function.
  tiers  with the HBM tier and a budget of one instance per GPU: f cold (through both links), R cold starts of f
         from its own GPU's tier (`hbm`), then `blocker` (the same image) fills that GPU and f starts on the other
         one from the first GPU's tier by a peer copy (`hbm-peer`), R times: between two, `g` (another image, cold
         on that other GPU) scales in there, and its weights push f's out of that GPU's tier (the server's
         --hbm-tier holds f's or g's, not both), so that only the first GPU's tier holds f's again.
Every response's Server-Timing is kept; the time is the client's, from sending the request to the body in hand.
For each cold start the server's trace gives when its restore's first copy was called and when its last copy landed,
counted from the request reaching the server's scheduler.
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

    def wait(self, function, test, seconds=120, fatal=True):
        t = time.time()
        while time.time() - t < seconds:
            try:
                s = self.state(function)
                if test(s):
                    return s
            except Exception:
                pass
            time.sleep(0.05)
        if fatal:
            raise SystemExit("%s never reached the expected state" % function)
        return None

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

    def latest(self, function, seconds=2.0):
        """The latest cold start of `function` from its trace: its device, and once the restore's own timeline is
        attached (it comes after the response), when its first copy was called and when its last copy landed, in ms
        from the request reaching the scheduler."""
        t = time.time()
        while True:
            events = json.loads(self.get("/v1/functions/%s/trace" % function)).get("traceEvents", [])
            # "f cold start #3 on device 1"
            titles = {e["pid"]: e["args"]["name"] for e in events
                      if e.get("ph") == "M" and e.get("name") == "process_name"}
            if not titles:
                return {"device": -1}
            pid = max(titles, key=lambda p: int(titles[p].split("#")[1].split()[0]))
            out = {"device": int(titles[pid].rsplit(" ", 1)[1])}
            mine = [e for e in events if e.get("pid") == pid]
            queue = next((e for e in mine if e.get("name") == "queue" and e.get("tid") == 1), None)
            first = next((e for e in mine if e.get("name") == "first copy call"), None)
            # The restore's rows come as tid 10 + its own (host 1, restore stream 2, compute 3).
            copies = [e for e in mine if e.get("tid") == 12 and e.get("ph") == "X"]
            if queue and first and copies:
                out["firstCopy"] = (first["ts"] - queue["ts"]) / 1e3
                out["landed"] = (max(c["ts"] + c.get("dur", 0) for c in copies) - queue["ts"]) / 1e3
                return out
            if time.time() - t > seconds:
                return out
            time.sleep(0.05)

    def device(self, function):
        return self.latest(function, 0)["device"]


def line(r, device=None):
    cold = r.get("cold", {})
    copies = "  first copy %.1f ms, landed %.1f ms" % (cold["firstCopy"], cold["landed"]) if "firstCopy" in cold else ""
    print("%-8s %-5s %-21s %8.1f ms  status %d%s  %s%s" % (r["function"], r["start"], r["tier"] or "-", r["ms"],
          r["status"], "" if device is None else "  GPU %d" % device,
          " ".join("%s=%.2f" % kv for kv in r["timing"].items()), copies), flush=True)


def cold(s, r, function):
    """Line and trace figures of a cold start `r` of `function`; returns its device."""
    r["cold"] = s.latest(function)
    line(r, r["cold"]["device"])
    return r["cold"]["device"]


def copies_summary(model, what, rs):
    """When the first copy was called and the last landed, over the cold starts `rs` whose traces said."""
    first = [r["cold"]["firstCopy"] for r in rs if "firstCopy" in r.get("cold", {})]
    landed = [r["cold"]["landed"] for r in rs if "landed" in r.get("cold", {})]
    if first:
        print("SUMMARY http %s %s: first copy called %s after the request reached the server, last copy landed %s"
              % (model, what, spread(first), spread(landed)))


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
    p.add_argument("--peer-rounds", type=int, default=3, help="hbm-peer starts in the tiers mode")
    p.add_argument("--idle", type=int, default=2, help="idle workers the server keeps, all GPUs")
    p.add_argument("--gpus", type=int, default=2, help="the GPUs the server sees in the two mode")
    p.add_argument("--out", required=True)
    p.add_argument("--share", default="?", help="the helper share the server lends links at (its banner says)")
    a = p.parse_args()
    request = json.load(open(a.request))
    s = Server(a.port)
    functions = ["f", "h"] if a.mode == "two" else ["f", "blocker", "g"] if a.mode == "tiers" else ["f"]
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
            cold(s, r, "f")
            for b in beside:
                line(b)
            out["cold"].append(r)
            failed |= r["status"] != 200 or r["start"] != "cold" or any(b["status"] != 200 for b in beside)
        way = "host-cache-multilink" if a.mode == "two" else "host-cache"
        ms = [r["ms"] for r in out["cold"] if r["tier"] == way]
        gpus = "%d GPUs" % a.gpus if a.mode == "two" else "1 GPU"
        print("SUMMARY http %s %s: cold from the host cache %s; %d of %d through %s%s" % (
            a.model, gpus, spread(ms), len(ms), len(out["cold"]), way,
            " (helper share %s)" % a.share if a.mode == "two" else ""))
        copies_summary(a.model, gpus, out["cold"])
        if a.mode == "two":
            alone, beside = out["alone"], out["beside"]
            if alone and beside:
                cost = (statistics.median(beside) / statistics.median(alone) - 1) * 100
                print("SUMMARY http helper: warm %s alone %s, beside a cold start borrowing its GPU's link at share %s "
                      "%s: %+.1f%% (the bound: 5%%)" % (a.model, spread(alone), a.share, spread(beside), cost))

    if a.mode == "tiers":
        s.settle("f", a.idle)
        first = s.post("f", request)
        home = cold(s, first, "f")
        def held(device):
            """Scaled in, its weights in `device`'s tier."""
            return lambda st: not st.get("instances") and st.get("image", {}).get("hbmBytes", {}).get(
                str(device), 0) > 0
        s.wait("f", held(home))
        for _ in range(a.rounds):
            s.settle("f", a.idle)
            r = s.post("f", request)
            cold(s, r, "f")
            out["hbm"].append(r)
            failed |= r["status"] != 200
        s.settle("f", a.idle)
        b = s.post("blocker", request)
        if cold(s, b, "blocker") != home:
            print("the blocker started on another GPU than f's tier: the peer samples below may not be hbm-peer")
        failed |= b["status"] != 200
        time.sleep(0.3)
        for i in range(a.peer_rounds):
            s.settle("f", a.idle)
            r = s.post("f", request)
            other = cold(s, r, "f")
            out["peer"].append(r)
            failed |= r["status"] != 200
            if i == a.peer_rounds - 1:
                break
            # f's weights entered the other GPU's tier as it scaled in; g's push them out again there.
            s.wait("f", held(other))
            s.settle("g", a.idle)
            e = s.post("g", request)
            cold(s, e, "g")
            failed |= e["status"] != 200
            s.wait("g", held(other))
            if not s.wait("f", lambda st: st.get("image", {}).get("hbmBytes", {}).get(str(other), 0) == 0, 20,
                          fatal=False):
                print("f's weights stayed in GPU %d's tier beside g's (is --hbm-tier too large?): no more hbm-peer "
                      "samples" % other)
                break
        hbm = [x["ms"] for x in out["hbm"] if x["tier"] == "hbm"]
        peer = [x["ms"] for x in out["peer"] if x["tier"] == "hbm-peer"]
        print("SUMMARY http %s tiers: same GPU's HBM tier %s; the other GPU's (hbm-peer) %s; %d of %d through hbm-peer"
              % (a.model, spread(hbm), spread(peer), len(peer), len(out["peer"])))
        copies_summary(a.model, "from the same GPU's tier", [x for x in out["hbm"] if x["tier"] == "hbm"])
        copies_summary(a.model, "from the other GPU's tier", [x for x in out["peer"] if x["tier"] == "hbm-peer"])
        if hbm and peer:
            goal = 1.1 * statistics.median(hbm) + a.image_gb / 300 * 1e3
            print("SUMMARY http %s hbm-peer goal: <= 1.1 x %.1f + %.2f GB at 300 GB/s = %.1f ms: %s (median %.1f ms)"
                  % (a.model, statistics.median(hbm), a.image_gb, goal,
                     "met" if statistics.median(peer) <= goal else "NOT met", statistics.median(peer)))

    json.dump(out, open(a.out, "w"), indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
