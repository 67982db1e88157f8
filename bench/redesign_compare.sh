#!/usr/bin/env bash
# redesign_compare.sh: the same benchmarks on two gpupack binaries, back to back and alternating (old, new, old,
# new, ...), so that the noise of a shared machine shows next to the difference. A benchmark, never a test: it
# prints one table and keeps every run's full output.
#
# Per round and per binary, in this order:
#   1. bench/runtask_load.sh --gpupack BIN: RunTask calls/s and p99 (--instances x 8 GPUs, 64 connections);
#   2. bench/read_under_load.sh BIN: DescribeTasks / DescribeContainerInstances / ListTasks p99 under RunTask load
#      (200 instances, 32 connections), and its RunTask calls/s;
#   3. placement_bench --benchmark_filter='BM_DecideRate/(binpack_gpuMemory|random)': decisions/s over CPU time
#      (10,000 instances x 8 GPUs, half full; about 15 s of setup per run), with OLD_PLACEMENT_BENCH and
#      NEW_PLACEMENT_BENCH (default: BUILD/bench/placement_bench next to each BUILD/gpupack; skipped when missing);
#   4. with --launch: bench/launch_at_scale.sh BIN (2,000 tasks on 64 agents; about 1-2 minutes each).
# The table gives every run's figure (old runs, then new runs), the medians and new/old. The load average before
# each run is printed with it: on a 2-core machine shared with builds it moves every figure.
#
# Usage: OLD_PLACEMENT_BENCH=... NEW_PLACEMENT_BENCH=... bench/redesign_compare.sh OLD_BIN NEW_BIN
#          [--rounds N] [--duration S] [--instances N] [--read-duration S] [--min-time S] [--launch]
#          [--launch-tasks N] [--out DIR]
# Defaults: 2 rounds (old, new, old, new), 10 s of RunTask load, 1,000 instances, 10 s of reads under load,
# GPUPACK_BENCH_MIN_TIME=0.5, no launch (2,000 tasks with --launch), the outputs in a new directory under
# $TMPDIR or /tmp (kept, printed at the end).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
command_line=$(printf '%q ' "$0" "$@")

[[ $# -ge 2 && "$1" != -* && "$2" != -* ]] || { sed -n '2,25p' "$0"; exit 2; }
old_bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
new_bin=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
shift 2
rounds=2
duration=10
instances=1000
read_duration=10
min_time=0.5
launch=0
launch_tasks=2000
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --instances) instances="$2"; shift 2 ;;
    --read-duration) read_duration="$2"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --launch) launch=1; shift ;;
    --launch-tasks) launch_tasks="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "redesign_compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in "$old_bin" "$new_bin"; do [[ -x "$b" ]] || { echo "redesign_compare: no binary at $b" >&2; exit 2; }; done
(( rounds >= 1 && rounds <= 10 )) || { echo "redesign_compare: --rounds must be 1..10" >&2; exit 2; }
old_pb=${OLD_PLACEMENT_BENCH:-$(dirname "$old_bin")/bench/placement_bench}
new_pb=${NEW_PLACEMENT_BENCH:-$(dirname "$new_bin")/bench/placement_bench}
placement=1
[[ -x "$old_pb" && -x "$new_pb" ]] || { placement=0; echo "redesign_compare: no placement_bench pair ($old_pb, $new_pb): skipping decisions/s" >&2; }

[[ -n "$out" ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/gpupack-redesign-compare.XXXXXX")
mkdir -p "$out"
results="$out/results.txt"  # "metric side round value load1"
: >"$results"
load1() { cut -d' ' -f1 /proc/loadavg; }
record() { echo "$1 $2 $3 ${4:--} $5" >>"$results"; }

run_one() {  # run_one SIDE ROUND BIN PLACEMENT_BENCH
  local side=$1 round=$2 bin=$3 pb=$4 f l
  f="$out/runtask_load.$side.$round.txt"; l=$(load1)
  "$here/runtask_load.sh" --gpupack "$bin" --duration "$duration" --instances "$instances" >"$f" 2>&1 || echo "runtask_load failed: $f" >&2
  record runtask_calls_per_s "$side" "$round" "$(sed -n 's/^calls .*= \([0-9.]*\) calls\/s.*/\1/p' "$f")" "$l"
  record runtask_p99_ms "$side" "$round" "$(sed -n 's/^latency (ms) .* p99 \([0-9.]*\) .*/\1/p' "$f")" "$l"

  f="$out/read_under_load.$side.$round.txt"; l=$(load1)
  "$here/read_under_load.sh" "$bin" --duration "$read_duration" >"$f" 2>&1 || echo "read_under_load failed: $f" >&2
  record loaded_runtask_calls_per_s "$side" "$round" "$(sed -n 's/^RunTask .*= \([0-9.]*\) calls\/s.*/\1/p' "$f")" "$l"
  record loaded_runtask_p99_ms "$side" "$round" "$(sed -n 's/^RunTask .* p99 \([0-9.]*\) ms .*/\1/p' "$f")" "$l"
  for op in DescribeTasks DescribeContainerInstances ListTasks; do
    # the p99 column of the op's row in the "loaded" block, then in the "quiet" block
    record "${op}_p99_ms_loaded" "$side" "$round" "$(awk -v op="$op" '/^ loaded/ { b = 1 } /^ quiet/ { b = 2 } b == 1 && $1 == op { print $6 }' "$f")" "$l"
    record "${op}_p99_ms_quiet" "$side" "$round" "$(awk -v op="$op" '/^ loaded/ { b = 1 } /^ quiet/ { b = 2 } b == 2 && $1 == op { print $6 }' "$f")" "$l"
  done

  if (( placement )); then
    f="$out/placement.$side.$round.json"; l=$(load1)
    GPUPACK_BENCH_MIN_TIME=$min_time "$pb" --benchmark_filter='BM_DecideRate/(binpack_gpuMemory|random)' \
      --benchmark_out="$f" --benchmark_out_format=json >"$out/placement.$side.$round.txt" 2>&1 || echo "placement_bench failed: $f" >&2
    for c in binpack_gpuMemory random; do
      record "decisions_per_s_$c" "$side" "$round" \
        "$(jq -r --arg n "BM_DecideRate/$c" '.benchmarks[] | select(.name == $n or (.name | startswith($n + "/"))) | .["decisions/s"] | floor' "$f" 2>/dev/null)" "$l"
    done
  fi

  if (( launch )); then
    f="$out/launch_at_scale.$side.$round.txt"; l=$(load1)
    "$here/launch_at_scale.sh" "$bin" --tasks "$launch_tasks" >"$f" 2>&1 || echo "launch_at_scale failed: $f" >&2
    record launch_all_running_s "$side" "$round" "$(sed -n 's/^all RUNNING *\([0-9.]*\) s from.*/\1/p' "$f")" "$l"
    record launch_calls_per_s "$side" "$round" "$(sed -n 's/^launch .*= \([0-9.]*\) RunTask calls\/s.*/\1/p' "$f")" "$l"
  fi
}

t_start=$(date +%s)
for ((round = 1; round <= rounds; round++)); do
  echo "round $round of $rounds: old ($(load1) load)" >&2
  run_one old "$round" "$old_bin" "$old_pb"
  echo "round $round of $rounds: new ($(load1) load)" >&2
  run_one new "$round" "$new_bin" "$new_pb"
done

cat <<EOF
gpupack redesign: before and after ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(( $(date +%s) - t_start )) s)
command          $command_line
machine          $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)
old              $old_bin ($("$old_bin" --version 2>/dev/null | head -1), built $(date -u -r "$old_bin" +%Y-%m-%dT%H:%MZ))
new              $new_bin ($("$new_bin" --version 2>/dev/null | head -1), built $(date -u -r "$new_bin" +%Y-%m-%dT%H:%MZ))
placement_bench  $( (( placement )) && echo "$old_pb / $new_pb, GPUPACK_BENCH_MIN_TIME=$min_time" || echo skipped)
order            old, new alternating, $rounds round(s); runtask_load ${duration} s x $instances instances; reads ${read_duration} s
outputs          $out

EOF
awk -f "$here/compare_table.awk" "$results"
echo
echo "calls/s and decisions/s: higher is better; *_ms and *_s: lower is better. value@load: the 1-minute load average when the run began."
