#!/usr/bin/env bash
# A throwaway MariaDB server for the tests: loopback only, no grant tables (any user name, no password).
#
#   scripts/mariadb-local.sh start DATA_DIR PORT   # mariadb-install-db (first time) and start; waits until ready
#   scripts/mariadb-local.sh stop DATA_DIR         # shutdown
#
# mariadbd refuses to run as root, so as root the server runs as the `mysql` OS user (the Debian package
# creates it) on a data directory that user owns; otherwise as the current user.
# --skip-grant-tables: every connection has every privilege. A local test server, never a shared one.
set -euo pipefail

action=${1:?usage: mariadb-local.sh start DATA_DIR PORT | stop DATA_DIR}
data=${2:?the data directory}
data=$(realpath -m "$data")
run_dir="$data.run"

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u mysql -- "$@"
  else
    "$@"
  fi
}

case "$action" in
  start)
    port=${3:?the port}
    if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
      echo "MariaDB is not installed (mariadbd): run make setup" >&2
      exit 1
    fi
    mkdir -p "$data" "$run_dir"
    if [ "$(id -u)" -eq 0 ]; then
      chown mysql: "$data" "$run_dir"
      if ! runuser -u mysql -- test -w "$data"; then
        echo "the mysql user cannot reach $data (a parent folder is private): use another folder" >&2
        exit 1
      fi
    fi
    if [ ! -d "$data/mysql" ]; then
      as_owner mariadb-install-db --no-defaults --datadir="$data" --auth-root-authentication-method=normal \
        --skip-test-db >"$data.install.log" 2>&1 || { cat "$data.install.log" >&2; exit 1; }
    fi
    # --no-defaults: the machine's my.cnf (a system service's settings) is not read.
    as_owner /usr/sbin/mariadbd --no-defaults --datadir="$data" --bind-address=127.0.0.1 --port="$port" \
      --socket="$run_dir/mysqld.sock" --pid-file="$run_dir/mysqld.pid" --skip-grant-tables \
      --log-error="$data/server.log" --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
      --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=0 --skip-log-bin >/dev/null 2>&1 &
    for _ in $(seq 1 120); do
      if [ -S "$run_dir/mysqld.sock" ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        exit 0
      fi
      sleep 0.5
    done
    echo "MariaDB did not start on 127.0.0.1:$port" >&2
    cat "$data/server.log" >&2 || true
    exit 1
    ;;
  stop)
    if [ -f "$run_dir/mysqld.pid" ]; then
      pid=$(cat "$run_dir/mysqld.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || exit 0
        sleep 0.5
      done
    fi
    ;;
  *)
    echo "usage: mariadb-local.sh start DATA_DIR PORT | stop DATA_DIR" >&2
    exit 2
    ;;
esac
