#!/usr/bin/env bash
# `make demo-postgres`: a real PostgreSQL source end to end on this machine.
# Starts a loopback server with its data under .cdclake/postgres-demo/, loads pgbench's tables and
# a table of awkward values, captures a full load, runs changes (schema changes among them),
# captures them, applies them with `cdclake run`, checks every silver table against the source with
# `cdclake verify`, and stops the server (also on failure).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
WORK=.cdclake/postgres-demo
CDCLAKE=.venv/bin/cdclake
PORT=${CDCLAKE_DEMO_PG_PORT:-$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}

scripts/postgres-local.sh stop "$WORK/data" 2>/dev/null || true
rm -rf "$WORK"
mkdir -p "$WORK"
scripts/postgres-local.sh start "$WORK/data" "$PORT"
trap 'scripts/postgres-local.sh stop "$WORK/data"' EXIT

export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=shop
export CDCLAKE_PG_DSN="host=127.0.0.1 port=$PORT user=postgres dbname=shop"
"$BIN/createdb" shop
echo "demo-postgres: pgbench -i -s 1 and a table of awkward values"
"$BIN/pgbench" -i -s 1 -q 2>&1 | tail -1
"$BIN/psql" -q -v ON_ERROR_STOP=1 <<'SQL'
CREATE TABLE orders (region text, order_id int, note text, amount numeric(12,2), placed_at timestamptz,
                     paid boolean, payload bytea, doc jsonb, PRIMARY KEY (region, order_id));
INSERT INTO orders VALUES
  ('eu', 1, 'plain', 10.50, '2024-03-01 10:00:00+01', true, '\x00ff', '{"a": 1}'),
  ('eu', 2, 'a, "quoted"
multi-line note', NULL, NULL, NULL, NULL, NULL),
  ('us', 1, 'ünïcødé ✓', -0.01, '2024-03-01 10:00:00-08', false, '', '[]');
SQL

capture() { "$CDCLAKE" -q --config "$WORK/cdclake.yaml" --bronze "$WORK/bronze" capture --state-dir "$WORK/capture"; }
echo "demo-postgres: capture (creates the slot, full load from its snapshot, writes $WORK/cdclake.yaml)"
capture
echo "demo-postgres: changes at the source (pgbench -c 4 -t 50, key changes, deletes, re-inserts, ADD/ALTER TYPE/DROP COLUMN)"
"$BIN/pgbench" -n -c 4 -t 50 2>&1 | grep -E "^number of transactions actually processed" || true
"$BIN/psql" -q -v ON_ERROR_STOP=1 <<'SQL'
UPDATE orders SET order_id = 10 WHERE region = 'eu' AND order_id = 1;
DELETE FROM orders WHERE region = 'us' AND order_id = 1;
INSERT INTO orders VALUES ('us', 1, 'back again', 1.00, now(), true, '\x01', '{"again": true}');
UPDATE orders SET note = NULL, amount = 99.99 WHERE region = 'eu' AND order_id = 2;
-- schema changes mid-workload: capture follows them (header rows, types declared in cdclake.yaml)
ALTER TABLE orders ADD COLUMN qty int;
INSERT INTO orders VALUES ('apac', 1, 'added qty', 5.00, now(), true, NULL, '{}', 3);
ALTER TABLE orders ALTER COLUMN qty TYPE bigint;
UPDATE orders SET qty = 1099511627776 WHERE region = 'apac' AND order_id = 1;
ALTER TABLE orders DROP COLUMN doc;
UPDATE orders SET note = 'after the drop' WHERE region = 'eu' AND order_id = 2;
SQL
echo "demo-postgres: capture the changes"
capture
echo "demo-postgres: cdclake run"
"$CDCLAKE" -q --config "$WORK/cdclake.yaml" --warehouse "$WORK/warehouse" run
echo "demo-postgres: cdclake verify (silver against the source database)"
"$CDCLAKE" -q --config "$WORK/cdclake.yaml" --warehouse "$WORK/warehouse" verify
