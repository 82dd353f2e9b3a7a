#!/usr/bin/env bash
# `make demo-postgres`: a real PostgreSQL source end to end on this machine.
# Starts a loopback server with its data under .cdclake/postgres-demo/, loads pgbench's tables and
# a table of awkward values, captures a full load, runs changes (schema changes among them),
# captures them, applies them with `cdclake run`, checks every silver table against the source with
# `cdclake verify`, refreshes a gold mart over the pgbench tables (`cdclake gold`, in full and then
# incrementally after more changes), checks the mart against the same SQL run on PostgreSQL and the
# change history of pgbench_tellers against silver, and stops the server (also on failure).
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
export CDCLAKE_SOURCE="host=127.0.0.1 port=$PORT user=postgres dbname=shop"
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
echo "demo-postgres: history on pgbench_tellers and the mart branch_balances, added to $WORK/cdclake.yaml"
# capture wrote the configuration and leaves it as it is from now on (it only declares new columns' types)
sed -i 's/^  public\.pgbench_tellers:$/&\n    history: true  # shop.pgbench_tellers__history: every version of every row/' "$WORK/cdclake.yaml"
grep -q "^    history: true" "$WORK/cdclake.yaml"
# The mart's SQL (Spark SQL over silver, named as shop.<table>) and MART_PG_SQL (the same on PostgreSQL).
cat >> "$WORK/cdclake.yaml" <<'YAML'
gold:
  # At pgbench's scale (a few MB) a full refresh costs less, and the defaults take it; the demo
  # takes the incremental path whatever the tables' size and the changes, to check it against PostgreSQL.
  full_refresh_below_mb: 0
  full_refresh_share: 1000
marts:
  - name: branch_balances  # each branch row with the sum and count of its accounts' balances
    sql: >-
      SELECT b.bid, b.bbalance, sum(a.abalance) AS accounts_balance, count(*) AS accounts
      FROM shop.pgbench_branches b JOIN shop.pgbench_accounts a ON a.bid = b.bid
      GROUP BY b.bid, b.bbalance
    keys: [bid]  # a GROUP BY of its keys: refreshed incrementally, only the branches whose rows changed
YAML
MART_PG_SQL="SELECT b.bid, b.bbalance, sum(a.abalance) AS accounts_balance, count(*) AS accounts
  FROM pgbench_branches b JOIN pgbench_accounts a ON a.bid = b.bid GROUP BY b.bid, b.bbalance ORDER BY b.bid"
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

lake() { "$CDCLAKE" -q --config "$WORK/cdclake.yaml" --warehouse "$WORK/warehouse" "$@"; }
echo "demo-postgres: cdclake gold (the first refresh computes the mart in full)"
lake gold
echo "demo-postgres: more changes (pgbench -c 2 -t 30), capture, run, and gold again (only the changed branches)"
"$BIN/pgbench" -n -c 2 -t 30 2>&1 | grep -E "^number of transactions actually processed" || true
capture
lake run
lake gold | tee "$WORK/gold.out"
grep -q "branch_balances: refreshed path=incremental" "$WORK/gold.out"

echo "demo-postgres: the mart shop_gold.branch_balances against the same SQL run on PostgreSQL"
lake query --format csv --limit 0 \
  "SELECT bid, bbalance, accounts_balance, accounts FROM shop_gold.branch_balances ORDER BY bid" > "$WORK/mart.csv"
"$BIN/psql" -X -q -v ON_ERROR_STOP=1 --csv -c "$MART_PG_SQL" > "$WORK/mart-postgres.csv"
cat "$WORK/mart.csv"
if ! diff "$WORK/mart.csv" "$WORK/mart-postgres.csv"; then
  echo "demo-postgres: the mart DIFFERS from PostgreSQL (< mart, > PostgreSQL)"
  exit 1
fi
echo "demo-postgres: mart equals PostgreSQL ($(($(wc -l < "$WORK/mart.csv") - 1)) rows): OK"

echo "demo-postgres: the current rows of shop.pgbench_tellers__history against silver"
T="tid, bid, tbalance, filler"
lake query --format csv --limit 0 "SELECT
  (SELECT count(*) FROM (SELECT $T FROM shop.pgbench_tellers__history WHERE is_current
                         EXCEPT ALL SELECT $T FROM shop.pgbench_tellers)) AS history_only,
  (SELECT count(*) FROM (SELECT $T FROM shop.pgbench_tellers
                         EXCEPT ALL SELECT $T FROM shop.pgbench_tellers__history WHERE is_current)) AS silver_only,
  (SELECT count(*) FROM shop.pgbench_tellers) AS tellers,
  (SELECT count(*) FROM shop.pgbench_tellers__history) AS versions" | tee "$WORK/history.csv"
IFS=, read -r history_only silver_only tellers versions < <(tail -n 1 "$WORK/history.csv")
if [ "$history_only" != 0 ] || [ "$silver_only" != 0 ] || [ "$tellers" -eq 0 ]; then
  echo "demo-postgres: history's current rows DIFFER from silver"
  exit 1
fi
echo "demo-postgres: history's current rows equal silver ($tellers tellers, $versions versions kept): OK"
