#!/usr/bin/env bash
# install_test.sh BUILD_DIR CMAKE CPACK: the operator's install, from the test build's own binary (nothing is
# rebuilt), in scratch roots only; it never touches the host's /usr, /etc or systemd.
#   1. `cmake --install --strip` with DESTDIR and prefix /usr/local: every file is there, the units point at the
#      prefix, the binary is stripped, and the installed binary runs (`gpupack agent --check` with fake GPUs).
#   2. `cpack -G DEB`: the package's control data (name, library dependencies from dpkg-shlibdeps, maintainer
#      scripts), then `dpkg-deb -x` into a scratch root and the same file checks for prefix /usr.
#   3. In that root: `systemd-analyze verify` passes on the server and agent units with no message at all, and
#      `systemd-analyze security --offline` rates the server <= 3.0 and the agent <= 5.0.
#   4. In that root: `systemd-sysusers` creates the gpupack user from the package's sysusers.d entry, and
#      `systemd-tmpfiles` the state and MPS directories from its tmpfiles.d entry.
#   5. The units' ExecStart= lines, expanded as systemd does (${VAR} one word, $VAR split into words) with the
#      units' Environment= defaults plus an operator's overrides, run from that root: the server starts for
#      real on 127.0.0.1:0 against a scratch database (its banner shows GPUPACK_EXTRA_FLAGS arrived), answers
#      /healthz and stops on SIGTERM with status 0; the agent's command line parses (`--check` through the
#      agent's GPUPACK_EXTRA_FLAGS: the checklist runs, status 0 or 1, never 2 for bad usage).
# Registered with ctest as install_package (tests/CMakeLists.txt); CI installs systemd, dpkg-dev and file for it
# (scripts/install-deps.sh).
set -euo pipefail
# fail, step and deploy_package (cpack -G DEB of this build): shared with the container tests.
# shellcheck source=tests/deploy/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../deploy/lib.sh"

build=${1:?usage: install_test.sh BUILD_DIR CMAKE CPACK}
cmake=${2:-cmake}
cpack=${3:-cpack}
build=$(cd "$build" && pwd)

work=$(mktemp -d /tmp/gpupack-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT

for tool in systemd-analyze systemd-sysusers systemd-tmpfiles dpkg-deb dpkg-shlibdeps file readelf; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/install-deps.sh installs systemd, dpkg-dev and file)"
done

# check_tree ROOT PREFIX: the files an install must have under ROOT/PREFIX, and units that run PREFIX/bin/gpupack.
check_tree() {
  local root=$1 prefix=$2 f
  for f in bin/gpupack bin/gpupack-monitor lib/systemd/system/gpupack-server.service \
    lib/systemd/system/gpupack-agent.service lib/systemd/system/gpupack-mps.service lib/sysusers.d/gpupack.conf lib/tmpfiles.d/gpupack.conf \
    share/doc/gpupack/README.md share/doc/gpupack/docs/operations.md share/doc/gpupack/docs/api.md \
    share/doc/gpupack/examples/server.env.example share/doc/gpupack/examples/agent.env.example \
    share/gpupack/prometheus/prometheus.yml share/gpupack/prometheus/gpupack-alerts.yml \
    share/gpupack/grafana/gpupack.json; do
    [[ -f $root$prefix/$f ]] || fail "$prefix/$f is missing from the install"
  done
  [[ -x $root$prefix/bin/gpupack ]] || fail "$prefix/bin/gpupack is not executable"
  local unit
  for unit in server agent; do
    grep -q "^ExecStart=$prefix/bin/gpupack $unit " "$root$prefix/lib/systemd/system/gpupack-$unit.service" ||
      fail "gpupack-$unit.service does not run $prefix/bin/gpupack $unit"
    grep -q "^Documentation=file://$prefix/share/doc/gpupack/docs/operations.md" \
      "$root$prefix/lib/systemd/system/gpupack-$unit.service" || fail "gpupack-$unit.service: Documentation= is not $prefix"
  done
  if readelf -S "$root$prefix/bin/gpupack" | grep -q '\.debug_info'; then
    fail "$prefix/bin/gpupack is not stripped"
  fi
  local size
  size=$(stat -c %s "$root$prefix/bin/gpupack")
  ((size < 40 * 1024 * 1024)) || fail "$prefix/bin/gpupack is $size bytes"
  echo "   $prefix: all files present, units run $prefix/bin/gpupack, binary stripped ($size bytes)"
}

step "1. cmake --install --strip into a scratch root (prefix /usr/local)"
DESTDIR="$work/local" "$cmake" --install "$build" --prefix /usr/local --strip >"$work/install.log" ||
  {
    cat "$work/install.log"
    fail "cmake --install failed"
  }
check_tree "$work/local" /usr/local
bin="$work/local/usr/local/bin/gpupack"
"$bin" --version | grep -q '^0\.' || fail "the installed binary does not run: $("$bin" --version 2>&1)"
out=$("$bin" agent --check --gpus fake:2x22587 --mps-pipe-dir "$work/mps" --state-dir "$work/state") ||
  fail "agent --check with fake GPUs failed: $out"
grep -q 'fake GPUs' <<<"$out" || fail "agent --check does not say fake GPUs: $out"
grep -q '0 failed' <<<"$out" || fail "agent --check: $out"
set +e
out=$("$bin" agent --check --gpus fake:1x1000 --runtime docker --docker-socket "$work/no-engine.sock" \
  --mps-pipe-dir "$work/mps" --state-dir "$work/state")
rc=$?
set -e
((rc == 1)) || fail "agent --check without a docker engine exited $rc, not 1: $out"
grep -q 'FAIL  docker engine' <<<"$out" || fail "agent --check without an engine: $out"
echo "   installed binary runs; agent --check: ok with fake GPUs, exit 1 and FAIL without a docker engine"

step "2. cpack -G DEB, then dpkg-deb -x into a scratch root"
deploy_package "$work" "$cpack"
info=$(dpkg-deb -I "$deb")
for want in 'Package: gpupack' 'libsqlite3-0' 'libspdlog' 'libssl3' 'libstdc++6' ' postinst ' ' prerm ' ' postrm '; do
  grep -q -- "$want" <<<"$info" || fail "the package's control data lacks '$want':
$info"
done
root="$work/root"
dpkg-deb -x "$deb" "$root"
check_tree "$root" /usr
[[ -z $(find "$root" -path "$root/usr" -prune -o -mindepth 1 -maxdepth 1 -print) ]] ||
  fail "the package installs outside /usr: $(find "$root" -mindepth 1 -maxdepth 1)"

step "3. systemd-analyze verify and security in the package's root"
# verify resolves the units' dependencies (sysinit.target, multi-user.target, ...) in the root: give it systemd's
# own targets and slices, as a real root has them.
for f in /lib/systemd/system/*.target /lib/systemd/system/*.slice; do
  cp -n "$f" "$root/usr/lib/systemd/system/"
done
for unit in gpupack-server.service gpupack-agent.service; do
  out=$(systemd-analyze verify --root="$root" "$root/usr/lib/systemd/system/$unit" 2>&1) ||
    fail "systemd-analyze verify $unit: $out"
  [[ -z $out ]] || fail "systemd-analyze verify $unit says: $out"
done
echo "   systemd-analyze verify: gpupack-server.service and gpupack-agent.service pass without a message"
# security --threshold is in tenths: the command fails when the exposure is above it.
check_exposure() {
  local unit=$1 threshold=$2 out score
  out=$(systemd-analyze security --offline=true --root="$root" --threshold="$threshold" "$unit" 2>&1) ||
    fail "$unit is rated above $((threshold / 10)).$((threshold % 10)):
$(grep -v '✓' <<<"$out")"
  score=$(grep -o 'Overall exposure level for [^:]*: [0-9.]*' <<<"$out" | awk '{print $NF}')
  [[ -n $score ]] || fail "no exposure level for $unit: $out"
  echo "   systemd-analyze security $unit: $score (at most $((threshold / 10)).$((threshold % 10)))"
}
check_exposure gpupack-server.service 30
check_exposure gpupack-agent.service 50

step "4. sysusers.d and tmpfiles.d entries applied in the package's root"
mkdir -p "$root/etc"
systemd-sysusers --root="$root" gpupack.conf
line=$(grep '^gpupack:' "$root/etc/passwd") || fail "systemd-sysusers created no gpupack user: $(cat "$root/etc/passwd")"
[[ $line == *:/var/lib/gpupack:/usr/sbin/nologin ]] || fail "the gpupack user: $line"
grep -q '^gpupack:' "$root/etc/group" || fail "systemd-sysusers created no gpupack group"
systemd-tmpfiles --root="$root" --create gpupack.conf
uid=$(cut -d: -f3 <<<"$line")
[[ $(stat -c '%u %a' "$root/var/lib/gpupack") == "$uid 750" ]] ||
  fail "/var/lib/gpupack: $(stat -c '%u %a' "$root/var/lib/gpupack"), want $uid 750"
[[ -d $root/var/lib/gpupack-agent && -d $root/run/gpupack-mps/log ]] || fail "tmpfiles made no agent or MPS directories"
echo "   user $line; /var/lib/gpupack owned by it (0750); /var/lib/gpupack-agent and /run/gpupack-mps/log created"
step "5. the units' ExecStart commands, expanded as systemd does, run from the package's root"
# exec_start UNIT VAR=VALUE...: the unit's ExecStart= as words, /usr/bin/gpupack as the root's binary. The
# environment is the unit's Environment= lines, then the overrides (as /etc/gpupack/*.env would give them).
exec_start() {
  local unit=$root/usr/lib/systemd/system/$1 line word name
  shift
  local -A env=()
  while IFS= read -r line; do
    for word in ${line#Environment=}; do env[${word%%=*}]=${word#*=}; done
  done < <(grep '^Environment=' "$unit")
  for word in "$@"; do env[${word%%=*}]=${word#*=}; done
  line=$(grep '^ExecStart=' "$unit")
  cmd=()
  for word in ${line#ExecStart=}; do
    if [[ $word =~ ^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$ ]]; then
      name=${BASH_REMATCH[1]}
      [[ -v env[$name] ]] || fail "$1: ExecStart uses \${$name}, which no Environment= sets"
      cmd+=("${env[$name]}")
    elif [[ $word =~ ^\$([A-Za-z_][A-Za-z0-9_]*)$ ]]; then
      name=${BASH_REMATCH[1]}
      [[ -v env[$name] ]] || fail "$1: ExecStart uses \$$name, which no Environment= sets"
      # shellcheck disable=SC2206  # word splitting is what systemd does with an unbraced $VAR
      cmd+=(${env[$name]})
    elif [[ $word == *'$'* ]]; then
      fail "$1: ExecStart word '$word' is not a whole \${VAR} or \$VAR (this test expands only those)"
    else
      cmd+=("${word/#\/usr\/bin\/gpupack/$root/usr/bin/gpupack}")
    fi
  done
}
exec_start gpupack-server.service GPUPACK_LISTEN=127.0.0.1:0 GPUPACK_DB="$work/server/gpupack.db" \
  GPUPACK_EXTRA_FLAGS="--max-agent-channels 7 --agent-hello-mib 3"
[[ ${cmd[0]} == "$root/usr/bin/gpupack" && ${cmd[1]} == server ]] || fail "gpupack-server.service runs: ${cmd[*]}"
mkdir -p "$work/server"
"${cmd[@]}" >"$work/server/out" 2>&1 &
server_pid=$!
url=
for _ in $(seq 1 300); do
  url=$(grep -o 'ECS API   http://127.0.0.1:[0-9]*' "$work/server/out" | awk '{print $3}' || true)
  [[ -n $url ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n $url ]] || fail "the server unit's command did not start: ${cmd[*]}
$(cat "$work/server/out")"
grep -q 'at most 7 channel connections, 16 MiB send queue each, hello up to 3 MiB' "$work/server/out" ||
  fail "GPUPACK_EXTRA_FLAGS did not reach the server: $(cat "$work/server/out")"
health=$(curl -sf "$url/healthz") || fail "$url/healthz does not answer"
kill -TERM "$server_pid"
rc=0
wait "$server_pid" || rc=$?
((rc == 0)) || fail "the server exited $rc on SIGTERM: $(cat "$work/server/out")"
echo "   gpupack-server.service: ${cmd[*]#"$root"}"
echo "   started on $url (/healthz: $health), took GPUPACK_EXTRA_FLAGS, exit 0 on SIGTERM"

exec_start gpupack-agent.service GPUPACK_EXTRA_FLAGS="--check --metrics-listen 127.0.0.1:0"
[[ ${cmd[0]} == "$root/usr/bin/gpupack" && ${cmd[1]} == agent ]] || fail "gpupack-agent.service runs: ${cmd[*]}"
rc=0
out=$("${cmd[@]}" 2>&1) || rc=$?
((rc == 0 || rc == 1)) || fail "the agent unit's command exited $rc (2: bad usage): ${cmd[*]}
$out"
grep -q 'failed' <<<"$out" || fail "the agent unit's command with --check printed no checklist: $out"
echo "   gpupack-agent.service: ${cmd[*]#"$root"}"
echo "   parses; the checklist ran through GPUPACK_EXTRA_FLAGS (exit $rc)"
echo "install_package: all checks passed"
