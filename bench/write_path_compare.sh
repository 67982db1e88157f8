#!/usr/bin/env bash
# write_path_compare.sh: the server's write path on two gpupack binaries, back to back and alternating (old, new,
# old, new, ...), so that the noise of a shared machine shows next to the difference. Made for the move of the
# writer from a lock taken on the HTTP threads to one writer thread fed by a queue: RunTask must be no worse,
# and Describe p99 and the agents' heartbeat ack p99 under RunTask load should be better. A benchmark, never a
# test: it prints one table and keeps every run's full output.
#
# Per round and per binary, in this order:
#   1. bench/runtask_load.sh --gpupack BIN: RunTask alone, calls/s and p99 (--agents instances x 8 GPUs registered
#      through the API, no agents, --connections connections, --duration s);
#   2. bench/write_path_load.sh BIN: a fresh server with --agents simulated agents connected (bench/agent_swarm
#      in serve mode: heartbeats timed send -> ack, assigns acked and reported RUNNING), then for --duration s
#      at once wrk RunTask at full rate on the agents' cluster and the Describe loops of read_under_load.mjs:
#      RunTask calls/s and p99, DescribeTasks / DescribeContainerInstances / ListTasks p99, heartbeat ack
#      p50/p99/max, assign -> RUNNING report acked p99. The tasks stay RUNNING (capacity 1,024 per agent, printed
#      in each run's output; a placement failure there means the fleet filled).
# The same agent_swarm serves both binaries (--swarm; default: bench/agent_swarm next to NEW_BIN, else next to
# OLD_BIN), so only the server differs. The table gives every run's figure (old runs, then new runs) with the
# 1-minute load average when the run began, the medians and new/old. Loopback only; every process a run starts
# is stopped when it ends (the scripts' traps).
#
# Usage: bench/write_path_compare.sh OLD_BIN NEW_BIN [--rounds N] [--duration S] [--agents N]
#          [--heartbeat-ms MS] [--connections N] [--swarm PATH] [--out DIR]
# Defaults: 2 rounds (old, new, old, new), 15 s of load per phase, 1,000 agents, the heartbeat interval of the
# server's welcome (5,000 ms: 200 heartbeats/s from 1,000 agents), 64 wrk connections, the outputs in a new
# directory under $TMPDIR or /tmp (kept, printed at the end). A round takes about 2 x (2 x duration + the
# agents' registration, 20-60 s for 1,000) plus the servers' starts.
# Needs what bench/runtask_load.sh and bench/write_path_load.sh need: curl, wrk, node 20, agent_swarm.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
command_line=$(printf '%q ' "$0" "$@")

[[ $# -ge 2 && "$1" != -* && "$2" != -* ]] || { sed -n '2,28p' "$0"; exit 2; }
old_bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
new_bin=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
shift 2
rounds=2
duration=15
agents=1000
heartbeat_ms=0
connections=64
swarm=""
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --agents) agents="$2"; shift 2 ;;
    --heartbeat-ms) heartbeat_ms="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --swarm) swarm="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "write_path_compare: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for b in "$old_bin" "$new_bin"; do [[ -x "$b" ]] || { echo "write_path_compare: no binary at $b" >&2; exit 2; }; done
(( rounds >= 1 && rounds <= 10 )) || { echo "write_path_compare: --rounds must be 1..10" >&2; exit 2; }
(( duration >= 1 && duration <= 300 )) || { echo "write_path_compare: --duration must be 1..300" >&2; exit 2; }
if [[ -z "$swarm" ]]; then
  swarm="$(dirname "$new_bin")/bench/agent_swarm"
  [[ -x "$swarm" ]] || swarm="$(dirname "$old_bin")/bench/agent_swarm"
fi
[[ -x "$swarm" ]] || { echo "write_path_compare: no agent_swarm (build the target agent_swarm, or pass --swarm PATH)" >&2; exit 2; }
swarm=$(cd "$(dirname "$swarm")" && pwd)/$(basename "$swarm")

[[ -n "$out" ]] || out=$(mktemp -d "${TMPDIR:-/tmp}/gpupack-write-path-compare.XXXXXX")
mkdir -p "$out"
results="$out/results.txt"  # "metric side round value load1"
: >"$results"
load1() { cut -d' ' -f1 /proc/loadavg; }
record() { echo "$1 $2 $3 ${4:--} $5" >>"$results"; }
hb_args=()
(( heartbeat_ms > 0 )) && hb_args=(--heartbeat-ms "$heartbeat_ms")

run_one() {  # run_one SIDE ROUND BIN
  local side=$1 round=$2 bin=$3 f l
  f="$out/runtask_load.$side.$round.txt"; l=$(load1)
  "$here/runtask_load.sh" --gpupack "$bin" --duration "$duration" --instances "$agents" --connections "$connections" \
    >"$f" 2>&1 || echo "runtask_load failed: $f" >&2
  record runtask_alone_calls_per_s "$side" "$round" "$(sed -n 's/^calls .*= \([0-9.]*\) calls\/s.*/\1/p' "$f")" "$l"
  record runtask_alone_p99_ms "$side" "$round" "$(sed -n 's/^latency (ms) .* p99 \([0-9.]*\) .*/\1/p' "$f")" "$l"

  f="$out/write_path_load.$side.$round.txt"; l=$(load1)
  "$here/write_path_load.sh" "$bin" --swarm "$swarm" --agents "$agents" --duration "$duration" \
    --connections "$connections" "${hb_args[@]}" >"$f" 2>&1 || echo "write_path_load failed: $f" >&2
  local key
  for key in runtask_calls_per_s runtask_p99_ms DescribeTasks_p99_ms DescribeContainerInstances_p99_ms ListTasks_p99_ms \
             heartbeat_ack_p50_ms heartbeat_ack_p99_ms heartbeat_ack_max_ms running_ack_p99_ms placement_failures; do
    record "agents_$key" "$side" "$round" "$(awk -v k="result.$key" '$1 == k { print $2 }' "$f")" "$l"
  done
}

t_start=$(date +%s)
for ((round = 1; round <= rounds; round++)); do
  echo "round $round of $rounds: old ($(load1) load)" >&2
  run_one old "$round" "$old_bin"
  echo "round $round of $rounds: new ($(load1) load)" >&2
  run_one new "$round" "$new_bin"
done

cat <<EOF
gpupack write path: old and new binaries back to back ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(( $(date +%s) - t_start )) s)
command          $command_line
machine          $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)
old              $old_bin ($("$old_bin" --version 2>/dev/null | head -1), built $(date -u -r "$old_bin" +%Y-%m-%dT%H:%MZ))
new              $new_bin ($("$new_bin" --version 2>/dev/null | head -1), built $(date -u -r "$new_bin" +%Y-%m-%dT%H:%MZ))
agents           $swarm (the same for both), $agents agents, heartbeat every $( (( heartbeat_ms > 0 )) && echo "$heartbeat_ms ms" || echo "interval of the server's welcome")
order            old, new alternating, $rounds round(s); each: runtask_load ${duration} s ($agents instances, no agents), then write_path_load ${duration} s ($agents agents); $connections wrk connections
outputs          $out

EOF
awk -f "$here/compare_table.awk" "$results"
echo
echo "runtask_alone_*: RunTask with no agents; agents_*: with the agents connected, RunTask, reads and heartbeats at once."
echo "calls/s: higher is better; *_ms: lower is better; placement_failures should be 0 (else the fleet filled)."
echo "value@load: the 1-minute load average when the run began."
