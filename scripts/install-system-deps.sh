#!/usr/bin/env bash
# System packages the project needs that pip cannot provide: a Java runtime for Spark and
# PostgreSQL 15 for the local change-capture source, MariaDB for the `cdclake init` tests.
# Installs only what is missing, so it is a no-op on a prepared machine.
set -euo pipefail

need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
# PostgreSQL 15 (server, pgbench, pgoutput): the local source for `make demo-postgres` and its tests.
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
# MariaDB 10.11 (server and mariadb-install-db): the MySQL-family source of the `cdclake init` tests.
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
  echo "cdclake needs: ${need[*]}. Install them with your package manager and run make again." >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if command -v apt-get >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
else
  echo "cdclake needs: ${need[*]}. Install it with your package manager and run make again." >&2
  exit 1
fi
