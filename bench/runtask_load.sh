#!/usr/bin/env bash
# runtask_load.sh: RunTask calls/s and latency over HTTP, with the server's durable commits (WAL,
# synchronous=FULL), on loopback, for a bounded time. A benchmark, never a test: it prints figures and setup.
#
# It starts `gpupack server` on a fresh database in a temporary directory (--log-level warn), creates a cluster,
# registers --instances container instances x 8 GPUs of 81,559 MiB through the API, registers one small shared
# task definition (--gpu-memory MiB of one GPU through MPS, 256 CPU units, 1,024 MiB), then drives RunTask
# (count 1) with wrk from --connections keep-alive connections for --duration seconds. Tasks accumulate (nothing
# stops them); the cluster's capacity for them is printed next to what the run placed, and the answers are
# sorted into successful placements, placement failures and HTTP errors.
#
# Needs: curl, wrk (Debian: apt-get install wrk), sqlite3 (optional, to read back the journal mode).
# Figures and how to read them: docs/benchmarks.md.
#
# Usage: bench/runtask_load.sh [--gpupack PATH] [--instances N] [--connections N] [--duration S]
#                              [--wrk-threads N] [--server-threads N] [--gpu-memory MiB] [--dir DIR] [--keep]
# Defaults: build-bench/gpupack (the Release build), 1000 instances, 64 connections, 20 s, 1 wrk thread, the
# server's own --threads, 2048 MiB, the database under $TMPDIR or /tmp. --dir /dev/shm (tmpfs, where fsync
# costs nothing) is a diagnostic that takes the disk out of the figure, not a durable result.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
command_line=$(printf '%q ' "$0" "$@")

gpupack="$root/build-bench/gpupack"
instances=1000
gpus_per_instance=8
gpu_total_mib=81559
connections=64
duration=20
wrk_threads=1
server_threads=""
task_gpu_mib=2048
task_cpu=256
task_mem=1024
parent_dir="${TMPDIR:-/tmp}"
keep=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpupack) gpupack="$2"; shift 2 ;;
    --instances) instances="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --wrk-threads) wrk_threads="$2"; shift 2 ;;
    --server-threads) server_threads="$2"; shift 2 ;;
    --gpu-memory) task_gpu_mib="$2"; shift 2 ;;
    --dir) parent_dir="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "runtask_load: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in curl wrk; do
  command -v "$tool" >/dev/null || { echo "runtask_load: $tool is missing (Debian: apt-get install $tool)" >&2; exit 2; }
done
[[ -x "$gpupack" ]] || { echo "runtask_load: no gpupack binary at $gpupack (build it, or pass --gpupack)" >&2; exit 2; }
if (( duration < 1 || duration > 300 )); then echo "runtask_load: --duration must be 1..300 seconds" >&2; exit 2; fi

work=$(mktemp -d "$parent_dir/gpupack-runtask-load.XXXXXX")
db="$work/gpupack.db"
server_pid=""
cleanup() {
  bench_stop_pid "$server_pid"
  if (( keep )); then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- server ---------------------------------------------------------------------------------------------------
server_args=(server --listen 127.0.0.1:0 --db "$db" --log-level warn)
# The script registers instances over plain HTTP and plays their agents: the server must place on instances with
# no connected agent (a binary from before that flag placed there anyway).
"$gpupack" server --help 2>/dev/null | grep -q -- --place-on-disconnected && server_args+=(--place-on-disconnected)
[[ -n "$server_threads" ]] && server_args+=(--threads "$server_threads")
bench_start_server runtask_load

target="AmazonEC2ContainerServiceV20141113"
call() {  # call OPERATION JSON: prints the body, fails unless 200
  curl -sS --fail-with-body -X POST "$endpoint/" -H "X-Amz-Target: $target.$1" \
    -H "Content-Type: application/x-amz-json-1.1" --data-binary "$2"
}

cluster=bench
family="bench-shared-$((task_gpu_mib / 1024))g"
call CreateCluster "{\"clusterName\":\"$cluster\"}" >/dev/null

# Instances: one curl process, 16 requests in flight on their own connections (group commits batch them).
{
  for ((i = 0; i < instances; i++)); do
    devices=""
    for ((g = 0; g < gpus_per_instance; g++)); do
      [[ -n "$devices" ]] && devices+=","
      printf -v device '{\\"id\\":\\"GPU-%08x-0000-4000-8000-%012x\\",\\"type\\":\\"GPU\\",\\"gpuInfo\\":{\\"memoryInMiB\\":%d}}' \
        "$i" "$g" "$gpu_total_mib"  # printf -v: no subshell per GPU
      devices+=$device
    done
    printf 'url = "%s/"\n' "$endpoint"
    printf 'header = "X-Amz-Target: %s.RegisterContainerInstance"\n' "$target"
    printf 'header = "Content-Type: application/x-amz-json-1.1"\n'
    printf 'data-binary = "{\\"cluster\\":\\"%s\\",\\"totalResources\\":[{\\"name\\":\\"CPU\\",\\"type\\":\\"INTEGER\\",\\"integerValue\\":196608},{\\"name\\":\\"MEMORY\\",\\"type\\":\\"INTEGER\\",\\"integerValue\\":2000000}],\\"platformDevices\\":[%s],\\"versionInfo\\":{\\"agentVersion\\":\\"bench\\"}}"\n' \
      "$cluster" "$devices"
    printf 'output = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n'
    if (( i + 1 < instances )); then printf 'next\n'; fi
  done
} >"$work/register.curl"
t0=$(date +%s.%N)
registered=$(curl -sS --parallel --parallel-immediate --parallel-max 16 --config "$work/register.curl" 2>"$work/register.err" | grep -c '^200$' || true)
t1=$(date +%s.%N)
if (( registered != instances )); then
  echo "runtask_load: only $registered of $instances instances registered" >&2
  grep -v '^--\|^DL' "$work/register.err" | sort | uniq -c >&2 || true
  exit 1
fi

call RegisterTaskDefinition "{\"family\":\"$family\",\"containerDefinitions\":[{\"name\":\"main\",\"image\":\"bench/infer:latest\",\"cpu\":$task_cpu,\"memory\":$task_mem,\"essential\":true,\"resourceRequirements\":[{\"type\":\"GPU\",\"sharingStrategy\":{\"nvidiaMps\":{\"memory\":$task_gpu_mib}}}]}]}" >/dev/null

# Capacity for the task: per GPU floor(total/gpu_memory); per instance bounded by CPU and memory too.
per_gpu=$((gpu_total_mib / task_gpu_mib))
per_instance=$((per_gpu * gpus_per_instance))
(( 196608 / task_cpu < per_instance )) && per_instance=$((196608 / task_cpu))
(( 2000000 / task_mem < per_instance )) && per_instance=$((2000000 / task_mem))
capacity=$((per_instance * instances))

# ---- load -----------------------------------------------------------------------------------------------------
metric() { curl -sS "$endpoint/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }
commits0=$(metric gpupack_store_commits_total)
batches0=$(metric gpupack_store_batches_total)
ticks0=$(cpu_ticks)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
GPUPACK_CLUSTER=$cluster GPUPACK_TASKDEF=$family \
  wrk -t "$wrk_threads" -c "$connections" -d "${duration}s" --timeout 10s -s "$here/runtask_load.lua" "$endpoint/" \
  >"$work/wrk.out" 2>&1 || { cat "$work/wrk.out" >&2; exit 1; }
ticks1=$(cpu_ticks)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
commits1=$(metric gpupack_store_commits_total)
batches1=$(metric gpupack_store_batches_total)
placements_total=$(metric gpupack_placements_total)
r() { awk -v k="result.$1" '$1 == k { $1 = ""; sub(/^ /, ""); print }' "$work/wrk.out"; }

kill -TERM "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=""
journal_mode="(sqlite3 not installed)"
command -v sqlite3 >/dev/null && journal_mode=$(sqlite3 "$db" 'PRAGMA journal_mode;')
db_size=$(du -sh "$work" | cut -f1)

# ---- report ---------------------------------------------------------------------------------------------------
hz=$(getconf CLK_TCK)
requests=$(r requests)
secs=$(r duration_s)
commits=$((commits1 - commits0))
batches=$((batches1 - batches0))
server_cpu=$(awk -v a="$ticks0" -v b="$ticks1" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz }')
placed=$(r placed)
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f%%", b ? 100 * a / b : 0 }'; }

cat <<EOF
gpupack RunTask load test ($(date -u +%Y-%m-%dT%H:%M:%SZ))
command          $command_line
machine          $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)
load average     before $load_before, after $load_after (1/5/15 min)
server           $gpupack server --listen 127.0.0.1:0 --db $db --log-level warn${server_threads:+ --threads $server_threads}
durability       journal_mode=$journal_mode (read back from the file), synchronous=FULL (SqliteStore sets it on open)
database on      $(df -T "$work" | awk 'NR == 2 { print $2 " (" $1 ")" }'), $db_size after the run
cluster          $instances instances x $gpus_per_instance GPUs of $gpu_total_mib MiB, registered in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s
task definition  $family: 1 container, $task_cpu CPU units, $task_mem MiB, nvidiaMps memory $task_gpu_mib MiB
capacity         $capacity tasks of $family ($per_instance per instance)
load             wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'), $wrk_threads thread(s), $connections keep-alive connections, ${duration} s, RunTask count=1

calls            $requests in $secs s = $(r calls_per_s) calls/s
answers          placed $placed ($(pct "$placed" "$requests")), placement failures $(r placement_failures), HTTP errors $(r http_errors); socket errors $(r socket_errors)
latency (ms)     p50 $(r latency_p50_ms)  p90 $(r latency_p90_ms)  p99 $(r latency_p99_ms)  p99.9 $(r latency_p999_ms)  max $(r latency_max_ms)  mean $(r latency_mean_ms)
placements       server total $placements_total of capacity $capacity ($(pct "$placements_total" "$capacity"))
commits          $commits SQLite commits for $batches write batches during the load ($(awk -v b="$batches" -v c="$commits" 'BEGIN { printf "%.1f", c ? b / c : 0 }') batches per commit, $(awk -v c="$commits" -v s="$secs" 'BEGIN { printf "%.0f", s ? c / s : 0 }') commits/s)
server CPU       $server_cpu s during the load = $(awk -v c="$server_cpu" -v s="$secs" 'BEGIN { printf "%.2f", s ? c / s : 0 }') cores
EOF
