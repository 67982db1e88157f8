#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets of tests/fuzz/ with clang (ASan + UBSan, GPUPACK_FUZZ=ON) in a build
# directory of their own and runs each for a bounded time, then prints a summary table (executions, exec/s,
# crashes per target), also written to <build>/fuzz-summary.txt. Not part of the default test run; the crashes
# it ever found are replayed by fuzz_regressions_test (tests/fuzz/regressions/<target>/).
#
# Usage: scripts/fuzz.sh [target...]        targets: query codec operations http channel sigv4 protocol ecs_model (default: all)
# Environment:
#   FUZZ_SECONDS     seconds per target (default: 60), passed as -max_total_time
#   FUZZ_BUILD_DIR   build directory, relative to the repository root (default: build-fuzz)
#   FUZZ_CXX         the clang++ to use (default: clang++, else clang++-14)
#   FUZZ_JOBS        build parallelism (default: nproc)
#   FUZZ_KEEP_GOING  1 = keep fuzzing after a crash (libFuzzer -fork=1 -ignore_crashes=1); default: stop at the
#                    first crash of a target, as plain libFuzzer does
#   FUZZ_ARGS        extra libFuzzer flags, e.g. "-max_len=16384"
#
# Per target: the corpus grows in <build>/corpus/<target>/ (seeded from tests/fuzz/corpus/<target>/, which is
# only read), crash/timeout/oom inputs land in <build>/artifacts/<target>/, the log in <build>/logs/<target>.log.
# Reproduce a crash: <build>/fuzz/fuzz_<target> <artifact>; minimize it: add -minimize_crash=1 -runs=10000.
# Exit status: 0 when no target crashed, 1 otherwise.
set -euo pipefail

cd "$(dirname "$0")/.."
build=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-$(nproc)}
all_targets=(query codec operations http channel sigv4 protocol ecs_model)
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done

cxx=${FUZZ_CXX:-}
if [[ -z $cxx ]]; then
  for c in clang++ clang++-14; do command -v "$c" >/dev/null && { cxx=$c; break; }; done
fi
[[ -n $cxx ]] || { echo "fuzz.sh: clang++ not found (apt-get install -y clang-14 libclang-rt-14-dev)" >&2; exit 2; }

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Debug with -O1: assertions stay on (nlohmann's and ours), the code is still fast enough to fuzz.
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DGPUPACK_FUZZ=ON -DGPUPACK_BUILD_TESTS=ON -DGPUPACK_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --parallel "$jobs" --target "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

summary="$build/fuzz-summary.txt"
rows=()
any_crash=0
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t" artifacts="$build/artifacts/$t" log="$build/logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "$build/logs"
  before=$(find "$artifacts" -type f | wc -l)
  flags=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
         -artifact_prefix="$artifacts/")
  [[ -f tests/fuzz/dict/$t.dict ]] && flags+=(-dict="tests/fuzz/dict/$t.dict")
  [[ ${FUZZ_KEEP_GOING:-0} == 1 ]] && flags+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  # shellcheck disable=SC2206
  flags+=(${FUZZ_ARGS:-})
  echo "== fuzz_$t: ${seconds}s (log: $log)"
  start=$(date +%s)
  rc=0
  "$build/fuzz/fuzz_$t" "${flags[@]}" "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - start ))
  # Plain runs end with stat:: lines; fork runs report "#N: ... exec/s: E oom/timeout/crash: a/b/c ...".
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: [0-9]*' "$log" | tail -1 | awk '{print $2}' || true)
  if [[ -z $execs ]]; then
    last=$(grep -E '^#[0-9]+:.*exec/s' "$log" | tail -1 || true)
    [[ -z $last ]] && last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    execs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")
    rate=$(grep -oE 'exec/s: [0-9]+' <<<"$last" | awk '{print $2}' || true)
  fi
  execs=${execs:-0}
  [[ -z $rate || $rate == 0 ]] && rate=$(( elapsed > 0 ? execs / elapsed : execs ))
  crashes=$(( $(find "$artifacts" -type f | wc -l) - before ))
  note=""
  if (( crashes > 0 )) || { [[ $rc != 0 ]] && [[ ${FUZZ_KEEP_GOING:-0} != 1 ]]; }; then
    any_crash=1
    (( crashes == 0 )) && crashes="?"
    note="rc=$rc, see $log"
  fi
  rows+=("$(printf '%-12s %8s %12s %8s %8s  %s' "$t" "${elapsed}s" "$execs" "$rate" "$crashes" "$note")")
done

{
  echo "gpupack fuzzing summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $cxx, ${seconds}s per target, $(nproc) cores)"
  printf '%-12s %8s %12s %8s %8s  %s\n' target time executions exec/s crashes note
  printf '%s\n' "${rows[@]}"
  echo "artifacts: $build/artifacts/<target>/   corpora: $build/corpus/<target>/   logs: $build/logs/"
} | tee "$summary"
exit "$any_crash"
