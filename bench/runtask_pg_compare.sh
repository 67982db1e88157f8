#!/usr/bin/env bash
# runtask_pg_compare.sh: RunTask calls/s and latency on PostgreSQL and on SQLite, with the same load tool
# (bench/runtask_load.sh: wrk, keep-alive connections, durable commits), one run beside the other, and the ratio.
# A benchmark, never a test: it prints figures and setup.
#
# It starts a private PostgreSQL (initdb in a temporary directory, trust authentication, loopback on a free port,
# its socket in that directory; fsync on and synchronous_commit on: durable; pg_stat_statements preloaded and
# track_wal_io_timing on so the report can say where the time goes; as root it runs as user nobody, since
# PostgreSQL refuses root), then for each round runs runtask_load.sh on a fresh PostgreSQL database and on a fresh
# SQLite file, in turn, and prints each run's report and a table of both side by side.
#
# Needs: what runtask_load.sh needs, PostgreSQL's server binaries (Debian: apt-get install postgresql; the newest
# /usr/lib/postgresql/N/bin, or --pg-bin DIR), psql, runuser (as root).
#
# With --via-standby each round also runs the PostgreSQL load through a standby (runtask_load.sh --via-standby).
# With --old-gpupack BIN each round runs the PostgreSQL load with BIN, then with the binary under test (--gpupack,
# else the default), instead of PostgreSQL then SQLite: a change's before and after in one run (the table's
# second column group is then the old binary's).
#
# Usage: bench/runtask_pg_compare.sh [--rounds N] [--pg-bin DIR] [--pg-dir DIR] [--pin CPUS] [--via-standby]
#                                    [--old-gpupack BIN] [runtask_load.sh options]
# --rounds: PostgreSQL then SQLite, N times (default 1). --pg-dir: the parent of PostgreSQL's data directory (default
# $TMPDIR or /tmp: a disk, like SQLite's). --pin CPUS (e.g. 0,1): run the database, the server and wrk under
# taskset -c CPUS, to emulate a machine with those cores. Every other option goes to runtask_load.sh as it is.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
command_line=$(printf '%q ' "$0" "$@")

rounds=1
pg_bin=""
pg_parent="${TMPDIR:-/tmp}"
pin=""
via_standby=0
old_bin=""
load_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --pg-bin) pg_bin="$2"; shift 2 ;;
    --pg-dir) pg_parent="$2"; shift 2 ;;
    --pin) pin="$2"; shift 2 ;;
    --via-standby) via_standby=1; shift ;;
    --old-gpupack) old_bin="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) load_args+=("$1"); shift ;;
  esac
done
if [[ -z "$pg_bin" ]]; then
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
fi
[[ -x "$pg_bin/initdb" && -x "$pg_bin/pg_ctl" ]] || {
  echo "runtask_pg_compare: no PostgreSQL server binaries (initdb, pg_ctl) in '$pg_bin' (Debian: apt-get install postgresql, or --pg-bin DIR)" >&2
  exit 2
}
command -v psql >/dev/null || { echo "runtask_pg_compare: psql is missing (Debian: apt-get install postgresql-client)" >&2; exit 2; }
taskset_cmd=()
[[ -n "$pin" ]] && taskset_cmd=(taskset -c "$pin")

pgdir=$(mktemp -d "$pg_parent/gpupack-pg-bench.XXXXXX")
out=$(mktemp -d "${TMPDIR:-/tmp}/gpupack-pg-compare.XXXXXX")
as_pg=()
if (( EUID == 0 )); then
  chown nobody "$pgdir"
  as_pg=(runuser -u nobody --)
fi
pg_started=0
cleanup() {
  if (( pg_started )); then "${as_pg[@]}" "$pg_bin/pg_ctl" stop -w -m fast -D "$pgdir/data" >/dev/null 2>&1 || true; fi
  rm -rf "$pgdir" "$out"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${as_pg[@]}" "$pg_bin/initdb" -A trust -U postgres -E UTF8 --locale=C -D "$pgdir/data" >"$pgdir/initdb.log" 2>&1 ||
  { cat "$pgdir/initdb.log" >&2; exit 1; }
pg_opts="-p $port -k $pgdir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on -c synchronous_commit=on"
pg_opts+=" -c shared_preload_libraries=pg_stat_statements -c track_wal_io_timing=on -c pg_stat_statements.track_utility=on"
"${as_pg[@]}" "${taskset_cmd[@]}" "$pg_bin/pg_ctl" start -w -t 60 -D "$pgdir/data" -l "$pgdir/log" -o "$pg_opts" >/dev/null ||
  { cat "$pgdir/log" >&2; exit 1; }
pg_started=1

# field FILE KEY N: the Nth word after KEY's column in a runtask_load report.
field() { awk -v k="$2" -v n="$3" 'index($0, k) == 1 { sub("^" k " *", ""); split($0, w, " "); print w[n]; exit }' "$1"; }
latency() { sed -n "s/^latency (ms).* $2 \([0-9.]*\).*/\1/p" "$1"; }

rows=()
for ((round = 1; round <= rounds; round++)); do
  stores=(postgres sqlite)
  [[ -n $old_bin ]] && stores=(postgres_old postgres)
  (( via_standby )) && stores+=(standby)
  for store in "${stores[@]}"; do
    report="$out/$store.$round.txt"
    db_args=()
    if [[ $store != sqlite ]]; then
      psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "CREATE DATABASE ${store}_$round" >/dev/null
      db_args=(--db "postgresql://postgres@127.0.0.1:$port/${store}_$round")
      [[ $store == standby ]] && db_args+=(--via-standby)
      [[ $store == postgres_old ]] && db_args+=(--gpupack "$old_bin")
    fi
    echo "== round $round: $store" >&2
    "${taskset_cmd[@]}" "$here/runtask_load.sh" "${load_args[@]}" "${db_args[@]}" >"$report"
    cat "$report"
    echo
  done
  pgr="$out/postgres.$round.txt" sqr="$out/sqlite.$round.txt"
  [[ -n $old_bin ]] && sqr="$out/postgres_old.$round.txt"
  rows+=("$(printf '%-5s %-16s %9s %7s %7s %9s %7s %7s %7s  %s / %s' "$round" \
    "$(sed -n 's/^load average *before \([0-9.]*\).*/\1/p' "$pgr")" \
    "$(field "$pgr" calls 6)" "$(latency "$pgr" p50)" "$(latency "$pgr" p99)" \
    "$(field "$sqr" calls 6)" "$(latency "$sqr" p50)" "$(latency "$sqr" p99)" \
    "$(awk -v a="$(field "$pgr" calls 6)" -v b="$(field "$sqr" calls 6)" 'BEGIN { printf "%.2f", b ? a / b : 0 }')" \
    "$(sed -n 's/^commits.*(\([0-9.]*\) batches per commit.*/\1/p' "$pgr")" \
    "$(sed -n 's/^commits.*(\([0-9.]*\) batches per commit.*/\1/p' "$sqr")")")
  if (( via_standby )); then
    sbr="$out/standby.$round.txt"
    rows+=("$(printf '%-5s %-16s %9s %7s %7s   (PostgreSQL through a standby)' "$round" \
      "$(sed -n 's/^load average *before \([0-9.]*\).*/\1/p' "$sbr")" \
      "$(field "$sbr" calls 6)" "$(latency "$sbr" p50)" "$(latency "$sbr" p99)")")
  fi
done

if [[ -n $old_bin ]]; then
  echo "RunTask, durable, PostgreSQL: the old binary beside the new one ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
else
  echo "RunTask, durable, PostgreSQL beside SQLite ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
fi
echo "command  $command_line"
echo "database PostgreSQL $("$pg_bin/postgres" --version | awk '{ print $3 }'), data in $pgdir ($(df -T "$pgdir" | awk 'NR == 2 { print $2 }')), fsync=on, synchronous_commit=on${pin:+; everything under taskset -c $pin}"
if [[ -n $old_bin ]]; then
  echo "old binary $old_bin: its PostgreSQL runs are the second group (new/old in the ratio column)"
  printf '%-5s %-16s %9s %7s %7s %9s %7s %7s %7s  %s\n' round "load before" "new c/s" "p50 ms" "p99 ms" "old c/s" "p50 ms" "p99 ms" "new/old" "batches per commit new / old"
else
  printf '%-5s %-16s %9s %7s %7s %9s %7s %7s %7s  %s\n' round "load before" "PG c/s" "p50 ms" "p99 ms" "SQLite" "p50 ms" "p99 ms" "PG/SQL" "batches per commit PG / SQLite"
fi
printf '%s\n' "${rows[@]}"
