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
# With --services N the cluster first gets N services of 4 replicas of the same task definition, their tasks
# reported RUNNING by bench/services_scale.mjs --play-agent (SubmitTaskStateChange) until every service is steady,
# so that RunTask runs beside steady services (docs/benchmarks.md, section 10); the capacity printed leaves their
# tasks out. Needs node 20.
#
# With --db postgres://... the server runs on that (empty) PostgreSQL database instead, as the leader of its
# replicas (fenced commits, --advertise on a free loopback port); with psql installed the report adds what the
# database did during the load (pg_stat_wal, and pg_stat_statements when the database server preloads it).
# --via-standby (with --db) starts a second server on the same database, a standby, and sends the RunTask load
# to it: each call is forwarded to the leader. bench/runtask_pg_compare.sh starts a private PostgreSQL and runs
# both stores side by side.
#
# Needs: curl, wrk (Debian: apt-get install wrk), sqlite3 (optional, to read back the journal mode), psql
# (optional, with --db postgres://), python3 (with --db postgres://, to pick a free port).
# Figures and how to read them: docs/benchmarks.md.
#
# Usage: bench/runtask_load.sh [--gpupack PATH] [--instances N] [--connections N] [--duration S]
#                              [--wrk-threads N] [--server-threads N] [--gpu-memory MiB] [--dir DIR] [--keep]
#                              [--services N] [--db postgres://... [--via-standby]]
# Defaults: build-bench/gpupack (the Release build), 1000 instances, 64 connections, 20 s, 1 wrk thread, the
# server's own --threads, 2048 MiB, no service, the database under $TMPDIR or /tmp. --dir /dev/shm (tmpfs,
# where fsync costs nothing) is a diagnostic that takes the disk out of the figure, not a durable result.
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
pg_uri=""
via_standby=0
services=0
replicas=4

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
    --db) pg_uri="$2"; shift 2 ;;
    --via-standby) via_standby=1; shift ;;
    --services) services="$2"; shift 2 ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "runtask_load: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in curl wrk; do
  command -v "$tool" >/dev/null || { echo "runtask_load: $tool is missing (Debian: apt-get install $tool)" >&2; exit 2; }
done
[[ -x "$gpupack" ]] || { echo "runtask_load: no gpupack binary at $gpupack (build it, or pass --gpupack)" >&2; exit 2; }
if (( duration < 1 || duration > 300 )); then echo "runtask_load: --duration must be 1..300 seconds" >&2; exit 2; fi
if [[ -n "$pg_uri" && ! "$pg_uri" =~ ^postgres(ql)?:// ]]; then
  echo "runtask_load: --db takes a postgres:// or postgresql:// URI (the SQLite file is always a fresh one)" >&2; exit 2
fi
if (( via_standby )) && [[ -z "$pg_uri" ]]; then echo "runtask_load: --via-standby needs --db postgres://..." >&2; exit 2; fi
if ! [[ "$services" =~ ^[0-9]+$ ]] || (( services > 5000 )); then echo "runtask_load: --services must be 0..5000" >&2; exit 2; fi
if (( services > 0 )) && ! command -v node >/dev/null; then echo "runtask_load: --services needs node 20" >&2; exit 2; fi
have_psql=0
[[ -n "$pg_uri" ]] && command -v psql >/dev/null && have_psql=1
# pg SQL: the rows of SQL (|-separated values) on the benchmark's PostgreSQL database.
pg() { psql -X -A -t -q -v ON_ERROR_STOP=1 -F '|' -d "$pg_uri" -c "$1"; }

work=$(mktemp -d "$parent_dir/gpupack-runtask-load.XXXXXX")
db="$work/gpupack.db"
server_pid=""
standby_pid=""
cleanup() {
  bench_stop_pid "$standby_pid"
  bench_stop_pid "$server_pid"
  if (( keep )); then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- server ---------------------------------------------------------------------------------------------------
if [[ -n "$pg_uri" ]]; then
  # A replica serves on the port it advertises: pick a free one (the kernel's, released just before the start).
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  db="$pg_uri"
  server_args=(server --listen "127.0.0.1:$port" --advertise "http://127.0.0.1:$port" --db "$pg_uri" --log-level warn)
else
  server_args=(server --listen 127.0.0.1:0 --db "$db" --log-level warn)
fi
# The script registers instances over plain HTTP and plays their agents: the server must place on instances with
# no connected agent (a binary from before that flag placed there anyway).
"$gpupack" server --help 2>/dev/null | grep -q -- --place-on-disconnected && server_args+=(--place-on-disconnected)
[[ -n "$server_threads" ]] && server_args+=(--threads "$server_threads")
bench_start_server runtask_load
if [[ -n "$pg_uri" ]]; then  # a replica takes writes once it leads
  for _ in $(seq 100); do
    curl -sf "$endpoint/readyz" 2>/dev/null | grep -q '"leader"' && break
    sleep 0.1
  done
  curl -sf "$endpoint/readyz" | grep -q '"leader"' || { echo "runtask_load: the server did not lead within 10 s" >&2; exit 1; }
fi
load_endpoint=$endpoint
if (( via_standby )); then
  standby_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  standby_args=(server --listen "127.0.0.1:$standby_port" --advertise "http://127.0.0.1:$standby_port" --db "$pg_uri"
                --log-level warn)
  "$gpupack" "${standby_args[@]}" >"$work/standby.out" 2>"$work/standby.err" &
  standby_pid=$!
  load_endpoint="http://127.0.0.1:$standby_port"
  for _ in $(seq 100); do  # ready as a standby: it knows the leader
    curl -sf "$load_endpoint/readyz" 2>/dev/null | grep -q '"standby"' && break
    sleep 0.1
  done
  curl -sf "$load_endpoint/readyz" | grep -q '"standby"' ||
    { echo "runtask_load: the second server was no ready standby within 10 s" >&2; cat "$work/standby.err" >&2; exit 1; }
fi

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

# Services beside the load: created, their tasks reported RUNNING, steady before wrk starts.
services_line="none"
if (( services > 0 )); then
  node "$here/services_scale.mjs" --attach "$endpoint" --server-pid "$server_pid" --play-agent --cluster "$cluster" \
    --family "$family" --services "$services" --replicas "$replicas" >"$work/services.out" 2>&1 ||
    { echo "runtask_load: the services did not reach a steady state:" >&2; cat "$work/services.out" >&2; exit 1; }
  services_line=$(sed -n 's/^services *//p' "$work/services.out")
  capacity=$((capacity - services * replicas))
fi

# ---- load -----------------------------------------------------------------------------------------------------
metric() { curl -sS "$endpoint/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/${1:-$server_pid}/stat"; }
commits0=$(metric gpupack_store_commits_total)
batches0=$(metric gpupack_store_batches_total)
commit_s0=$(metric 'gpupack_store_commit_duration_seconds_sum{result="ok"}')
ticks0=$(cpu_ticks)
(( via_standby )) && standby_ticks0=$(cpu_ticks "$standby_pid")
pg_statements=0
if (( have_psql )); then
  # pg_stat_statements counts only when the database server preloads it (runtask_pg_compare.sh does).
  pg "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1 &&
    pg "SELECT pg_stat_statements_reset()" >/dev/null 2>&1 && pg_statements=1
  pg "SELECT pg_stat_reset_shared('wal')" >/dev/null
  # The database server's processes (the postmaster's children: backends, WAL writer, checkpointer), for its CPU.
  pg_postmaster=$(awk '{ print $4 }' "/proc/$(pg "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'")/stat" 2>/dev/null || true)
fi
pg_ticks() {  # CPU ticks of the database server's processes on this machine (0 when it is elsewhere)
  [[ -n "${pg_postmaster:-}" ]] || { echo 0; return; }
  local sum=0 pid
  for pid in $(ps --ppid "$pg_postmaster" -o pid= 2>/dev/null); do
    sum=$((sum + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$sum"
}
pg_ticks0=$(pg_ticks)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
GPUPACK_CLUSTER=$cluster GPUPACK_TASKDEF=$family \
  wrk -t "$wrk_threads" -c "$connections" -d "${duration}s" --timeout 10s -s "$here/runtask_load.lua" "$load_endpoint/" \
  >"$work/wrk.out" 2>&1 || { cat "$work/wrk.out" >&2; exit 1; }
ticks1=$(cpu_ticks)
(( via_standby )) && standby_ticks1=$(cpu_ticks "$standby_pid")
pg_ticks1=$(pg_ticks)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
commits1=$(metric gpupack_store_commits_total)
batches1=$(metric gpupack_store_batches_total)
commit_s1=$(metric 'gpupack_store_commit_duration_seconds_sum{result="ok"}')
placements_total=$(metric gpupack_placements_total)
r() { awk -v k="result.$1" '$1 == k { $1 = ""; sub(/^ /, ""); print }' "$work/wrk.out"; }

bench_stop_pid "$standby_pid"
standby_pid=""
kill -TERM "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=""
if [[ -n "$pg_uri" ]]; then
  durability="the PostgreSQL server's settings (database, below); commits fenced by the leader lease"
  database_on="PostgreSQL at ${pg_uri%%\?*}"
else
  journal_mode="(sqlite3 not installed)"
  command -v sqlite3 >/dev/null && journal_mode=$(sqlite3 "$db" 'PRAGMA journal_mode;')
  durability="journal_mode=$journal_mode (read back from the file), synchronous=FULL (SqliteStore sets it on open)"
  database_on="$(df -T "$work" | awk 'NR == 2 { print $2 " (" $1 ")" }'), $(du -sh "$work" | cut -f1) after the run"
fi

# ---- report ---------------------------------------------------------------------------------------------------
hz=$(getconf CLK_TCK)
requests=$(r requests)
secs=$(r duration_s)
commits=$((commits1 - commits0))
batches=$((batches1 - batches0))
server_cpu=$(awk -v a="$ticks0" -v b="$ticks1" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz }')
pg_cpu=$(awk -v a="$pg_ticks0" -v b="$pg_ticks1" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz }')
placed=$(r placed)
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f%%", b ? 100 * a / b : 0 }'; }

cat <<EOF
gpupack RunTask load test ($(date -u +%Y-%m-%dT%H:%M:%SZ))
command          $command_line
machine          $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)
load average     before $load_before, after $load_after (1/5/15 min)
server           $gpupack ${server_args[*]}
durability       $durability
database on      $database_on
cluster          $instances instances x $gpus_per_instance GPUs of $gpu_total_mib MiB, registered in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s
task definition  $family: 1 container, $task_cpu CPU units, $task_mem MiB, nvidiaMps memory $task_gpu_mib MiB
capacity         $capacity tasks of $family ($per_instance per instance$( (( services > 0 )) && echo ", less the services' $((services * replicas))"))
services         $services_line
load             wrk $(wrk -v 2>&1 | head -1 | awk '{print $2}'), $wrk_threads thread(s), $connections keep-alive connections, ${duration} s, RunTask count=1$( (( via_standby )) && echo ", sent to a standby that forwards to the leader")

calls            $requests in $secs s = $(r calls_per_s) calls/s
answers          placed $placed ($(pct "$placed" "$requests")), placement failures $(r placement_failures), HTTP errors $(r http_errors); socket errors $(r socket_errors)
latency (ms)     p50 $(r latency_p50_ms)  p90 $(r latency_p90_ms)  p99 $(r latency_p99_ms)  p99.9 $(r latency_p999_ms)  max $(r latency_max_ms)  mean $(r latency_mean_ms)
placements       server total $placements_total of capacity $capacity ($(pct "$placements_total" "$capacity"))
commits          $commits store commits for $batches write batches during the load ($(awk -v b="$batches" -v c="$commits" 'BEGIN { printf "%.1f", c ? b / c : 0 }') batches per commit, $(awk -v c="$commits" -v s="$secs" 'BEGIN { printf "%.0f", s ? c / s : 0 }') commits/s, mean commit $(awk -v a="${commit_s0:-0}" -v b="${commit_s1:-0}" -v c="$commits" 'BEGIN { printf "%.2f", c ? 1000 * (b - a) / c : 0 }') ms)
server CPU       $server_cpu s during the load = $(awk -v c="$server_cpu" -v s="$secs" 'BEGIN { printf "%.2f", s ? c / s : 0 }') cores
EOF
if (( via_standby )); then
  standby_cpu=$(awk -v a="$standby_ticks0" -v b="$standby_ticks1" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz }')
  echo "standby CPU      $standby_cpu s during the load = $(awk -v c="$standby_cpu" -v s="$secs" 'BEGIN { printf "%.2f", s ? c / s : 0 }') cores (the server the load was sent to)"
fi
pg_report=""
if (( have_psql )); then
  # What the database did during the load: its WAL flushes, and with pg_stat_statements each statement's calls
  # (a round trip each, unless pipelined) and mean execution time inside the database server.
  pg_report+="database         $(pg "SELECT 'PostgreSQL ' || current_setting('server_version') || ', fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit') || ', wal_sync_method=' || current_setting('wal_sync_method') || ', synchronous_standby_names=''' || current_setting('synchronous_standby_names') || ''''")"
  if [[ -n "${pg_postmaster:-}" ]]; then
    pg_report+=$'\n'"database CPU     $pg_cpu s during the load = $(awk -v c="$pg_cpu" -v s="$secs" 'BEGIN { printf "%.2f", s ? c / s : 0 }') cores (the PostgreSQL server's processes)"
  fi
  pg_report+=$'\n'"wal              $(pg "SELECT wal_sync || ' WAL flushes (' || round(wal_sync_time::numeric, 1) || ' ms of them timed), ' || wal_write || ' WAL writes, ' || pg_size_pretty(wal_bytes) FROM pg_stat_wal")"
  if (( pg_statements )); then
    pg_report+=$'\n'"statements       calls, mean ms inside PostgreSQL (pg_stat_statements, during the load):"
    while IFS='|' read -r calls mean query; do
      pg_report+=$'\n'"$(printf '  %9s  %8s ms  %s' "$calls" "$mean" "$query")"
    done < <(pg "SELECT calls, round(mean_exec_time::numeric, 3), left(regexp_replace(query, '\s+', ' ', 'g'), 90) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' AND calls >= 10 ORDER BY calls DESC LIMIT 12")
  fi
fi
if [[ -n "$pg_report" ]]; then printf '%s\n' "$pg_report"; fi
