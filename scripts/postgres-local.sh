#!/usr/bin/env bash
# A throwaway PostgreSQL server for the demo and the tests: loopback only, logical decoding on.
#
#   scripts/postgres-local.sh start DATA_DIR PORT [-c name=value]...  # initdb (first time) and start; waits
#                                                   # until ready; later -c settings override the defaults below
#   scripts/postgres-local.sh stop DATA_DIR         # fast shutdown
#
# initdb refuses to run as root, so as root the server runs as the `postgres` OS user (the Debian
# package creates it) on a data directory that user owns; otherwise as the current user.
# Authentication is `trust` on 127.0.0.1 only: a local test server, never a shared one.
set -euo pipefail

BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
action=${1:?usage: postgres-local.sh start DATA_DIR PORT | stop DATA_DIR}
data=${2:?the data directory}
data=$(realpath -m "$data")

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case "$action" in
  start)
    port=${3:?the port}
    extra="${*:4}"
    if [ ! -x "$BIN/postgres" ]; then
      echo "PostgreSQL 15 is not installed ($BIN/postgres): run make setup" >&2
      exit 1
    fi
    mkdir -p "$data"
    if [ "$(id -u)" -eq 0 ]; then
      chown postgres: "$data"
      if ! runuser -u postgres -- test -w "$data"; then
        echo "the postgres user cannot reach $data (a parent folder is private): use another folder" >&2
        exit 1
      fi
    fi
    chmod 700 "$data"
    if [ ! -f "$data/PG_VERSION" ]; then
      as_owner "$BIN/initdb" --pgdata="$data" --auth=trust --username=postgres --encoding=UTF8 \
        --locale=C.UTF-8 >"$data.initdb.log" 2>&1 || { cat "$data.initdb.log" >&2; exit 1; }
    fi
    as_owner "$BIN/pg_ctl" --pgdata="$data" --log="$data/server.log" --wait --timeout=60 \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='' \
          -c wal_level=logical -c max_replication_slots=20 -c max_wal_senders=20 \
          -c fsync=off -c full_page_writes=off $extra" \
      start >/dev/null || { cat "$data/server.log" >&2; exit 1; }
    ;;
  stop)
    if [ -f "$data/postmaster.pid" ]; then
      as_owner "$BIN/pg_ctl" --pgdata="$data" --mode=fast --wait stop >/dev/null
    fi
    ;;
  *)
    echo "usage: postgres-local.sh start DATA_DIR PORT | stop DATA_DIR" >&2
    exit 2
    ;;
esac
