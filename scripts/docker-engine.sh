#!/usr/bin/env bash
# (Copied from the workplace recipe shared/recipes/docker-engine.sh so a clean clone has it.)
# Starts a private Docker engine for tests on a machine without one, and loads a tiny busybox image.
#
#   docker-engine.sh start DIR   -> installs docker.io + busybox-static if missing, starts dockerd with its
#                                   socket at DIR/docker.sock, imports image gpupack-test/busybox:latest,
#                                   prints the socket path on stdout (last line)
#   docker-engine.sh stop DIR    -> stops that dockerd (and its containers)
#
# The engine runs with the vfs storage driver, no bridge and no iptables, so it needs no kernel features beyond
# namespaces and cgroups; containers get `--network none` semantics unless you ask for host networking.
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n $cmd && -n $dir ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sock=$dir/docker.sock pidfile=$dir/dockerd.pid

case $cmd in
start)
  if ! command -v dockerd >/dev/null || ! [[ -x /bin/busybox ]]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq docker.io busybox-static >/dev/null
  fi
  if [[ -S $sock ]] && docker -H "unix://$sock" version >/dev/null 2>&1; then
    echo "$sock"; exit 0
  fi
  dockerd --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none --ip-forward=false \
    --ip-masq=false -H "unix://$sock" --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$pidfile" \
    >"$dir/dockerd.log" 2>&1 &
  for _ in $(seq 1 100); do
    docker -H "unix://$sock" version >/dev/null 2>&1 && break
    sleep 0.2
  done
  docker -H "unix://$sock" version >/dev/null 2>&1 || { tail -20 "$dir/dockerd.log" >&2; exit 1; }
  if ! docker -H "unix://$sock" image inspect gpupack-test/busybox:latest >/dev/null 2>&1; then
    rootfs=$(mktemp -d)
    mkdir -p "$rootfs/bin" "$rootfs/tmp"
    cp /bin/busybox "$rootfs/bin/busybox"
    for applet in sh env sleep echo cat true false kill ls; do ln -sf busybox "$rootfs/bin/$applet"; done
    tar -C "$rootfs" -c . | docker -H "unix://$sock" import - gpupack-test/busybox:latest >/dev/null
    rm -rf "$rootfs"
  fi
  echo "$sock"
  ;;
stop)
  if [[ -f $pidfile ]]; then
    pid=$(cat "$pidfile")
    docker -H "unix://$sock" ps -q 2>/dev/null | xargs -r docker -H "unix://$sock" kill >/dev/null 2>&1 || true
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
