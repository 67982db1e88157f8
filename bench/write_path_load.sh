#!/usr/bin/env bash
# write_path_load.sh: the server's write path while agents are connected: RunTask calls/s and p99 (wrk, durable
# SQLite), Describe p99 and the agents' heartbeat ack p99, all at once, on one gpupack binary. One run of
# bench/write_path_compare.sh (run that to compare two binaries). A benchmark, never a test: it prints figures
# and setup.
#
# It starts `gpupack server` on a fresh database in a temporary directory (--log-level warn; default durability,
# synchronous=FULL), then bench/agent_swarm in serve mode (--serve-s, bench/swarm_serve.h) attached to it:
# --agents simulated agents registered through the API (8 GPUs x 81,559 MiB, 65,536 CPU units, 262,144 MiB
# each), their channels open and welcomed, a heartbeat from each every --heartbeat-ms (default: the interval the
# server's welcome names, 5,000 ms) timed from send to ack; every assign is acked and reported RUNNING, so the
# tasks hold their reservation and the state grows as in bench/runtask_load.sh (nothing stops them). It registers
# one small shared task definition (64 CPU units, 128 MiB, nvidiaMps 256 MiB: 1,024 per agent, bound by CPU, so
# 1,024,000 tasks on 1,000 agents), places one task, then for --duration seconds at once:
#   - wrk drives RunTask (count 1, bench/runtask_load.lua) on the agents' cluster from --connections keep-alive
#     connections at full rate; each placed task is also an assign to an agent and a RUNNING report back;
#   - bench/read_under_load.mjs runs its read loops, one call in flight each, paced at one call per
#     --read-interval-ms: DescribeTasks of --batch tasks (from the latest ListTasks page), DescribeContainer-
#     Instances of --batch instances (a window over the agents' instances), ListTasks (first page of 100);
#   - the swarm's measured window (SIGUSR1 at the start, SIGTERM at the end): each heartbeat's send -> ack and
#     each assign -> RUNNING report acked.
# The capacity is printed next to what the run placed; placement failures would mean the fleet filled.
# Everything runs on loopback; every process it starts is stopped on exit (trap), the swarm with SIGTERM, then
# SIGKILL after 30 s.
#
# Needs: curl, wrk (Debian: apt-get install wrk), node 20, bench/agent_swarm (target agent_swarm,
# -DGPUPACK_BUILD_BENCH=ON). Figures: docs/benchmarks.md, "The write path: one writer thread".
#
# Usage: bench/write_path_load.sh [GPUPACK_BIN] [--swarm PATH] [--agents N] [--duration S] [--connections N]
#                                 [--heartbeat-ms MS] [--read-interval-ms MS] [--batch N] [--dir DIR] [--keep]
# Defaults: build-bench/gpupack, the agent_swarm in bench/ next to GPUPACK_BIN, 1,000 agents, 15 s,
# 64 connections, the welcome's heartbeat interval, 20 ms, 10, the database under $TMPDIR or /tmp.
# The last lines are "result.KEY VALUE" for bench/write_path_compare.sh.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
command_line=$(printf '%q ' "$0" "$@")

gpupack="$root/build-bench/gpupack"
swarm=""
agents=1000
duration=15
connections=64
heartbeat_ms=0
read_interval_ms=20
batch=10
parent_dir="${TMPDIR:-/tmp}"
keep=0
task_cpu=64
task_mem=128
task_gpu_mib=256

if [[ $# -gt 0 && "$1" != -* ]]; then gpupack="$1"; shift; fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --swarm) swarm="$2"; shift 2 ;;
    --agents) agents="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --heartbeat-ms) heartbeat_ms="$2"; shift 2 ;;
    --read-interval-ms) read_interval_ms="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --dir) parent_dir="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "write_path_load: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in curl wrk node; do
  command -v "$tool" >/dev/null || { echo "write_path_load: $tool is missing" >&2; exit 2; }
done
[[ -x "$gpupack" ]] || { echo "write_path_load: no gpupack binary at $gpupack (build it, or pass its path)" >&2; exit 2; }
gpupack=$(cd "$(dirname "$gpupack")" && pwd)/$(basename "$gpupack")
[[ -n "$swarm" ]] || swarm="$(dirname "$gpupack")/bench/agent_swarm"
[[ -x "$swarm" ]] || { echo "write_path_load: no agent_swarm at $swarm (cmake --build BUILD --target agent_swarm, or --swarm PATH)" >&2; exit 2; }
if (( duration < 1 || duration > 300 )); then echo "write_path_load: --duration must be 1..300 seconds" >&2; exit 2; fi
if (( agents < 1 || agents > 5000 )); then echo "write_path_load: --agents must be 1..5000" >&2; exit 2; fi

work=$(mktemp -d "$parent_dir/gpupack-write-path.XXXXXX")
db="$work/gpupack.db"
server_pid=""
swarm_pid=""
reader_pid=""
wrk_pid=""
# stop_swarm: SIGTERM ends its window (it prints its figures and disconnects the agents); SIGKILL after 30 s.
stop_swarm() {
  [[ -n "$swarm_pid" ]] || return 0
  kill -TERM "$swarm_pid" 2>/dev/null || true
  for _ in $(seq 300); do kill -0 "$swarm_pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$swarm_pid" 2>/dev/null || true
  wait "$swarm_pid" 2>/dev/null || true
  swarm_pid=""
}
cleanup() {
  for p in "$reader_pid" "$wrk_pid"; do
    [[ -n "$p" ]] && { kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; }
  done
  stop_swarm
  bench_stop_pid "$server_pid"
  if (( keep )); then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- server and agents --------------------------------------------------------------------------------------------
server_args=(server --listen 127.0.0.1:0 --db "$db" --log-level warn)
bench_start_server write_path_load

swarm_args=(--server "$endpoint" --server-pid "$server_pid" --agents "$agents" --baseline-s 0
            --serve-s $((duration + 300)))
(( heartbeat_ms > 0 )) && swarm_args+=(--heartbeat-ms "$heartbeat_ms")
t_reg0=$(date +%s.%N)
"$swarm" "${swarm_args[@]}" >"$work/swarm.out" 2>"$work/swarm.err" &
swarm_pid=$!
# Ready once every agent is registered, connected and welcomed (bounded: 10 minutes; the swarm gives up on the
# welcomes after 60 s by itself).
for _ in $(seq 6000); do
  grep -q '^ready:' "$work/swarm.out" 2>/dev/null && break
  kill -0 "$swarm_pid" 2>/dev/null || { echo "write_path_load: agent_swarm exited:" >&2; cat "$work/swarm.err" >&2; exit 1; }
  sleep 0.1
done
grep -q '^ready:' "$work/swarm.out" || { echo "write_path_load: the agents were not ready within 10 minutes" >&2; exit 1; }
t_reg1=$(date +%s.%N)

target="AmazonEC2ContainerServiceV20141113"
call() {  # call OPERATION JSON: prints the body, fails unless 200
  curl -sS --max-time 30 --fail-with-body -X POST "$endpoint/" -H "X-Amz-Target: $target.$1" \
    -H "Content-Type: application/x-amz-json-1.1" --data-binary "$2"
}
cluster=swarm  # agent_swarm's
family=write-path-small
call RegisterTaskDefinition "{\"family\":\"$family\",\"containerDefinitions\":[{\"name\":\"main\",\"image\":\"bench/infer:latest\",\"cpu\":$task_cpu,\"memory\":$task_mem,\"essential\":true,\"resourceRequirements\":[{\"type\":\"GPU\",\"sharingStrategy\":{\"nvidiaMps\":{\"memory\":$task_gpu_mib}}}]}]}" >/dev/null
# Capacity for the task: per GPU floor(total / gpu memory); per agent bounded by its CPU and memory too.
per_gpu=$((81559 / task_gpu_mib))
per_agent=$((per_gpu * 8))
(( 65536 / task_cpu < per_agent )) && per_agent=$((65536 / task_cpu))
(( 262144 / task_mem < per_agent )) && per_agent=$((262144 / task_mem))
capacity=$((per_agent * agents))
# One task first, so that DescribeTasks has something to describe from its first call.
call RunTask "{\"cluster\":\"$cluster\",\"taskDefinition\":\"$family\",\"count\":1}" >/dev/null
sleep 1

# ---- loaded: RunTask, reads and heartbeats together -----------------------------------------------------------------
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }
hz=$(getconf CLK_TCK)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
ticks0=$(cpu_ticks)
kill -USR1 "$swarm_pid"  # the swarm's measured window starts now
node "$here/read_under_load.mjs" "$endpoint" "$cluster" "$duration" "$read_interval_ms" "$batch" \
  >"$work/reads.txt" 2>"$work/reads.err" &
reader_pid=$!
GPUPACK_CLUSTER=$cluster GPUPACK_TASKDEF=$family \
  wrk -t 1 -c "$connections" -d "${duration}s" --timeout 10s -s "$here/runtask_load.lua" "$endpoint/" \
  >"$work/wrk.out" 2>&1 &
wrk_pid=$!
wait "$wrk_pid" || { wrk_pid=""; cat "$work/wrk.out" >&2; exit 1; }
wrk_pid=""
wait "$reader_pid" || { reader_pid=""; echo "write_path_load: the reader failed:" >&2; cat "$work/reads.err" >&2; exit 1; }
reader_pid=""
ticks1=$(cpu_ticks)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
stop_swarm  # ends the window; its figures are in swarm.out
# shellcheck disable=SC2016  # JavaScript template literals, not shell
counts=$(call DescribeClusters "{\"clusters\":[\"$cluster\"]}" |
  node -e 'const c = JSON.parse(require("fs").readFileSync(0, "utf8")).clusters[0] || {};
           console.log(`${c.runningTasksCount} RUNNING, ${c.pendingTasksCount} PENDING`)')

# ---- report -------------------------------------------------------------------------------------------------------
r() { awk -v k="result.$1" '$1 == k { $1 = ""; sub(/^ /, ""); print }' "$work/wrk.out"; }
s() { awk -v k="result.$1" '$1 == k { print $2 }' "$work/swarm.out"; }
secs=$(r duration_s)
# read_p99 OP: the p99 of OP's line in reads.txt.
read_p99() { node -e 'for (const l of require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")) {
  const r = JSON.parse(l); if (r.op === process.argv[2]) console.log(r.p99_ms) }' "$work/reads.txt" "$1"; }
rows() {
  # shellcheck disable=SC2016  # JavaScript template literals, not shell
  node -e '
    for (const l of require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").filter(Boolean)) {
      const r = JSON.parse(l);
      const pad = (s, n) => String(s).padStart(n);
      console.log(`  ${r.op.padEnd(27)} ${pad(r.calls, 6)} ${pad(r.per_s.toFixed(1), 7)} ${pad(r.p50_ms.toFixed(2), 8)} ${pad(r.p90_ms.toFixed(2), 8)} ${pad(r.p99_ms.toFixed(2), 8)} ${pad(r.max_ms.toFixed(2), 8)}${r.errors ? "  errors " + r.errors + ": " + r.last_error : ""}`);
    }' "$1"
}

cat <<EOF
gpupack write path with agents connected ($(date -u +%Y-%m-%dT%H:%M:%SZ))
command          $command_line
code             $("$gpupack" --version 2>/dev/null | head -1), $gpupack (built $(date -u -r "$gpupack" +%Y-%m-%dT%H:%MZ)); scripts at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
machine          $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)
load average     before $load_before, after $load_after (1/5/15 min)
server           $gpupack ${server_args[*]}
database on      $(df -T "$work" | awk 'NR == 2 { print $2 " (" $1 ")" }')
agents           $swarm ${swarm_args[*]}
                 $(sed -n 's/^ready: //p' "$work/swarm.out"); ready $(awk -v a="$t_reg0" -v b="$t_reg1" 'BEGIN { printf "%.1f", b - a }') s after the swarm started
task definition  $family: 1 container, $task_cpu CPU units, $task_mem MiB, nvidiaMps $task_gpu_mib MiB; capacity $capacity tasks ($per_agent per agent)
writes           wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'), 1 thread, $connections keep-alive connections, ${duration} s, RunTask count=1 (random placement)
reads            node $(node --version), 3 loops (one keep-alive connection and one call in flight each), a call every $read_interval_ms ms at most; batch $batch

RunTask          $(r requests) calls in $secs s = $(r calls_per_s) calls/s; p50 $(r latency_p50_ms) ms  p99 $(r latency_p99_ms) ms  max $(r latency_max_ms) ms
                 placed $(r placed), placement failures $(r placement_failures), HTTP errors $(r http_errors); socket errors $(r socket_errors)
tasks            $counts on the agents' cluster at the end (capacity $capacity)
server CPU       $(awk -v a="$ticks0" -v b="$ticks1" -v s="$secs" -v hz="$hz" 'BEGIN { printf "%.2f", (s > 0 ? (b - a) / hz / s : 0) }') cores during the load (utime + stime)

reads (ms)       operation                    calls   per s      p50      p90      p99      max
$(rows "$work/reads.txt")

agents (the swarm's report of its window):
$(sed -n '/^gpupack agents held/,/^$/p; /^  window, ms/,/^$/p' "$work/swarm.out" | grep -v '^gpupack agents held')

result.runtask_calls_per_s $(r calls_per_s)
result.runtask_p99_ms $(r latency_p99_ms)
result.placement_failures $(r placement_failures)
result.http_errors $(r http_errors)
result.DescribeTasks_p99_ms $(read_p99 DescribeTasks)
result.DescribeContainerInstances_p99_ms $(read_p99 DescribeContainerInstances)
result.ListTasks_p99_ms $(read_p99 ListTasks)
result.heartbeat_ack_p50_ms $(s heartbeat_ack_p50_ms)
result.heartbeat_ack_p99_ms $(s heartbeat_ack_p99_ms)
result.heartbeat_ack_max_ms $(s heartbeat_ack_max_ms)
result.heartbeat_ack_n $(s heartbeat_ack_n)
result.heartbeat_errors $(s heartbeat_errors)
result.running_ack_p99_ms $(s running_ack_p99_ms)
EOF
