#!/usr/bin/env bash
# Runs Thaw's container image without a container runtime: unpacks the image's layers (from the OCI or Docker
# archive Jib writes) into a folder, mounts /proc there, and runs the image's own entrypoint in a chroot:
# `--version` (also: that it maps the image's class-data sharing archive), `devices`, `demo --device sim`. Proves the image's files, libraries and entrypoint work; not
# namespaces, cgroups or GPUs (no container runtime or GPU needed, root is).
#   scripts/container-check.sh deploy/target/thaw-image.tar [WORKDIR]
set -euo pipefail
image=${1:?usage: container-check.sh IMAGE.tar [WORKDIR]}
work=${2:-$(mktemp -d /tmp/thaw-image-check.XXXXXX)}
root="$work/root"
rm -rf "$root" && mkdir -p "$root"
python3 - "$image" "$root" "$work/entrypoint" <<'PY'
import io, json, sys, tarfile
image, root, entry_file = sys.argv[1:4]
with tarfile.open(image) as t:
    names = t.getnames()
    read = lambda n: t.extractfile(n).read()
    if 'index.json' in names:  # OCI image layout
        index = json.loads(read('index.json'))
        blob = lambda d: read('blobs/sha256/' + d.split(':', 1)[1])
        manifest = json.loads(blob(index['manifests'][0]['digest']))
        config = json.loads(blob(manifest['config']['digest']))
        layers = [blob(l['digest']) for l in manifest['layers']]
    else:  # docker save format
        m = json.loads(read('manifest.json'))[0]
        config = json.loads(read(m['Config']))
        layers = [read(l) for l in m['Layers']]
    for data in layers:
        with tarfile.open(fileobj=io.BytesIO(data)) as layer:
            layer.extractall(root)
    cfg = config['config']
    open(entry_file, 'w').write(json.dumps({'entrypoint': cfg.get('Entrypoint') or [],
                                            'env': cfg.get('Env') or []}))
    print(f"unpacked {len(layers)} layers into {root}")
PY
mkdir -p "$root/proc"
mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
mapfile -t entry < <(python3 -c 'import json,sys; [print(a) for a in json.load(open(sys.argv[1]))["entrypoint"]]' "$work/entrypoint")
mapfile -t envs < <(python3 -c 'import json,sys; [print(a) for a in json.load(open(sys.argv[1]))["env"]]' "$work/entrypoint")
run() { env -i "${envs[@]}" ${JAVA_TOOL_OPTIONS:+"JAVA_TOOL_OPTIONS=$JAVA_TOOL_OPTIONS"} /usr/sbin/chroot "$root" "${entry[@]}" "$@"; }
echo "== entrypoint: ${entry[*]}"
run --version
# Thaw's class-data sharing archive, made at the build for /opt/thaw (scripts/container-cds.sh): the CLI's classes
# come from it (JAVA_TOOL_OPTIONS adds a JVM option to the entrypoint's own).
if ! JAVA_TOOL_OPTIONS=-Xlog:class+load=info run --version | grep -q 'dev.thaw.cli.ThawCli source: shared objects file'; then
  echo "container-check: the entrypoint's JVM does not map /opt/thaw/lib/thaw.jsa" >&2
  exit 1
fi
echo "== /opt/thaw/lib/thaw.jsa mapped"
run devices --device sim
run demo --device sim
# A Knative pod's start: `serve --function` with K_SERVICE set (the pool), its first response, and the archive mapped
# by the server's JVM and by its pool worker's (which takes it from the server's command line).
python3 - "$root" "${entry[@]}" <<'PY' -- "${envs[@]}"
import os, signal, socket, subprocess, sys, time, urllib.request
args = sys.argv[1:]
sep = args.index("--")
root, entry, envs = args[0], args[1:sep], args[sep + 1:]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
env = dict(e.split("=", 1) for e in envs)
env.update(K_SERVICE="check", PORT=str(port))
p = subprocess.Popen(["/usr/sbin/chroot", root] + entry + ["serve", "--device", "sim", "--function", "mlp=demo:mlp"],
                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
body = ('{"inputs": [[%s]]}' % ",".join(["0.1"] * 64)).encode()
ok, deadline = False, time.time() + 120
while time.time() < deadline and p.poll() is None and not ok:
    try:
        r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d/v1/functions/mlp/invoke" % port,
                                   data=body, headers={"Content-Type": "application/json"}), timeout=60)
        ok = r.status == 200
    except Exception:
        time.sleep(0.05)
def maps(pid):
    try:
        return any(l.rstrip().endswith("/opt/thaw/lib/thaw.jsa") for l in open("/proc/%d/maps" % pid))
    except OSError:
        return False
server = p.pid  # chroot execs the entrypoint: same process
kids = [int(d) for d in os.listdir("/proc") if d.isdigit() and os.path.exists("/proc/%s/stat" % d)
        and open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()[1] == str(server)]
mapped = [maps(server)] + [maps(k) for k in kids]
p.send_signal(signal.SIGTERM)
out = p.communicate(timeout=60)[0].decode(errors="replace")
startup = [l for l in out.splitlines() if " startup " in l]
print("== serve --function under K_SERVICE: first response %s, exit %s, archive mapped by the server %s and by %d of %d workers"
      % ("200" if ok else "NONE", p.returncode, mapped[0], sum(mapped[1:]), len(kids)))
print(startup[0] if startup else out[-3000:])
sys.exit(0 if ok and p.returncode == 0 and all(mapped) and kids else 1)
PY
echo "container-check: the image's entrypoint runs (sim device, chroot; no container runtime, no GPU)"
