#!/usr/bin/env bash
# read_under_load.sh: read latency (DescribeTasks, DescribeContainerInstances, ListTasks) while RunTask writes
# load the server, and the same reads alone afterwards on the state the load left. A benchmark, never a test: it
# prints figures and setup.
#
# It starts `gpupack server` on a fresh database in a temporary directory (--log-level warn; default durability),
# creates a cluster, registers --instances container instances x 8 GPUs of 81,559 MiB through the API (no agent:
# without the channel attribute they count as connected), registers the small shared task definition of
# bench/runtask_load.sh (2,048 MiB of one GPU through MPS, 256 CPU units, 1,024 MiB), then:
#   1. loaded: for --duration seconds, wrk drives RunTask (count 1, bench/runtask_load.lua) on --connections
#      keep-alive connections while bench/read_under_load.mjs (node 20) runs its three read loops, one call in
#      flight each, paced at one call per --read-interval-ms: DescribeTasks of --batch tasks, DescribeContainer-
#      Instances of --batch instances, ListTasks (first page of 100);
#   2. quiet: the same read loops alone for --quiet-s seconds, on the state the load left (its tasks included),
#      so the difference is what the write load costs the reads.
# It prints RunTask calls/s and latency (wrk), the reads' p50/p90/p99/max per operation in both phases, the
# tasks in the state, and the server's CPU.
#
# Needs: curl, wrk (Debian: apt-get install wrk), node 20. Figures: docs/benchmarks.md, "The redesign: before and
# after".
#
# Usage: bench/read_under_load.sh [GPUPACK_BIN] [--instances N] [--connections N] [--duration S] [--quiet-s S]
#                                 [--read-interval-ms MS] [--batch N] [--server-threads N] [--dir DIR] [--keep]
# Defaults: build-bench/gpupack, 200 instances, 32 connections, 15 s, 10 s, 20 ms, 10 (--batch 100: ECS's most), the server's own
# --threads, the database under $TMPDIR or /tmp.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
command_line=$(printf '%q ' "$0" "$@")

gpupack="$root/build-bench/gpupack"
instances=200
gpus_per_instance=8
gpu_total_mib=81559
connections=32
duration=15
quiet_s=10
read_interval_ms=20
batch=10
server_threads=""
task_gpu_mib=2048
parent_dir="${TMPDIR:-/tmp}"
keep=0

if [[ $# -gt 0 && "$1" != -* ]]; then gpupack="$1"; shift; fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --instances) instances="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --quiet-s) quiet_s="$2"; shift 2 ;;
    --read-interval-ms) read_interval_ms="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --server-threads) server_threads="$2"; shift 2 ;;
    --dir) parent_dir="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "read_under_load: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in curl wrk node; do
  command -v "$tool" >/dev/null || { echo "read_under_load: $tool is missing" >&2; exit 2; }
done
[[ -x "$gpupack" ]] || { echo "read_under_load: no gpupack binary at $gpupack (build it, or pass its path)" >&2; exit 2; }
gpupack=$(cd "$(dirname "$gpupack")" && pwd)/$(basename "$gpupack")
if (( duration < 1 || duration > 300 || quiet_s < 1 || quiet_s > 300 )); then
  echo "read_under_load: --duration and --quiet-s must be 1..300 seconds" >&2; exit 2
fi

work=$(mktemp -d "$parent_dir/gpupack-read-under-load.XXXXXX")
db="$work/gpupack.db"
server_pid=""
reader_pid=""
cleanup() {
  [[ -n "$reader_pid" ]] && { kill "$reader_pid" 2>/dev/null || true; wait "$reader_pid" 2>/dev/null || true; }
  bench_stop_pid "$server_pid"
  if (( keep )); then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- server and cluster -----------------------------------------------------------------------------------------
server_args=(server --listen 127.0.0.1:0 --db "$db" --log-level warn)
# The script registers instances over plain HTTP and plays their agents: the server must place on instances with
# no connected agent (a binary from before that flag placed there anyway).
"$gpupack" server --help 2>/dev/null | grep -q -- --place-on-disconnected && server_args+=(--place-on-disconnected)
[[ -n "$server_threads" ]] && server_args+=(--threads "$server_threads")
bench_start_server read_under_load

target="AmazonEC2ContainerServiceV20141113"
call() {  # call OPERATION JSON: prints the body, fails unless 200
  curl -sS --max-time 30 --fail-with-body -X POST "$endpoint/" -H "X-Amz-Target: $target.$1" \
    -H "Content-Type: application/x-amz-json-1.1" --data-binary "$2"
}
cluster=bench
family="bench-shared-$((task_gpu_mib / 1024))g"
call CreateCluster "{\"clusterName\":\"$cluster\"}" >/dev/null

# Instances: one curl process, 16 requests in flight (as bench/runtask_load.sh registers them).
{
  for ((i = 0; i < instances; i++)); do
    devices=""
    for ((g = 0; g < gpus_per_instance; g++)); do
      [[ -n "$devices" ]] && devices+=","
      printf -v device '{\\"id\\":\\"GPU-%08x-0000-4000-8000-%012x\\",\\"type\\":\\"GPU\\",\\"gpuInfo\\":{\\"memoryInMiB\\":%d}}' \
        "$i" "$g" "$gpu_total_mib"
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
registered=$(curl -sS --parallel --parallel-immediate --parallel-max 16 --config "$work/register.curl" 2>"$work/register.err" | grep -c '^200$' || true)
if (( registered != instances )); then
  echo "read_under_load: only $registered of $instances instances registered" >&2; exit 1
fi
call RegisterTaskDefinition "{\"family\":\"$family\",\"containerDefinitions\":[{\"name\":\"main\",\"image\":\"bench/infer:latest\",\"cpu\":256,\"memory\":1024,\"essential\":true,\"resourceRequirements\":[{\"type\":\"GPU\",\"sharingStrategy\":{\"nvidiaMps\":{\"memory\":$task_gpu_mib}}}]}]}" >/dev/null
# One task first, so that DescribeTasks has something to describe from its first call.
call RunTask "{\"cluster\":\"$cluster\",\"taskDefinition\":\"$family\",\"count\":1}" >/dev/null

# ---- 1. loaded: RunTask load and the reads together ---------------------------------------------------------------
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }
hz=$(getconf CLK_TCK)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
ticks0=$(cpu_ticks)
node "$here/read_under_load.mjs" "$endpoint" "$cluster" "$duration" "$read_interval_ms" "$batch" \
  >"$work/reads_loaded.txt" 2>"$work/reads_loaded.err" &
reader_pid=$!
GPUPACK_CLUSTER=$cluster GPUPACK_TASKDEF=$family \
  wrk -t 1 -c "$connections" -d "${duration}s" --timeout 10s -s "$here/runtask_load.lua" "$endpoint/" \
  >"$work/wrk.out" 2>&1 || { cat "$work/wrk.out" >&2; exit 1; }
wait "$reader_pid" || { echo "read_under_load: the reader failed:" >&2; cat "$work/reads_loaded.err" >&2; exit 1; }
reader_pid=""
ticks1=$(cpu_ticks)
load_mid=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 2. quiet: the reads alone on the same state ------------------------------------------------------------------
node "$here/read_under_load.mjs" "$endpoint" "$cluster" "$quiet_s" "$read_interval_ms" "$batch" \
  >"$work/reads_quiet.txt" 2>"$work/reads_quiet.err" || { cat "$work/reads_quiet.err" >&2; exit 1; }
ticks2=$(cpu_ticks)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
tasks_now=$(call DescribeClusters "{\"clusters\":[\"$cluster\"]}" | sed -n 's/.*"pendingTasksCount":\([0-9]*\).*/\1/p')

# ---- report -------------------------------------------------------------------------------------------------------
r() { awk -v k="result.$1" '$1 == k { $1 = ""; sub(/^ /, ""); print }' "$work/wrk.out"; }
secs=$(r duration_s)
cores() { awk -v a="$1" -v b="$2" -v s="$3" -v hz="$hz" 'BEGIN { printf "%.2f", (s > 0 ? (b - a) / hz / s : 0) }'; }
# row FILE: one line per operation, aligned.
rows() {
  # shellcheck disable=SC2016  # JavaScript template literals, not shell
  node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").filter(Boolean);
    for (const l of lines) {
      const r = JSON.parse(l);
      const pad = (s, n) => String(s).padStart(n);
      console.log(`  ${r.op.padEnd(27)} ${pad(r.calls, 6)} ${pad(r.per_s.toFixed(1), 7)} ${pad(r.p50_ms.toFixed(2), 8)} ${pad(r.p90_ms.toFixed(2), 8)} ${pad(r.p99_ms.toFixed(2), 8)} ${pad(r.max_ms.toFixed(2), 8)}${r.errors ? "  errors " + r.errors + ": " + r.last_error : ""}`);
    }' "$1"
}

cat <<EOF
gpupack reads under RunTask load ($(date -u +%Y-%m-%dT%H:%M:%SZ))
command          $command_line
code             $("$gpupack" --version 2>/dev/null | head -1), $gpupack (built $(date -u -r "$gpupack" +%Y-%m-%dT%H:%MZ)); scripts at $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
machine          $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)
load average     before $load_before, after the loaded phase $load_mid, after the quiet phase $load_after (1/5/15 min)
server           $gpupack ${server_args[*]}
database on      $(df -T "$work" | awk 'NR == 2 { print $2 " (" $1 ")" }')
cluster          $instances instances x $gpus_per_instance GPUs of $gpu_total_mib MiB (no agents), $family (nvidiaMps $task_gpu_mib MiB, 256 CPU units, 1,024 MiB)
writes           wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'), 1 thread, $connections keep-alive connections, ${duration} s, RunTask count=1 (random placement)
reads            node $(node --version), 3 loops (one keep-alive connection and one call in flight each), a call every $read_interval_ms ms at most; batch $batch

RunTask          $(r requests) calls in $secs s = $(r calls_per_s) calls/s; p50 $(r latency_p50_ms) ms  p99 $(r latency_p99_ms) ms  max $(r latency_max_ms) ms
                 placed $(r placed), placement failures $(r placement_failures), HTTP errors $(r http_errors); socket errors $(r socket_errors)
tasks            $tasks_now in the state after the load (all PENDING: no agents)
server CPU       loaded $(cores "$ticks0" "$ticks1" "$duration") cores, quiet $(cores "$ticks1" "$ticks2" "$quiet_s") cores

reads (ms)       operation                    calls   per s      p50      p90      p99      max
 loaded, under RunTask load ($duration s):
$(rows "$work/reads_loaded.txt")
 quiet, reads alone afterwards ($quiet_s s, $tasks_now tasks):
$(rows "$work/reads_quiet.txt")
EOF
