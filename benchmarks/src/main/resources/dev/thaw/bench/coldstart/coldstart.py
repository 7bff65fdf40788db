#!/usr/bin/env python3
"""The PyTorch side of Thaw's cold-start harness (dev.thaw.bench.coldstart). The harness extracts this file
and runs it; every command prints JSON lines on stdout (one object per line) and its diagnostics on stderr.

  prepare     --gpt2 NAME=DIR ... --seed S [--bandwidth]
              Says whether PyTorch can run here (torch, CUDA, the driver's checkpoint API), writes each GPT-2
              model as save_pretrained writes it (GPT2LMHeadModel of the released size, torch.manual_seed(S),
              fp16) and measures pinned host -> device bandwidth. Prints one object.
  scratch     --kind gpt2|mlp --weights PATH --request FILE
              A cold start from nothing, in this fresh process: import torch (+ transformers), CUDA init, load
              the weights from safetensors, upload, one request. Prints the answer and each phase's time.
  serve       --kind gpt2|mlp --weights PATH --request FILE
              Loads the model, warms up, prints {"ready": ...}, then answers the request once per "go" line on
              stdin. The process the driver checkpoint suspends.
  checkpoint  --kind gpt2|mlp --weights PATH --request FILE --cycles N
              The controller: starts `serve`, then N times suspends it (cuCheckpointProcessLock +
              cuCheckpointProcessCheckpoint) and resumes it (cuCheckpointProcessRestore +
              cuCheckpointProcessUnlock) and asks for one response, calling libcuda.so.1 through ctypes.
              Prints one object per cycle.

Requests are Thaw's: gpt2 {"tokens": [[16 ids]], "maxNewTokens": 1}, answered by the greedy next token of each
prompt; mlp {"inputs": [[...], ...]}, answered by each row's argmax. "gap" is the smallest top-1 minus top-2
score of the answer, so a disagreement with another implementation can be told from a near-tie.
Nothing here touches the network: the Hugging Face libraries are forced offline.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

GPT2_SIZES = {  # n_embd, n_layer, n_head of the released sizes; all have vocab 50257 and context 1024
    "gpt2-tiny": (64, 2, 4),
    "gpt2": (768, 12, 12),
    "gpt2-medium": (1024, 24, 16),
    "gpt2-large": (1280, 36, 20),
    "gpt2-xl": (1600, 48, 25),
}


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def ms(t0, t1):
    return (t1 - t0) * 1e3


# ---- prepare ----

def prepare(a):
    out = {"python": sys.version.split()[0]}
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any failure means PyTorch cannot run here
        out.update(usable=False, reason=f"python3 cannot import torch: {e}")
        emit(out)
        return 0
    out["torch"] = torch.__version__
    try:
        import transformers
        out["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001
        out["transformers"] = None
        out["transformersError"] = str(e)
    if not torch.cuda.is_available():
        out.update(usable=False, reason=f"torch {torch.__version__} sees no CUDA device")
        emit(out)
        return 0
    if a.gpt2 and out["transformers"] is None:
        out.update(usable=False, reason="python3 cannot import transformers: " + out["transformersError"])
        emit(out)
        return 0
    out["device"] = torch.cuda.get_device_name(0)
    out["checkpointApiMissing"] = checkpoint_api_missing()
    out["usable"] = True
    if a.bandwidth:
        out["h2dGBps"] = pinned_h2d_gbps(torch)
    prepared = {}
    for spec in a.gpt2:
        name, _, directory = spec.partition("=")
        t0 = time.perf_counter()
        prepared[name] = {"dir": directory, "bytes": save_gpt2(torch, name, directory, a.seed),
                          "seconds": time.perf_counter() - t0}
    out["prepared"] = prepared
    emit(out)
    return 0


def checkpoint_api_missing():
    """None when libcuda.so.1 has the checkpoint calls, else why not."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"cannot load libcuda.so.1: {e}"
    for name in ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore",
                 "cuCheckpointProcessUnlock"):
        if not hasattr(lib, name):
            return f"libcuda.so.1 has no {name} (the driver is older than r570)"
    return None


def pinned_h2d_gbps(torch):
    """Best of 5 copies of 1 GiB from pinned host memory, timed by CUDA events."""
    n = 1 << 30
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dev.copy_(host, non_blocking=True)
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) / 1e3)
    del host, dev
    torch.cuda.empty_cache()
    return n / best / 1e9


def save_gpt2(torch, name, directory, seed):
    from transformers import GPT2Config, GPT2LMHeadModel
    n_embd, n_layer, n_head = GPT2_SIZES[name]
    positions, vocab = (64, 97) if name == "gpt2-tiny" else (1024, 50257)
    config = GPT2Config(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_positions=positions, vocab_size=vocab,
                        activation_function="gelu_new", layer_norm_epsilon=1e-5)
    torch.manual_seed(seed)
    with torch.device("cuda"):  # initialising on the GPU: seconds faster than on the CPU for the large sizes
        model = GPT2LMHeadModel(config)
    model = model.half().eval()
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory)
    files = sorted(os.listdir(directory))
    if "model.safetensors" not in files:
        raise SystemExit(f"save_pretrained wrote {files}, not one model.safetensors; Thaw reads unsharded files")
    del model
    torch.cuda.empty_cache()
    return os.path.getsize(os.path.join(directory, "model.safetensors"))


# ---- the model, loaded the way a PyTorch user would ----

class Gpt2:
    """GPT2LMHeadModel in fp16 from a save_pretrained directory; answers with each prompt's greedy next token."""

    def __init__(self, torch, directory, phases, clock):
        from transformers import GPT2LMHeadModel
        phases["import transformers"] = clock()
        phases["CUDA init"] = cuda_init(torch, clock)
        try:
            model = GPT2LMHeadModel.from_pretrained(directory, dtype=torch.float16)
        except TypeError:  # transformers before 4.56 names it torch_dtype
            model = GPT2LMHeadModel.from_pretrained(directory, torch_dtype=torch.float16)
        phases["load weights"] = clock()
        self.model = model.to("cuda").eval()
        torch.cuda.synchronize()
        phases["upload"] = clock()
        self.torch = torch

    def answer(self, request):
        torch = self.torch
        ids = torch.tensor(request["tokens"], dtype=torch.long, device="cuda")
        with torch.inference_mode():
            logits = self.model(ids).logits[:, -1, :].float()
            top = logits.topk(2, dim=-1)
            tokens = top.indices[:, :1].tolist()
            gap = (top.values[:, 0] - top.values[:, 1]).min().item()
        return {"tokens": tokens}, gap


class Mlp:
    """Thaw's MLP (x @ W + b, ReLU between layers) in fp32 from the harness's safetensors file."""

    def __init__(self, torch, path, phases, clock):
        from safetensors.torch import load_file
        phases["import safetensors"] = clock()
        phases["CUDA init"] = cuda_init(torch, clock)
        tensors = load_file(path)
        phases["load weights"] = clock()
        layers = len([k for k in tensors if k.startswith("w")])
        self.layers = [(tensors[f"w{i}"].to("cuda"), tensors[f"b{i}"].to("cuda")) for i in range(layers)]
        torch.cuda.synchronize()
        phases["upload"] = clock()
        self.torch = torch

    def answer(self, request):
        torch = self.torch
        x = torch.tensor(request["inputs"], dtype=torch.float32, device="cuda")
        with torch.inference_mode():
            for i, (w, b) in enumerate(self.layers):
                x = x @ w + b
                if i + 1 < len(self.layers):
                    x = torch.relu(x)
            top = x.topk(2, dim=-1) if x.shape[1] > 1 else None
            argmax = x.argmax(dim=-1).tolist()
            gap = (top.values[:, 0] - top.values[:, 1]).min().item() if top is not None else None
        return {"argmax": argmax}, gap


def cuda_init(torch, clock):
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    return clock()


def load(kind, weights, phases, clock):
    import torch
    phases["import torch"] = clock()
    return (Gpt2 if kind == "gpt2" else Mlp)(torch, weights, phases, clock)


def stopwatch():
    last = [time.perf_counter()]

    def lap():
        now = time.perf_counter()
        d = ms(last[0], now)
        last[0] = now
        return d
    return lap


# ---- scratch ----

def scratch(a):
    request = read_json(a.request)
    phases = {}
    clock = stopwatch()
    model = load(a.kind, a.weights, phases, clock)
    answer, gap = model.answer(request)
    model.torch.cuda.synchronize()
    phases["first request"] = clock()
    emit({"answer": answer, "gap": gap, "phases": phases})
    return 0


# ---- serve: the process the driver suspends ----

def serve(a):
    request = read_json(a.request)
    phases = {}
    clock = stopwatch()
    model = load(a.kind, a.weights, phases, clock)
    answer, gap = model.answer(request)
    model.answer(request)  # warm: the suspended server is one that has answered before
    model.torch.cuda.synchronize()
    emit({"ready": True, "pid": os.getpid(), "answer": answer, "gap": gap, "phases": phases})
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        if line.strip() == "go":
            answer, gap = model.answer(request)
            emit({"answer": answer, "gap": gap})


# ---- checkpoint: the controller ----

class LockArgs(ctypes.Structure):  # CUcheckpointLockArgs (cuda.h, CUDA 12.8+)
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


class Driver:
    """The CUDA driver's process-checkpoint calls, on libcuda.so.1. Every other argument struct is optional: NULL."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore", "cuCheckpointProcessUnlock",
                     "cuCheckpointProcessLock"):
            fn = getattr(self.lib, name)
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p]
            fn.restype = ctypes.c_int
        self.lib.cuCheckpointProcessGetState.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        self.lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self.check("cuInit", self.lib.cuInit(0))

    def check(self, call, result):
        if result != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            raise RuntimeError(f"{call} failed: {result} {name.value.decode() if name.value else '?'}")

    def lock(self, pid, timeout_ms):
        args = LockArgs(timeoutMs=timeout_ms)
        self.check("cuCheckpointProcessLock", self.lib.cuCheckpointProcessLock(pid, ctypes.addressof(args)))

    def checkpoint(self, pid):
        self.check("cuCheckpointProcessCheckpoint", self.lib.cuCheckpointProcessCheckpoint(pid, None))

    def restore(self, pid):
        self.check("cuCheckpointProcessRestore", self.lib.cuCheckpointProcessRestore(pid, None))

    def unlock(self, pid):
        self.check("cuCheckpointProcessUnlock", self.lib.cuCheckpointProcessUnlock(pid, None))

    def state(self, pid):
        s = ctypes.c_int(-1)
        self.check("cuCheckpointProcessGetState", self.lib.cuCheckpointProcessGetState(pid, ctypes.byref(s)))
        return s.value


LOCKED, CHECKPOINTED = 1, 2  # CUprocessState


def checkpoint(a):
    try:
        driver = Driver()
    except Exception as e:  # noqa: BLE001 - no libcuda, no checkpoint calls, cuInit failing: all said the same way
        emit({"error": f"the driver's checkpoint API is not usable: {e}"})
        return 1
    t0 = time.perf_counter()
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", "--kind", a.kind, "--weights",
                               a.weights, "--request", a.request], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, bufsize=1)
    try:
        ready = reply_from(server)
        if not ready.get("ready"):
            raise RuntimeError(f"the server did not start (exit {server.wait(timeout=30)})")
        emit({"ready": True, "serverStartMs": ms(t0, time.perf_counter()), "answer": ready["answer"],
              "gap": ready["gap"], "phases": ready["phases"]})
        for cycle in range(a.cycles):
            t0 = time.perf_counter()
            driver.lock(server.pid, 30000)
            t1 = time.perf_counter()
            driver.checkpoint(server.pid)
            t2 = time.perf_counter()
            if driver.state(server.pid) != CHECKPOINTED:
                raise RuntimeError(f"the server is in state {driver.state(server.pid)} after its checkpoint")
            # Cold start: from here to the response.
            t3 = time.perf_counter()
            driver.restore(server.pid)
            t4 = time.perf_counter()
            driver.unlock(server.pid)
            t5 = time.perf_counter()
            server.stdin.write("go\n")
            server.stdin.flush()
            reply = reply_from(server)
            t6 = time.perf_counter()
            if "answer" not in reply:
                raise RuntimeError(f"the server gave no answer after its restore (exit {server.poll()})")
            emit({"cycle": cycle, "lockMs": ms(t0, t1), "checkpointMs": ms(t1, t2), "ttfrMs": ms(t3, t6),
                  "phases": {"restore": ms(t3, t4), "unlock": ms(t4, t5), "first request": ms(t5, t6)},
                  "answer": reply["answer"], "gap": reply["gap"]})
    except Exception as e:  # noqa: BLE001 - reported to the harness, which names the contender as failed
        emit({"error": str(e)})
        resume_quietly(driver, server.pid)
        return 1
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


def reply_from(server):
    """The server's next JSON line; a line a library printed on stdout is passed over. {} at end of stream."""
    while True:
        line = server.stdout.readline()
        if not line:
            return {}
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj


def resume_quietly(driver, pid):
    """After a failure, brings a suspended server back so it can exit (a locked process cannot)."""
    try:
        state = driver.state(pid)
        if state == CHECKPOINTED:
            driver.restore(pid)
            state = LOCKED
        if state == LOCKED:
            driver.unlock(pid)
    except Exception:  # noqa: BLE001 - the failure being reported is the one that matters
        pass


def read_json(path):
    with open(path) as f:
        return json.load(f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("prepare")
    pr.add_argument("--gpt2", action="append", default=[], metavar="NAME=DIR")
    pr.add_argument("--seed", type=int, default=1234)
    pr.add_argument("--bandwidth", action="store_true")
    for name in ("scratch", "serve", "checkpoint"):
        c = sub.add_parser(name)
        c.add_argument("--kind", choices=("gpt2", "mlp"), required=True)
        c.add_argument("--weights", required=True)
        c.add_argument("--request", required=True)
        if name == "checkpoint":
            c.add_argument("--cycles", type=int, required=True)
    a = p.parse_args()
    return {"prepare": prepare, "scratch": scratch, "serve": serve, "checkpoint": checkpoint}[a.command](a)


if __name__ == "__main__":
    sys.exit(main())
