#!/usr/bin/env bash
# scripts/test.sh: installs what is needed, builds, and runs every test with ctest (2 in parallel): the
# GoogleTest unit tests, the black-box integration tests and the AWS SDK conformance test. Ends with ctest's
# summary; the exit status is ctest's.
#
# Environment (all optional):
#   GPUPACK_BUILD_DIR    build directory, relative to the repository root (default: build)
#   GPUPACK_BUILD_BENCH  ON also builds the Google Benchmark suites (default: OFF; they are never run here)
#   GPUPACK_TEST_JOBS    ctest parallelism (default: 2)
#   GPUPACK_GPU_TESTS    1 also runs the tests labelled `gpu` (they need an NVIDIA GPU and MPS; CI has none)
# Extra arguments go to ctest, e.g. `scripts/test.sh -L sdk` or `scripts/test.sh -R restart`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
start=$(date +%s)

scripts/install-deps.sh

build=${GPUPACK_BUILD_DIR:-build}
generator=()
[[ -f "$build/CMakeCache.txt" ]] || generator=(-G Ninja)
# ccache hits across checkouts in different folders (CI clones afresh): paths relative to the root.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S . -B "$build" "${generator[@]}" -DGPUPACK_BUILD_TESTS=ON -DGPUPACK_BUILD_BENCH="${GPUPACK_BUILD_BENCH:-OFF}"
cmake --build "$build" --parallel "$(nproc)"
echo "test.sh: built in $(($(date +%s) - start)) s; running ctest"

gpu_filter=(-LE gpu)
if [[ ${GPUPACK_GPU_TESTS:-0} == 1 ]]; then gpu_filter=(); export GPUPACK_GPU_TESTS; fi
ctest --test-dir "$build" --output-on-failure --parallel "${GPUPACK_TEST_JOBS:-2}" "${gpu_filter[@]}" "$@"
