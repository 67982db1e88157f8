#!/usr/bin/env bash
# scripts/package.sh [OUT_DIR]: the Debian package to ship, in one command. Installs the build dependencies
# (scripts/install-deps.sh --no-node: skipped when present), then a Release build of the gpupack binary alone (no
# tests, no benchmarks) in build-release/ (or $GPUPACK_PACKAGE_BUILD_DIR), then `cpack -G DEB`: the binary
# stripped, the systemd units, the sysusers.d/tmpfiles.d entries, the Prometheus configuration and alert rules,
# the Grafana dashboard and the docs, with prefix /usr (docs/operations.md "Install"). The .deb lands in OUT_DIR
# (default: the build directory) and its path is the last line printed. The developer build (build/,
# RelWithDebInfo with tests) is not touched.
#   JOBS=N scripts/package.sh     compile with N jobs (default: all cores)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPUPACK_PACKAGE_BUILD_DIR:-$root/build-release}
out=$(mkdir -p "${1:-$build}" && cd "${1:-$build}" && pwd)

"$root/scripts/install-deps.sh" --no-node
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUPACK_BUILD_TESTS=OFF \
  -DGPUPACK_BUILD_BENCH=OFF
cmake --build "$build" --target gpupack -j "${JOBS:-$(nproc)}"
(cd "$build" && cpack -G DEB -B "$out")
rm -rf "$out/_CPack_Packages"
ls "$out"/gpupack_*.deb
