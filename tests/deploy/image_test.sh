#!/usr/bin/env bash
# image_test.sh BUILD_DIR SOURCE_DIR CPACK: the server's container image (deploy/Dockerfile), built and run on the
# Docker engine that GPUPACK_DOCKER_SOCKET names, with no image registry and no network inside the engine.
#   1. The Debian package of this build's binary (`cpack -G DEB`, nothing is recompiled).
#   2. A Debian 12 base image made here: `debootstrap --variant=minbase` from the mirror apt is configured with,
#      with the package's dependencies included, then `docker import`. The root's tarball is cached per machine
#      in ~/.cache/gpupack/deploy-image-cache/ (or $GPUPACK_IMAGE_CACHE; keyed by mirror and dependency list), so
#      a rerun, or a fresh clone on the same machine, only imports it.
#   3. deploy/Dockerfile's final stage built with BuildKit and `--network none`, BASE= that base and
#      PACKAGE_FROM= an image holding the package: the compile stage is skipped and the install step must not
#      need the network.
#   4. The container on host networking (the engine has no bridge) with `--insecure-no-auth` on 127.0.0.1:0,
#      checked from outside: /healthz, CreateCluster and RegisterTaskDefinition with curl, the process runs as
#      uid/gid 999, the database is in the volume and owned by 999, `docker stop` ends it with SIGTERM (exit 0,
#      not the engine's SIGKILL after the grace), the task definition is still there after a restart of the
#      container and in a new container on the same volume.
# Exits 77 (ctest: skipped) when GPUPACK_DOCKER_SOCKET is not set, as the other engine tests skip. Registered
# as deploy_image (tests/CMakeLists.txt, label docker). Needs root and debootstrap for a cold cache
# (scripts/install-deps.sh installs debootstrap), and a docker CLI with BuildKit: one with buildx, or Debian 12's
# docker.io (20.10, BuildKit built in).
set -euo pipefail

# shellcheck source=tests/deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
deploy_args "$@"
deploy_engine_or_skip curl dpkg-deb tar sha256sum

tag=t$$-$RANDOM
work=$(mktemp -d /tmp/gpupack-image-test.XXXXXX)
server_image=gpupack-test/server:$tag
package_image=gpupack-test/package:$tag
volume=gpupack-test-data-$tag
containers=()
cleanup() {
  local c
  for c in "${containers[@]}"; do "$docker" rm -f "$c" >/dev/null 2>&1 || true; done
  "$docker" volume rm "$volume" >/dev/null 2>&1 || true
  "$docker" rmi "$server_image" "$package_image" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step "1. the Debian package of this build (cpack -G DEB)"
deploy_package "$work" "$cpack"

step "2. a Debian 12 base image with the package's dependencies (debootstrap, cached)"
deploy_base "$work"

step "3. deploy/Dockerfile's final stage on that base, from the package, with no network"
mkdir -p "$work/package-root/pkg"
cp "$deb" "$work/package-root/pkg/gpupack.deb"
tar -C "$work/package-root" -c . | "$docker" import - "$package_image" >/dev/null
DOCKER_BUILDKIT=1 "$docker" build --network none --progress plain -f "$src/deploy/Dockerfile" \
  --build-arg BASE="$base_image" --build-arg PACKAGE_FROM="$package_image" -t "$server_image" "$src" \
  >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log"
  fail "docker build of deploy/Dockerfile failed"
}
# The fallback's own line (BuildKit's plain progress prints "#STEP SECONDS text"), not the RUN line that holds it.
! grep -Eq "^#[0-9]+ [0-9.]+ deploy/Dockerfile: installing the package's missing dependencies" "$work/build.log" ||
  fail "the install step fell back to apt although the base holds every dependency: $(tail -40 "$work/build.log")"
grep -q '\[build ' "$work/build.log" && fail "the build stage ran although PACKAGE_FROM names a package image"
config=$("$docker" image inspect -f '{{.Config.User}} {{json .Config.Entrypoint}} {{.Config.StopSignal}} {{json .Config.Volumes}}' "$server_image")
[[ $config == 'gpupack ["/usr/bin/gpupack","server"] SIGTERM {"/var/lib/gpupack":{}}' ]] ||
  fail "the image's config: $config"
echo "   $server_image: $config"

# start_server NAME: a container of the image on host networking, on port 0 with its database in the volume.
start_server() {
  containers+=("$1")
  "$docker" run -d --name "$1" --network host -v "$volume:/var/lib/gpupack" "$server_image" \
    --listen 127.0.0.1:0 --db /var/lib/gpupack/gpupack.db --insecure-no-auth >/dev/null
}
# wait_port NAME RUN: the port the RUN-th start of container NAME listens on (its "ECS API" line), once /healthz
# answers there.
port=
wait_port() {
  local name=$1 run=$2 lines _
  port=
  for _ in $(seq 1 150); do
    lines=$("$docker" logs "$name" 2>&1 | grep -o 'ECS API *http://127\.0\.0\.1:[0-9]*' || true)
    if (($(grep -c . <<<"$lines") >= run)); then
      port=$(sed -n "${run}p" <<<"$lines" | sed 's/.*://')
      curl --noproxy '*' -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && return 0
    fi
    [[ $("$docker" inspect -f '{{.State.Running}}' "$name") == true ]] ||
      fail "$name exited: $("$docker" logs "$name" 2>&1 | tail -20)"
    sleep 0.2
  done
  fail "$name does not serve /healthz: $("$docker" logs "$name" 2>&1 | tail -20)"
}
ecs() {
  curl --noproxy '*' -sS "http://127.0.0.1:$port/" -H "X-Amz-Target: AmazonEC2ContainerServiceV20141113.$1" \
    -H 'Content-Type: application/x-amz-json-1.1' -d "$2"
}
# stop_server NAME: `docker stop` with a 30 s grace; exit 0 means the server ended on SIGTERM (the engine's SIGKILL
# after the grace gives 137).
stop_server() {
  local t0=$SECONDS code logs
  "$docker" stop -t 30 "$1" >/dev/null
  code=$("$docker" inspect -f '{{.State.ExitCode}} {{.State.OOMKilled}}' "$1")
  [[ $code == "0 false" ]] || fail "$1 after docker stop: exit code and OOMKilled '$code': $("$docker" logs "$1" 2>&1 | tail -20)"
  logs=$("$docker" logs "$1" 2>&1 | tail -n 20)
  grep -q 'shutting down' <<<"$logs" || fail "$1 did not log its shutdown: $logs"
  echo "   docker stop $1: exit 0 after SIGTERM in $((SECONDS - t0)) s (grace 30 s)"
}
definition_revision() {
  local out
  out=$(ecs DescribeTaskDefinition '{"taskDefinition": "image-test"}')
  grep -o '"revision":[0-9]*' <<<"$out" | sed -n '1s/.*://p' || true
}

step "4. the container: /healthz, the API, uid 999, the database in the volume"
"$docker" volume create "$volume" >/dev/null
first=gpupack-test-server-$tag
start_server "$first"
wait_port "$first" 1
health=$(curl --noproxy '*' -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")
[[ $health == 200 ]] || fail "/healthz answered $health"
out=$(ecs CreateCluster '{"clusterName": "image-test"}')
grep -q '"clusterName":"image-test"' <<<"$out" || fail "CreateCluster: $out"
out=$(ecs RegisterTaskDefinition '{"family": "image-test", "containerDefinitions": [{"name": "main",
  "image": "busybox", "command": ["sleep", "600"], "memory": 64,
  "resourceRequirements": [{"type": "GPU", "sharingStrategy": {"nvidiaMps": {"memory": 2048}}}]}]}')
grep -q '"taskDefinitionArn":"[^"]*:task-definition/image-test:1"' <<<"$out" || fail "RegisterTaskDefinition: $out"
echo "   port $port: /healthz 200, CreateCluster image-test, RegisterTaskDefinition image-test:1"
pid=$("$docker" inspect -f '{{.State.Pid}}' "$first")
uids=$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")
gids=$(awk '/^Gid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")
[[ $uids == "999 999 999 999" && $gids == "999 999 999 999" ]] || fail "the server runs as uid $uids, gid $gids"
[[ $(tr '\0' ' ' <"/proc/$pid/cmdline") == "/usr/bin/gpupack server "* ]] ||
  fail "pid $pid is not the server: $(tr '\0' ' ' <"/proc/$pid/cmdline")"
mountpoint=$("$docker" volume inspect -f '{{.Mountpoint}}' "$volume")
[[ -f $mountpoint/gpupack.db ]] || fail "no gpupack.db in the volume ($mountpoint): $(ls -la "$mountpoint")"
[[ $(stat -c '%u %g' "$mountpoint/gpupack.db") == "999 999" ]] ||
  fail "gpupack.db in the volume is owned by $(stat -c '%u:%g' "$mountpoint/gpupack.db")"
echo "   pid $pid runs as uid/gid 999; $mountpoint/gpupack.db owned by 999:999"

step "5. docker stop (SIGTERM), then the same container again and a new one on the volume"
stop_server "$first"
"$docker" start "$first" >/dev/null
wait_port "$first" 2
rev=$(definition_revision)
[[ $rev == 1 ]] || fail "after a restart, DescribeTaskDefinition image-test gives revision '$rev', not 1"
out=$(ecs DescribeClusters '{"clusters": ["image-test"]}')
grep -q '"status":"ACTIVE"' <<<"$out" || fail "after a restart, DescribeClusters image-test: $out"
echo "   restarted on port $port: image-test:1 and the cluster are there"
stop_server "$first"
"$docker" rm "$first" >/dev/null
second=gpupack-test-server2-$tag
start_server "$second"
wait_port "$second" 1
rev=$(definition_revision)
[[ $rev == 1 ]] || fail "a new container on the volume: DescribeTaskDefinition image-test gives revision '$rev'"
out=$(ecs RegisterTaskDefinition '{"family": "image-test", "containerDefinitions": [{"name": "main",
  "image": "busybox", "command": ["sleep", "600"], "memory": 64}]}')
grep -q '"taskDefinitionArn":"[^"]*:task-definition/image-test:2"' <<<"$out" ||
  fail "a new container on the volume registers no revision 2: $out"
echo "   a new container on the volume: image-test:1 is there, the next revision is 2"
stop_server "$second"
echo "deploy_image: all checks passed in $((SECONDS - started)) s"
