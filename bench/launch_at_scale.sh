#!/usr/bin/env bash
# launch_at_scale.sh: how long a local cluster takes to launch many tasks, one RunTask call per task, until every
# one of them is RUNNING. A benchmark, never a test: it prints figures and setup.
#
# It starts `gpupack up` (the server plus --agents agents with simulated GPUs and the process runtime, all in one
# process) with its database and state in a temporary directory and the API on a free loopback port, waits until
# every agent's channel is open, registers one task definition (one container, `/bin/sleep <--sleep-s>`, a
# shared GPU need of --gpu-memory MiB through MPS, --cpu CPU units, --memory MiB), then calls RunTask (count 1)
# --tasks times, each call its own curl process, --clients of them at a time (xargs -P). It polls
# DescribeClusters every --poll-ms until runningTasksCount reaches --tasks, then reads every task back
# (ListTasks + DescribeTasks in batches of 100) for createdAt/startedAt.
#
# It prints: the wall time from the first call to all RUNNING, RunTask calls/s during the launch, the RunTask
# latency as curl saw it (p50/p99), the server's own RunTask latency (its info log), when the last task reached
# RUNNING (its startedAt), placement -> RUNNING per task, failures, a timeline, and where the CPU went (the
# `gpupack up` process, the client processes, the per-task monitors and workloads, the whole machine).
#
# Then it stops everything it started: SIGTERM to `gpupack up` (which stops its tasks), bounded by
# --stop-timeout, then SIGKILL; then any process that carries this run's marker (GPUPACK_BENCH_RUN=<id> in its
# environment: the up process, the task monitors, the workloads) is killed, and the temporary directory removed.
# It says how many processes were left and how long the shutdown took.
#
# Needs: curl, jq, xargs, the Release build of gpupack. Figures and how to read them: docs/benchmarks.md,
# "The redesign: before and after".
#
# Usage: bench/launch_at_scale.sh [GPUPACK_BIN] [--tasks N] [--agents N] [--gpus fake:SPEC] [--clients N]
#                                 [--gpu-memory MiB] [--cpu UNITS] [--memory MiB] [--sleep-s S] [--timeout S]
#                                 [--stop-timeout S] [--poll-ms MS] [--idle-s S] [--log-level LEVEL] [--dir DIR]
#                                 [--keep] [--perf FILE]
# Defaults: build-bench/gpupack, 2,000 tasks, 64 agents, fake:1x81920, 16 clients, 256 MiB, 32 CPU units,
# 64 MiB, sleep 600 s, 600 s from the first call to all RUNNING, 180 s to stop, a poll every 250 ms, 5 s of idle
# after all RUNNING (the up process's CPU then, with no calls, is the agents' monitoring of the tasks), log level
# info (`gpupack up`'s default), the directory under $TMPDIR or /tmp. --perf FILE records `perf record -g` of the
# up process from the first call to all RUNNING into FILE (kept; needs perf).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
command_line=$(printf '%q ' "$0" "$@")

gpupack="$root/build-bench/gpupack"
tasks=2000
agents=64
gpus="fake:1x81920"
clients=16
task_gpu_mib=256
task_cpu=32
task_mem=64
sleep_s=600
timeout_s=600
stop_timeout_s=180
poll_ms=250
idle_s=5
log_level=info
parent_dir="${TMPDIR:-/tmp}"
keep=0
perf_out=""

if [[ $# -gt 0 && "$1" != -* ]]; then gpupack="$1"; shift; fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tasks) tasks="$2"; shift 2 ;;
    --agents) agents="$2"; shift 2 ;;
    --gpus) gpus="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --gpu-memory) task_gpu_mib="$2"; shift 2 ;;
    --cpu) task_cpu="$2"; shift 2 ;;
    --memory) task_mem="$2"; shift 2 ;;
    --sleep-s) sleep_s="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --stop-timeout) stop_timeout_s="$2"; shift 2 ;;
    --poll-ms) poll_ms="$2"; shift 2 ;;
    --idle-s) idle_s="$2"; shift 2 ;;
    --log-level) log_level="$2"; shift 2 ;;
    --dir) parent_dir="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --perf) perf_out="$2"; shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    *) echo "launch_at_scale: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in curl jq xargs; do
  command -v "$tool" >/dev/null || { echo "launch_at_scale: $tool is missing" >&2; exit 2; }
done
[[ -n "$perf_out" ]] && { command -v perf >/dev/null || { echo "launch_at_scale: perf is missing" >&2; exit 2; }; }
[[ -x "$gpupack" ]] || { echo "launch_at_scale: no gpupack binary at $gpupack (build it, or pass its path)" >&2; exit 2; }
gpupack=$(cd "$(dirname "$gpupack")" && pwd)/$(basename "$gpupack")
for n in "$tasks" "$agents" "$clients" "$timeout_s" "$stop_timeout_s" "$poll_ms" "$sleep_s" "$idle_s"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "launch_at_scale: $n is not a whole number" >&2; exit 2; }
done
if (( tasks < 1 || tasks > 100000 || clients < 1 || clients > 256 || timeout_s < 1 || timeout_s > 3600 )); then
  echo "launch_at_scale: --tasks 1..100000, --clients 1..256, --timeout 1..3600" >&2; exit 2
fi

work=$(mktemp -d "$parent_dir/gpupack-launch-at-scale.XXXXXX")
run_id="launch-$(basename "$work")-$$"  # the marker every process of this run carries in its environment
up_pid=""
poller_pid=""
perf_pid=""

# marked_pids: every live process whose environment holds this run's marker (ours alone: the id is unique).
marked_pids() {
  grep -lzx "GPUPACK_BENCH_RUN=$run_id" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/\([0-9]*\)/environ$|\1|' || true
}

cleanup() {
  local rc=$?
  [[ -n "$perf_pid" ]] && { kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true; }
  [[ -n "$poller_pid" ]] && { kill "$poller_pid" 2>/dev/null || true; wait "$poller_pid" 2>/dev/null || true; }
  if [[ -n "$up_pid" ]] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid" 2>/dev/null || true
    local waited=0
    while kill -0 "$up_pid" 2>/dev/null && (( waited < stop_timeout_s * 10 )); do sleep 0.1; waited=$((waited + 1)); done
    kill -KILL "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  # Whatever of this run is still alive (a monitor, a workload): killed by pid, twice over a moment.
  local pids
  for _ in 1 2 3; do
    pids=$(marked_pids)
    [[ -z "$pids" ]] && break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
  pids=$(marked_pids)
  if [[ -n "$pids" ]]; then
    echo "launch_at_scale: processes of this run still alive after cleanup: $(wc -w <<<"$pids")" >&2
  fi
  if (( keep )); then echo "kept $work" >&2; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

target="AmazonEC2ContainerServiceV20141113"
endpoint=""
call() {  # call OPERATION JSON: prints the body, fails unless 200
  curl -sS --max-time 30 --fail-with-body -X POST "$endpoint/" -H "X-Amz-Target: $target.$1" \
    -H "Content-Type: application/x-amz-json-1.1" --data-binary "$2"
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
# pctl P FILE: the P-th percentile (nearest rank) of the numbers in FILE, one per line.
pctl() { sort -g "$2" | awk -v p="$1" '{ v[NR] = $1 } END { if (!NR) { print "-"; exit } i = int(p / 100 * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.1f\n", v[i] }'; }
ticks() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
hz=$(getconf CLK_TCK)

# ---- gpupack up -------------------------------------------------------------------------------------------------
up_args=(up --agents "$agents" --gpus "$gpus" --listen 127.0.0.1:0 --dir "$work/up" --log-level "$log_level")
t_start=$(now)
# TZ=UTC: the log's timestamps (local time) read as UTC. The marker reaches the monitors, which are forks of it.
GPUPACK_BENCH_RUN=$run_id TZ=UTC "$gpupack" "${up_args[@]}" >"$work/up.out" 2>"$work/up.err" &
up_pid=$!
for _ in $(seq 1200); do  # 120 s: 64 agents register one after another
  endpoint=$(sed -n 's/^ *ECS API *\(http:\/\/[^ ]*\).*/\1/p' "$work/up.out" 2>/dev/null | head -1)
  [[ -n "$endpoint" ]] && break
  kill -0 "$up_pid" 2>/dev/null || { echo "launch_at_scale: gpupack up exited:" >&2; tail -20 "$work/up.err" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$endpoint" ]] || { echo "launch_at_scale: gpupack up printed no endpoint within 120 s" >&2; exit 1; }
t_banner=$(now)
connected=0
for _ in $(seq 600); do  # 60 s for every channel to open
  connected=$(curl -sS --max-time 5 "$endpoint/metrics" | awk '$1 == "gpupack_agents_connected" { print $2 }')
  [[ "$connected" == "$agents" ]] && break
  sleep 0.1
done
[[ "$connected" == "$agents" ]] || { echo "launch_at_scale: only $connected of $agents agents connected within 60 s" >&2; exit 1; }
t_ready=$(now)

family="bench-scale"
call RegisterTaskDefinition "{\"family\":\"$family\",\"containerDefinitions\":[{\"name\":\"main\",\"image\":\"bench/sleep\",\"entryPoint\":[\"/bin/sleep\"],\"command\":[\"$sleep_s\"],\"cpu\":$task_cpu,\"memory\":$task_mem,\"essential\":true,\"environment\":[{\"name\":\"GPUPACK_BENCH_RUN\",\"value\":\"$run_id\"}],\"resourceRequirements\":[{\"type\":\"GPU\",\"sharingStrategy\":{\"nvidiaMps\":{\"memory\":$task_gpu_mib}}}]}]}" >/dev/null

# Capacity: fake:NxMiB per agent; 4,096 CPU units and 16,384 MiB per agent (what `gpupack up` registers).
gpu_count=$(sed -n 's/^fake:\([0-9]*\)x\([0-9]*\).*/\1/p' <<<"$gpus")
gpu_mib=$(sed -n 's/^fake:\([0-9]*\)x\([0-9]*\).*/\2/p' <<<"$gpus")
per_agent=$(( ${gpu_count:-0} * (${gpu_mib:-0} / task_gpu_mib) ))
(( 4096 / task_cpu < per_agent )) && per_agent=$((4096 / task_cpu))
(( 16384 / task_mem < per_agent )) && per_agent=$((16384 / task_mem))
capacity=$((per_agent * agents))

# ---- the launch ---------------------------------------------------------------------------------------------------
mkdir -p "$work/rt"
printf 'url = "%s/"\nrequest = "POST"\nheader = "X-Amz-Target: %s.RunTask"\nheader = "Content-Type: application/x-amz-json-1.1"\ndata = "{\\"cluster\\":\\"default\\",\\"taskDefinition\\":\\"%s\\",\\"count\\":1}"\nsilent\nshow-error\nmax-time = 60\n' \
  "$endpoint" "$target" "$family" >"$work/runtask.curl"

# The poller: every poll_ms, DescribeClusters (running, pending) and how many RunTask answers are in.
poll() {
  local t
  while :; do
    t=$(now)
    curl -sS --max-time 10 -X POST "$endpoint/" -H "X-Amz-Target: $target.DescribeClusters" \
      -H "Content-Type: application/x-amz-json-1.1" --data-binary '{"clusters":["default"]}' 2>/dev/null |
      jq -r --arg t "$t" --arg answered "$(wc -l <"$work/calls.txt" 2>/dev/null || echo 0)" \
        '"\($t) \($answered) \(.clusters[0].runningTasksCount) \(.clusters[0].pendingTasksCount)"' \
        >>"$work/timeline.txt" 2>/dev/null || echo "$t" >>"$work/poll_failures.txt"
    sleep "$(awk -v ms="$poll_ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
  done
}
: >"$work/calls.txt"
: >"$work/timeline.txt"
: >"$work/poll_failures.txt"
ticks_up0=$(ticks "$up_pid")
busy0=$(busy_ticks)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ -n "$perf_out" ]]; then
  perf record -F 499 -g -p "$up_pid" -o "$perf_out" >"$work/perf.out" 2>&1 &
  perf_pid=$!
  sleep 0.5
fi
poll &
poller_pid=$!
t0=$(now)
# One curl process per RunTask call, `clients` at a time; each prints "index http_code time_total" when done.
# The subshell's `times` gives the CPU of xargs and every curl it ran (its children).
(
  seq 1 "$tasks" | xargs -P "$clients" -I{} curl --config "$work/runtask.curl" -o "$work/rt/{}.json" \
    -w '{} %{http_code} %{time_total}\n' >>"$work/calls.txt" 2>>"$work/calls.err" || true
  times >"$work/client_times.txt"
)
t_launched=$(now)

# ---- until all RUNNING ------------------------------------------------------------------------------------------
deadline=$(awk -v a="$t0" -v s="$timeout_s" 'BEGIN { printf "%.3f", a + s }')
all_running=0
t_all=""
while awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n < d) }'; do
  running=$(tail -1 "$work/timeline.txt" 2>/dev/null | awk '{ print $3 }')
  if [[ "$running" =~ ^[0-9]+$ ]] && (( running >= tasks )); then
    all_running=1
    t_all=$(tail -1 "$work/timeline.txt" | awk '{ print $1 }')
    break
  fi
  sleep 0.05
done
ticks_up1=$(ticks "$up_pid")
busy1=$(busy_ticks)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ -n "$perf_pid" ]]; then kill -INT "$perf_pid" 2>/dev/null || true; wait "$perf_pid" 2>/dev/null || true; perf_pid=""; fi
kill "$poller_pid" 2>/dev/null || true
wait "$poller_pid" 2>/dev/null || true
poller_pid=""

# CPU of the per-task processes, read while they live: monitors and the workloads. A workload carries the run's
# marker; its monitor is its parent (gpupack-monitor starts with an environment of its own, without the marker).
# /proc/PID/schedstat (ns on CPU), not stat: a monitor's few ms round to 0 clock ticks there.
read -r monitors monitor_ns workloads workload_ns < <(
  marked_pids | awk -v up="$up_pid" '
    function cpu(pid,   g, s, a) { g = "/proc/" pid "/schedstat"; s = ""; if ((getline s < g) <= 0) { close(g); return -1 }
                                   close(g); split(s, a, " "); return a[1] }
    function comm(pid,   f, c) { f = "/proc/" pid "/comm"; c = ""; getline c < f; close(f); return c }
    function parent(pid,   f, s, a) { f = "/proc/" pid "/stat"; s = ""; getline s < f; close(f)
                                      sub(/^.*\) /, "", s); split(s, a, " "); return a[2] }
    $1 != up {
      c = comm($1); t = cpu($1); if (t < 0) next
      if (c == "gpupack-monitor") { if (!($1 in seen)) { seen[$1] = 1; m++; mt += t }; next }
      w++; wt += t
      p = parent($1)
      if (p != "" && !(p in seen) && comm(p) == "gpupack-monitor") { t = cpu(p); if (t >= 0) { seen[p] = 1; m++; mt += t } } }
    END { print m + 0, mt + 0, w + 0, wt + 0 }')

# ---- idle: what the cluster costs with every task RUNNING and no call (the agents' monitoring) ----------------------
idle_ticks0=$(ticks "$up_pid")
sleep "$idle_s"
idle_ticks1=$(ticks "$up_pid")
idle_cores=$(awk -v a="$idle_ticks0" -v b="$idle_ticks1" -v hz="$hz" -v s="$idle_s" 'BEGIN { printf "%.2f", (s > 0 ? (b - a) / hz / s : 0) }')

# ---- every task, read back ----------------------------------------------------------------------------------------
: >"$work/tasks.txt"
token=""
for _ in $(seq $((tasks / 100 + 5))); do
  body="{\"cluster\":\"default\",\"desiredStatus\":\"RUNNING\",\"maxResults\":100${token:+,\"nextToken\":\"$token\"}}"
  page=$(call ListTasks "$body")
  arns=$(jq -c '.taskArns' <<<"$page")
  if [[ "$arns" != "[]" ]]; then
    call DescribeTasks "{\"cluster\":\"default\",\"tasks\":$arns}" |
      jq -r '.tasks[] | "\(.lastStatus) \(.createdAt) \(.startedAt // "-")"' >>"$work/tasks.txt"
  fi
  token=$(jq -r '.nextToken // ""' <<<"$page")
  [[ -z "$token" ]] && break
done

# ---- figures ------------------------------------------------------------------------------------------------------
answered=$(wc -l <"$work/calls.txt")
ok_calls=$(awk '$2 == 200' "$work/calls.txt" | wc -l)
http_errors=$((answered - ok_calls))
not_answered=$((tasks - answered))
placement_failures=$(grep -L '"failures":\[\]' "$work"/rt/*.json 2>/dev/null | wc -l || true)
awk '{ print $3 * 1000 }' "$work/calls.txt" >"$work/latency_ms.txt"
launch_s=$(elapsed "$t0" "$t_launched")
rate=$(awk -v n="$answered" -v s="$launch_s" 'BEGIN { printf "%.1f", (s > 0 ? n / s : 0) }')
described=$(wc -l <"$work/tasks.txt")
described_running=$(awk '$1 == "RUNNING"' "$work/tasks.txt" | wc -l)
last_started=$(awk '$3 != "-" { print $3 }' "$work/tasks.txt" | sort -g | tail -1)
awk '$3 != "-" { print ($3 - $2) * 1000 }' "$work/tasks.txt" >"$work/to_running_ms.txt"
grep -ho 'op=RunTask status=200 latency_ms=[0-9.]*' "$work/up.out" "$work/up.err" 2>/dev/null | sed 's/.*latency_ms=//' >"$work/server_ms.txt" || true
server_cpu=$(awk -v a="$ticks_up0" -v b="$ticks_up1" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz }')
read -r cu cs < <(sed -n 2p "$work/client_times.txt" | awk '{ for (i = 1; i <= 2; i++) { split($i, p, "m"); sub(/s$/, "", p[2]); v[i] = p[1] * 60 + p[2] } print v[1], v[2] }')
machine_cpu=$(awk -v a="$busy0" -v b="$busy1" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz }')
window_s=$(elapsed "$t0" "${t_all:-$(now)}")
cores() { awk -v c="$1" -v s="$window_s" 'BEGIN { printf "%.2f", (s > 0 ? c / s : 0) }'; }

cat <<EOF
gpupack launch at scale ($(date -u +%Y-%m-%dT%H:%M:%SZ))
command          $command_line
code             $("$gpupack" --version 2>/dev/null | head -1), $gpupack (built $(date -u -r "$gpupack" +%Y-%m-%dT%H:%MZ)); scripts at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
machine          $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)
load average     before $load_before, after $load_after (1/5/15 min)
cluster          $gpupack ${up_args[*]}
                 started in $(elapsed "$t_start" "$t_banner") s, all $agents channels open $(elapsed "$t_banner" "$t_ready") s later
database on      $(df -T "$work" | awk 'NR == 2 { print $2 " (" $1 ")" }')
task definition  $family: 1 container, /bin/sleep $sleep_s, $task_cpu CPU units, $task_mem MiB, nvidiaMps memory $task_gpu_mib MiB; capacity $capacity ($per_agent per agent)
load             $tasks RunTask calls (count 1, random placement), one curl process each, $clients at a time (xargs -P $clients)

all RUNNING      $(if (( all_running )); then echo "$(elapsed "$t0" "$t_all") s from the first call (poll every $poll_ms ms)"; else echo "NOT within $timeout_s s: $(tail -1 "$work/timeline.txt" | awk '{ print $3 " RUNNING, " $4 " PENDING" }')"; fi)
last startedAt   $( [[ -n "$last_started" ]] && elapsed "$t0" "$last_started" || echo -) s after the first call (the server's stamp of the last RUNNING report)
launch           $answered answers in $launch_s s = $rate RunTask calls/s
failures         HTTP errors $http_errors, placement failures $placement_failures, unanswered $not_answered; tasks read back $described, RUNNING $described_running
RunTask (curl)   p50 $(pctl 50 "$work/latency_ms.txt") ms  p90 $(pctl 90 "$work/latency_ms.txt") ms  p99 $(pctl 99 "$work/latency_ms.txt") ms  max $(pctl 100 "$work/latency_ms.txt") ms (time_total, per call)
RunTask (server) p50 $(pctl 50 "$work/server_ms.txt") ms  p99 $(pctl 99 "$work/server_ms.txt") ms  ($(wc -l <"$work/server_ms.txt") log lines; the per-request lines are at debug: needs --log-level debug)
placed->RUNNING  p50 $(pctl 50 "$work/to_running_ms.txt") ms  p90 $(pctl 90 "$work/to_running_ms.txt") ms  p99 $(pctl 99 "$work/to_running_ms.txt") ms  max $(pctl 100 "$work/to_running_ms.txt") ms (startedAt - createdAt)
CPU, first call to all RUNNING ($window_s s; $(nproc) CPUs = $(awk -v n="$(nproc)" -v s="$window_s" 'BEGIN { printf "%.1f", n * s }') CPU s)
  gpupack up     $server_cpu s ($(cores "$server_cpu") cores): server + $agents agents, with the reaped middle processes of the double fork
  clients        user $cu s + sys $cs s ($(cores "$(awk -v a="$cu" -v b="$cs" 'BEGIN { print a + b }')") cores): xargs and $tasks curl processes
  monitors       $(awk -v t="$monitor_ns" 'BEGIN { printf "%.1f", t / 1e9 }') s in $monitors gpupack-monitor processes (their own CPU since the fork, with the fork of the workload)
  workloads      $(awk -v t="$workload_ns" 'BEGIN { printf "%.1f", t / 1e9 }') s in $workloads workload processes (from the fork: the exec of /bin/sleep)
  idle after     $idle_cores cores used by gpupack up over the $idle_s s after all RUNNING (no calls: the agents' monitoring of $tasks tasks)
  whole machine  $machine_cpu s busy ($(cores "$machine_cpu") of $(nproc) cores), other engineers' work included
EOF
echo "timeline         seconds after the first call: RunTask answered / RUNNING / PENDING ($(wc -l <"$work/timeline.txt") polls, $(wc -l <"$work/poll_failures.txt") failed)"
awk -v t0="$t0" -v every=5 '{ e = $1 - t0; if (e >= next_t || NR == 1) { printf "  %6.1f s  %5d / %5d / %5d\n", e, $2, $3, $4; next_t = e + every } last = $0 } END { split(last, f, " "); printf "  %6.1f s  %5d / %5d / %5d (last poll)\n", f[1] - t0, f[2], f[3], f[4] }' "$work/timeline.txt"
[[ -n "$perf_out" ]] && echo "perf             recorded into $perf_out ($(tail -1 "$work/perf.out" 2>/dev/null))"

# ---- stop ---------------------------------------------------------------------------------------------------------
t_stop0=$(now)
kill -TERM "$up_pid" 2>/dev/null || true
waited=0
while kill -0 "$up_pid" 2>/dev/null && (( waited < stop_timeout_s * 10 )); do sleep 0.1; waited=$((waited + 1)); done
if kill -0 "$up_pid" 2>/dev/null; then
  echo "stop             gpupack up still running after $stop_timeout_s s: SIGKILL"
  kill -KILL "$up_pid" 2>/dev/null || true
fi
wait "$up_pid" 2>/dev/null || true
up_pid=""
t_stop1=$(now)
left=$(marked_pids | wc -w)
echo "stop             SIGTERM to exit: $(elapsed "$t_stop0" "$t_stop1") s; processes of this run left after it: $left (killed by the cleanup)"
(( all_running )) || exit 1
