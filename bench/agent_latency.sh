#!/usr/bin/env bash
# agent_latency.sh: RunTask -> RUNNING latency with a real `gpupack agent` and the process runtime, on loopback.
# A benchmark, never a test: it prints figures and setup.
#
# It starts `gpupack server` on a fresh database in a temporary directory (--log-level warn) and one
# `gpupack agent` (--gpus fake:8x81559, so the MPS daemon is simulated; --runtime process; 65,536 CPU units,
# 262,144 MiB) in its own state directory, then runs bench/agent_latency.mjs (node 20): a shared task definition
# whose container is `/bin/sh -c "exec sleep 30"`, and --iterations rounds of RunTask, DescribeTasks every
# --poll-ms until RUNNING, StopTask, DescribeTasks until STOPPED. One task at a time, so the agent is idle at
# every RunTask. It prints p50/p90/p99/max, where the time goes (the server's createdAt and startedAt, the
# RunTask answer, the agent's log line), the polling resolution, and the machine.
#
# Needs: node 20, the Release build (configured and built here when missing).
# Figures and how to read them: docs/benchmarks.md, section 3.
#
# Usage: bench/agent_latency.sh [--gpupack PATH] [--iterations N] [--poll-ms MS] [--dir DIR] [--keep]
# Defaults: build-bench/gpupack, 200 iterations, 2 ms between polls, the database under $TMPDIR or /tmp.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
command_line=$(printf '%q ' "$0" "$@")

gpupack="$root/build-bench/gpupack"
iterations=200
poll_ms=2
parent_dir="${TMPDIR:-/tmp}"
keep=0
cluster=bench-latency

while [[ $# -gt 0 ]]; do
  case "$1" in
    --gpupack) gpupack="$2"; shift 2 ;;
    --iterations) iterations="$2"; shift 2 ;;
    --poll-ms) poll_ms="$2"; shift 2 ;;
    --dir) parent_dir="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "agent_latency: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

command -v node >/dev/null || { echo "agent_latency: node (20) is missing" >&2; exit 2; }
if [[ ! -x "$gpupack" ]]; then
  if [[ "$gpupack" == "$root/build-bench/gpupack" ]]; then
    echo "agent_latency: building $gpupack (Release)" >&2
    cmake -S "$root" -B "$root/build-bench" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUPACK_BUILD_TESTS=OFF \
      -DGPUPACK_BUILD_BENCH=ON >/dev/null
    cmake --build "$root/build-bench" --target gpupack -j"$(nproc)" >/dev/null
  else
    echo "agent_latency: no gpupack binary at $gpupack" >&2; exit 2
  fi
fi

work=$(mktemp -d "$parent_dir/gpupack-agent-latency.XXXXXX")
server_pid=""
agent_pid=""
cleanup() {
  bench_stop_pid "$agent_pid"
  bench_stop_pid "$server_pid"
  if (( keep )); then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# ---- server and agent -----------------------------------------------------------------------------------------
server_args=(server --listen 127.0.0.1:0 --db "$work/gpupack.db" --log-level warn)
bench_start_server agent_latency

mkdir -p "$work/agent" "$work/mps"
agent_args=(agent --server "$endpoint" --cluster "$cluster" --gpus fake:8x81559 --runtime process
            --state-dir "$work/agent" --mps-pipe-dir "$work/mps" --cpu 65536 --memory 262144 --name bench
            --log-level info)
# TZ=UTC: the script reads the agent's log timestamps (local time) as UTC.
TZ=UTC "$gpupack" "${agent_args[@]}" >"$work/agent.log" 2>&1 &
agent_pid=$!

# ---- rounds ---------------------------------------------------------------------------------------------------
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
t0=$(date +%s.%N)
server_ticks0=$(cpu_ticks "$server_pid")
node "$here/agent_latency.mjs" "$endpoint" "$cluster" "$iterations" "$poll_ms" "$work/agent.log" >"$work/result.txt" 2>"$work/node.err" ||
  { echo "agent_latency: the client failed:" >&2; cat "$work/node.err" >&2; tail -20 "$work/agent.log" >&2; exit 1; }
server_ticks1=$(cpu_ticks "$server_pid")
agent_ticks=$(cpu_ticks "$agent_pid")
t1=$(date +%s.%N)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
hz=$(getconf CLK_TCK)

cat <<EOF
gpupack RunTask -> RUNNING latency ($(date -u +%Y-%m-%dT%H:%M:%SZ))
command          $command_line
code             $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo " + working-tree edits"), $gpupack
machine          $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(uname -sr)
load average     before $load_before, after $load_after (1/5/15 min)
server           $gpupack ${server_args[*]}
agent            $gpupack ${agent_args[*]}
database on      $(df -T "$work" | awk 'NR == 2 { print $2 " (" $1 ")" }')
task             1 container: /bin/sh -c "exec sleep 30", 256 CPU units, 128 MiB, nvidiaMps memory 2048 MiB
client           node $(node --version), node:http on one keep-alive connection, DescribeTasks every $poll_ms ms
run              $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s; CPU used: server $(awk -v a="$server_ticks0" -v b="$server_ticks1" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz }') s, agent $(awk -v a="$agent_ticks" -v hz="$hz" 'BEGIN { printf "%.1f", a / hz }') s (since its start)

EOF
cat "$work/result.txt"
