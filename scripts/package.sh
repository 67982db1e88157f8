#!/usr/bin/env bash
# deploy/package.sh [OUT_DIR]: the Debian package to ship. A Release build of the gpupack binary alone (no tests,
# no benchmarks) in build-release/ (or $GPUPACK_PACKAGE_BUILD_DIR), then `cpack -G DEB`: the binary stripped,
# the units, the sysusers.d/tmpfiles.d entries and the docs, with prefix /usr (docs/operations.md "Install").
# The .deb lands in OUT_DIR (default: the build directory). The developer build (build/, RelWithDebInfo with tests) is not
# touched. Needs the build dependencies (scripts/install-deps.sh --no-node) plus dpkg-dev and file.
#   JOBS=N deploy/package.sh     compile with N jobs (default: all cores)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GPUPACK_PACKAGE_BUILD_DIR:-$root/build-release}
out=$(mkdir -p "${1:-$build}" && cd "${1:-$build}" && pwd)

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUPACK_BUILD_TESTS=OFF \
  -DGPUPACK_BUILD_BENCH=OFF
cmake --build "$build" --target gpupack -j "${JOBS:-$(nproc)}"
(cd "$build" && cpack -G DEB -B "$out")
rm -rf "$out/_CPack_Packages"
ls -l "$out"/gpupack_*.deb
