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
    share/doc/gpupack/examples/server.env.example share/doc/gpupack/examples/agent.env.example; do
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
echo "install_package: all checks passed"
