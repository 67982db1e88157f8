#!/usr/bin/env bash
# bench/gpu/engine.sh: a private Docker engine for bench/gpu/run.sh --runtime docker on a GPU machine.
#
#   bench/gpu/engine.sh start DIR [PACK.tar.xz]  -> starts dockerd with its socket at DIR/docker.sock (vfs storage, no
#                                                  bridge, no iptables: nothing beyond namespaces and cgroups) and
#                                                  prints the socket path (last line). With PACK (a tar.xz of bin/
#                                                  dockerd, containerd, containerd-shim-runc-v2, runc, docker-init,
#                                                  busybox and lib/ with their libraries), the engine comes from it:
#                                                  unpacked to DIR/pack, the libraries this host lacks copied to
#                                                  /usr/local/lib (for a machine that reaches no package registry).
#   bench/gpu/engine.sh stop DIR                 -> stops that dockerd and its containers.
# It never touches a GPU setting; the engine runs no GPU runtime of its own (gpupack's agent injects the GPU).
set -euo pipefail
cmd=${1:-}; dir=${2:-}; pack=${3:-}
[[ -n $cmd && -n $dir ]] || { echo "usage: $0 start DIR [PACK.tar.xz] | stop DIR" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sock=$dir/docker.sock pidfile=$dir/dockerd.pid
answers() { python3 - "$sock" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(2)
try:
    s.connect(sys.argv[1]); s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
    sys.exit(0 if b" 200 " in s.recv(64) else 1)
except OSError:
    sys.exit(1)
PY
}
case $cmd in
start)
  if [[ -n $pack ]]; then
    mkdir -p "$dir/pack" && tar -C "$dir/pack" -xJf "$pack"
    export PATH=$dir/pack/bin:$PATH
    for lib in "$dir"/pack/lib/*; do
      name=$(basename "$lib")
      ldconfig -p | grep -q " $name " || ldconfig -p | grep -q "/$name\$" || { cp "$lib" /usr/local/lib/; echo "engine.sh: added $name" >&2; }
    done
    ldconfig
  fi
  command -v dockerd >/dev/null || { echo "engine.sh: no dockerd (give a PACK)" >&2; exit 2; }
  if [[ -S $sock ]] && answers; then echo "$sock"; exit 0; fi
  dockerd --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none --ip-forward=false --ip-masq=false \
    -H "unix://$sock" --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$pidfile" >"$dir/dockerd.log" 2>&1 &
  for _ in $(seq 1 150); do answers && break; sleep 0.2; done
  answers || { tail -20 "$dir/dockerd.log" >&2; exit 1; }
  echo "$sock"
  ;;
stop)
  if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 75); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  ;;
*) echo "usage: $0 start DIR [PACK.tar.xz] | stop DIR" >&2; exit 2 ;;
esac
