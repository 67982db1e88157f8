#!/usr/bin/env bash
# systemd_test.sh BUILD_DIR SOURCE_DIR CPACK: the Debian package's gpupack-server.service under a live systemd,
# as PID 1 of a container on the engine that GPUPACK_DOCKER_SOCKET names (the install test only checks the units
# offline, and PID 1 of a CI machine is not systemd).
#   1. The Debian package of this build (`cpack -G DEB`) and a Debian 12 base with its dependencies and
#      systemd + systemd-sysv (debootstrap, cached as for image_test.sh: tests/deploy/lib.sh).
#   2. An image of that base with the package installed by dpkg (BuildKit, `--network none`): its postinst
#      creates the gpupack user with systemd-sysusers, as on a host. A drop-in adds only an ExecStopPost= (with
#      full privileges, outside the sandbox) that records how the main process ended.
#   3. The container with /sbin/init as PID 1 until `systemctl is-system-running` says running (or degraded),
#      then `systemctl start gpupack-server`: the unit is active, serves /healthz on its default 127.0.0.1:8080,
#      its main process runs as gpupack with no capabilities and no_new_privs in a mount namespace of its own,
#      `systemd-analyze security gpupack-server.service` rates it <= 3.0 there, and `systemctl stop` ends it
#      cleanly (SIGTERM, then the process exits with status 0: not killed by the signal; result success).
# The container is not --privileged: that asks the kernel for every capability, and an engine that runs without
# CAP_SYS_RESOURCE (as in CI's VM) cannot grant it. systemd needs less: all capabilities but that one, no
# seccomp profile, /run and /run/lock as tmpfs and the cgroup tree writable.
# Exits 77 (ctest: skipped) when GPUPACK_DOCKER_SOCKET is not set. Registered as deploy_systemd
# (tests/CMakeLists.txt, label docker).
set -euo pipefail

# shellcheck source=tests/deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
deploy_args "$@"
deploy_engine_or_skip dpkg-deb tar sha256sum

tag=t$$-$RANDOM
work=$(mktemp -d /tmp/gpupack-systemd-test.XXXXXX)
image=gpupack-test/systemd:$tag
container=gpupack-test-systemd-$tag
cleanup() {
  "$docker" rm -f "$container" >/dev/null 2>&1 || true
  "$docker" rmi "$image" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step "1. the package, and a Debian 12 base with its dependencies and systemd (debootstrap, cached)"
deploy_package "$work" "$cpack"
deploy_base "$work" systemd systemd-sysv

step "2. the package installed on that base by dpkg, with no network"
mkdir -p "$work/context"
cp "$deb" "$work/context/gpupack.deb"
cat >"$work/context/Dockerfile" <<EOF
FROM $base_image
COPY gpupack.deb /tmp/gpupack.deb
RUN dpkg -i /tmp/gpupack.deb && rm /tmp/gpupack.deb && systemctl mask getty@tty1.service console-getty.service \
 && mkdir -p /etc/systemd/system/gpupack-server.service.d \
 && printf '[Service]\nExecStopPost=+/bin/sh -c "echo \$\$EXIT_CODE \$\$EXIT_STATUS > /run/gpupack-server.exit"\n' \
      > /etc/systemd/system/gpupack-server.service.d/test-exit.conf
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
EOF
DOCKER_BUILDKIT=1 "$docker" build --network none --progress plain -t "$image" "$work/context" >"$work/build.log" 2>&1 || {
  tail -30 "$work/build.log"
  fail "docker build of the systemd image failed"
}

# in_container COMMAND...: runs COMMAND as root in the container.
in_container() { "$docker" exec "$container" "$@"; }
journal() { in_container journalctl --no-pager -n 30 "$@" 2>&1 || true; }

step "3. systemd as PID 1, then gpupack-server.service"
"$docker" run -d --name "$container" --network none --cap-add ALL --cap-drop SYS_RESOURCE \
  --security-opt seccomp=unconfined --security-opt apparmor=unconfined --tmpfs /run --tmpfs /run/lock \
  -v /sys/fs/cgroup:/sys/fs/cgroup:rw -e container=docker "$image" >"$work/run.log" 2>&1 ||
  fail "the engine cannot start a systemd container: $(cat "$work/run.log")"
state=
for _ in $(seq 1 150); do
  state=$(in_container systemctl is-system-running 2>/dev/null || true)
  [[ $state == running || $state == degraded ]] && break
  [[ $("$docker" inspect -f '{{.State.Running}}' "$container") == true ]] ||
    fail "the container's systemd exited: $("$docker" logs "$container" 2>&1 | tail -20)"
  sleep 0.2
done
[[ $state == running || $state == degraded ]] ||
  fail "systemd is '$state': $(in_container systemctl --failed --no-pager 2>&1)"
echo "   PID 1: $(in_container cat /proc/1/comm), system $state $(in_container systemctl --version | sed -n 1p)"
in_container systemctl start gpupack-server.service || fail "systemctl start gpupack-server: $(journal -u gpupack-server)"
health=
for _ in $(seq 1 100); do
  # bash's /dev/tcp: the minimal base has no curl, and the container no network but its loopback.
  health=$(in_container bash -c 'exec 3<>/dev/tcp/127.0.0.1/8080 && printf "GET /healthz HTTP/1.0\r\n\r\n" >&3 && cat <&3' 2>/dev/null || true)
  [[ $health == HTTP/1.[01]" 200 "* ]] && break
  sleep 0.1
done
[[ $health == HTTP/1.[01]" 200 "* ]] || fail "/healthz on 127.0.0.1:8080: '$health'; $(journal -u gpupack-server)"
[[ $(in_container systemctl is-active gpupack-server.service) == active ]] || fail "gpupack-server is not active"
pid=$(in_container systemctl show -p MainPID --value gpupack-server.service)
[[ $pid =~ ^[1-9][0-9]*$ ]] || fail "gpupack-server has no main PID: '$pid'"
user=$(in_container stat -c %U "/proc/$pid")
status=$(in_container grep -E '^(Uid|CapEff|NoNewPrivs):' "/proc/$pid/status" | tr -s '\t ' ' ')
[[ $user == gpupack ]] || fail "gpupack-server runs as $user"
grep -q '^Uid: 0 ' <<<"$status" && fail "gpupack-server runs as root: $status"
grep -q '^CapEff: 0000000000000000$' <<<"$status" || fail "gpupack-server has capabilities: $status"
grep -q '^NoNewPrivs: 1$' <<<"$status" || fail "gpupack-server may gain privileges: $status"
[[ $(in_container readlink "/proc/$pid/ns/mnt") != $(in_container readlink /proc/1/ns/mnt) ]] ||
  fail "gpupack-server shares PID 1's mount namespace (ProtectSystem= and PrivateTmp= would need one)"
echo "   gpupack-server.service active, /healthz 200, main PID $pid runs as $user ($(tr '\n' ' ' <<<"$status"))"
out=$(in_container systemd-analyze security --no-pager --threshold=30 gpupack-server.service 2>&1) ||
  fail "systemd-analyze security rates gpupack-server.service above 3.0 live: $(grep -v '✓' <<<"$out")"
score=$(grep -o 'Overall exposure level for [^:]*: [0-9.]*' <<<"$out" | awk '{print $NF}')
[[ -n $score ]] || fail "no exposure level: $out"
echo "   systemd-analyze security gpupack-server.service (live): $score (at most 3.0)"
in_container systemctl stop gpupack-server.service
# How the main process ended, as systemd hands it to ExecStopPost= (the image's test drop-in writes it to /run:
# systemd forgets it once the unit is inactive, and counts death by SIGTERM as a clean stop too).
exit_state=$(in_container cat /run/gpupack-server.exit 2>&1 || true)
[[ $exit_state == "exited 0" ]] ||
  fail "gpupack-server after systemctl stop: '$exit_state' (want 'exited 0'); $(journal -u gpupack-server)"
[[ $(in_container systemctl show -p Result --value gpupack-server.service) == success ]] ||
  fail "gpupack-server's result after systemctl stop is not success"
logs=$(journal -u gpupack-server)
grep -q 'shutting down' <<<"$logs" || fail "gpupack-server did not log its shutdown: $logs"
echo "   systemctl stop: SIGTERM, exited 0, result success"
echo "deploy_systemd: all checks passed in $((SECONDS - started)) s"
