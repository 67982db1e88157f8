#!/usr/bin/env bash
# scripts/up.sh: installs what is needed, builds gpupack and runs `gpupack up`: a local cluster on loopback with
# its embedded SQLite database (the banner names where). It prints the endpoint and the environment an AWS SDK
# or the AWS CLI needs. Ctrl-C stops it. Arguments go to `gpupack up` (see `build/gpupack up --help`).
#
# Environment: GPUPACK_BUILD_DIR, the build directory (default: build).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scripts/install-deps.sh --no-node

build=${GPUPACK_BUILD_DIR:-build}
generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S . -B "$build" "${generator[@]}"
cmake --build "$build" --target gpupack --parallel "$(nproc)"

exec "$build/gpupack" up "$@"
