#!/usr/bin/env bash
# shared_postgres.sh start|stop DIR: one private PostgreSQL for a whole ctest run, shared by every test process
# of the PostgreSQL store's tests (ctest fixture `shared_postgres`, tests/CMakeLists.txt).
#
# gtest_discover_tests runs each test case in a process of its own, so a server per test binary
# (PrivatePostgresTest) would still be an initdb and a start per test case: about 2.5 s each on a 2-core
# machine, for some 40 cases. With this fixture the server is made once; each test takes a database of its own
# on it (tests/unit/private_postgres.h reads DIR/port through $GPUPACK_TEST_PG). Tests that stop or kill their
# database start a server of their own as before.
#
#   start: initdb in DIR/data (trust, user postgres, fsync off), `pg_ctl start` on a free loopback port, its
#          unix socket in DIR; writes the port to DIR/port last. Without PostgreSQL's binaries it writes nothing
#          and exits 0: the tests then skip, saying why, as they do without the fixture.
#   stop:  `pg_ctl stop -m fast` and removes DIR.
# As root, initdb and postgres run as `nobody` (PostgreSQL refuses root). Binaries: $GPUPACK_PG_BIN, else the
# newest /usr/lib/postgresql/N/bin.
set -euo pipefail
action=${1:?usage: shared_postgres.sh start|stop DIR}
dir=${2:?usage: shared_postgres.sh start|stop DIR}

bin=${GPUPACK_PG_BIN:-}
if [[ -z $bin ]]; then
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n); do
    [[ -x $d/initdb ]] && bin=$d
  done
fi

as_pg() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u nobody -- "$@"; else "$@"; fi
}

stop() {
  if [[ -n $bin && -f $dir/data/postmaster.pid ]]; then
    as_pg "$bin/pg_ctl" stop -w -m fast -D "$dir/data" >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case "$action" in
  start)
    stop
    if [[ -z $bin ]]; then
      echo "shared_postgres: no PostgreSQL binaries (/usr/lib/postgresql/N/bin); the PostgreSQL tests will skip"
      exit 0
    fi
    mkdir -p "$dir"
    [[ $(id -u) -ne 0 ]] || chown nobody "$dir"
    as_pg "$bin/initdb" -A trust -U postgres -E UTF8 --no-sync -D "$dir/data" >"$dir/initdb.log" 2>&1 ||
      {
        cat "$dir/initdb.log"
        exit 1
      }
    for attempt in 1 2 3 4 5; do  # a free port can be taken between the probe and the start
      port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
      if as_pg "$bin/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/log" -o "-p $port -k $dir \
          -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off -c full_page_writes=off" >/dev/null; then
        echo "$port" >"$dir/port.tmp" && mv "$dir/port.tmp" "$dir/port"
        echo "shared_postgres: PostgreSQL on 127.0.0.1:$port (attempt $attempt), data in $dir/data"
        exit 0
      fi
    done
    cat "$dir/log"
    exit 1
    ;;
  stop) stop ;;
  *)
    echo "usage: shared_postgres.sh start|stop DIR" >&2
    exit 2
    ;;
esac
