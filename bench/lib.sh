# lib.sh: what bench/runtask_load.sh and bench/agent_latency.sh share, sourced by both (not run on its own).
#
# bench_stop_pid PID        SIGTERM to PID if it is alive, then wait for it (the server and the agent both stop
#                           on SIGTERM). PID may be empty.
# bench_start_server TOOL   starts "$gpupack" "${server_args[@]}" in the background, its stdout and stderr in
#                           $work/server.out and $work/server.err, and waits up to 10 s for its banner. Sets
#                           server_pid at once (so the caller's EXIT trap can stop it) and endpoint
#                           (http://127.0.0.1:PORT). When the server exits first, or prints no endpoint in time,
#                           it says so on stderr, prefixed with TOOL, and exits 1.
# The caller sets gpupack, work and server_args first.

bench_stop_pid() {
  if [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; then
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
  fi
}

bench_start_server() {
  local tool=$1
  "$gpupack" "${server_args[@]}" >"$work/server.out" 2>"$work/server.err" &
  server_pid=$!
  endpoint=""
  for _ in $(seq 100); do
    endpoint=$(sed -n 's/^ *ECS API *\(http:\/\/[^ ]*\).*/\1/p' "$work/server.out" 2>/dev/null | head -1)
    [[ -n "$endpoint" ]] && break
    kill -0 "$server_pid" 2>/dev/null || { echo "$tool: the server exited:" >&2; cat "$work/server.err" >&2; exit 1; }
    sleep 0.1
  done
  [[ -n "$endpoint" ]] || { echo "$tool: the server printed no endpoint within 10 s" >&2; exit 1; }
}
