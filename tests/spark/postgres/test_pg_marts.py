"""Gold over a real PostgreSQL source, through the AWS Glue entry points (full load, CDC, gold) on local Spark.

The oracle is PostgreSQL itself: the mart must equal the same SQL run on the source database. The change
history kept for pgbench_tellers must have silver's rows as its current rows.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from local_databases import PG_BIN

REPO = Path(__file__).resolve().parents[3]
SourceDatabase = Any  # conftest.SourceDatabase (a conftest cannot be imported by name)

MART_SQL = """SELECT b.bid, b.bbalance, sum(a.abalance) AS accounts_balance, count(*) AS accounts
      FROM {database}.pgbench_branches b JOIN {database}.pgbench_accounts a ON a.bid = b.bid
      GROUP BY b.bid, b.bbalance"""
POSTGRES_SQL = MART_SQL.format(database="public") + " ORDER BY b.bid"
TELLER_COLUMNS = "tid, bid, tbalance, filler"


def _entry_point(name: str) -> dict[str, Any]:
    return runpy.run_path(str(REPO / "glue" / "jobs" / f"{name}.py"), run_name=f"job_{name}")


def _add_gold(config: Path, database: str, broken: bool = False) -> None:
    """History on pgbench_tellers, the mart branch_balances (and a mart whose SQL does not compile)."""
    text = config.read_text("utf-8")
    if "history: true" not in text:
        text = text.replace("  public.pgbench_tellers:\n", "  public.pgbench_tellers:\n    history: true\n", 1)
        assert "history: true" in text, text
        sql = MART_SQL.format(database=database)
        # The incremental path whatever the tables' size and the share of them the changes touch
        # (at pgbench's scale the defaults refresh in full): this test checks its result.
        text += "gold:\n  full_refresh_share: 1000\n  full_refresh_below_mb: 0\n"
        text += f"marts:\n  - name: branch_balances\n    sql: >-\n      {sql}\n    keys: [bid]\n"
    if broken:  # a column the table does not have: the configuration parses, the SQL no longer compiles
        text += f"  - name: broken\n    sql: SELECT bid, no_such_column FROM {database}.pgbench_branches\n"
    config.write_text(text, "utf-8")


def _postgres_rows(db: SourceDatabase) -> list[tuple[Any, ...]]:
    conn = db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(POSTGRES_SQL)
            return [tuple(row) for row in cur.fetchall()]
    finally:
        conn.close()


def _rows(spark: SparkSession, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in spark.sql(sql).collect()]


def test_pgbench_mart_equals_postgres_and_history_current_rows_equal_silver(
    spark: SparkSession, source_db: SourceDatabase, tmp_path: Path
) -> None:
    # GIVEN pgbench's database captured once, then history on pgbench_tellers and a mart over the pgbench tables
    env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(source_db.server.port), "PGUSER": "postgres"}
    pgbench = [str(PG_BIN / "pgbench"), "-d", source_db.name]
    subprocess.run([*pgbench[:1], "-i", "-s", "1", "-q", *pgbench[1:]], env=env, check=True, capture_output=True)
    source_db.capture()
    database = source_db.name  # capture names the silver database after the source database
    _add_gold(source_db.config_path, database)
    # AND 4 pgbench clients run 40 transactions each, captured
    subprocess.run([*pgbench, "-n", "-c", "4", "-t", "40"], env=env, check=True, capture_output=True)
    source_db.capture()
    catalog = f"pg{uuid.uuid4().hex[:8]}"
    common = ["--config", str(source_db.config_path), "--bronze", str(source_db.bronze)]
    common += ["--warehouse", str(tmp_path / "warehouse"), "--catalog", catalog]
    # WHEN the Glue jobs run as the state machine runs them: full load, CDC, gold
    _entry_point("full_load")["main"](["full_load.py", *common])
    _entry_point("cdc")["main"](["cdc.py", *common])
    gold = _entry_point("gold")
    [first] = gold["main"](["gold.py", *common])
    # THEN the mart was computed in full, in <database>_gold, and equals the same SQL run on PostgreSQL
    assert (first.mart, first.outcome, first.path) == (f"{database}_gold.branch_balances", "refreshed", "full")
    mart = f"SELECT bid, bbalance, accounts_balance, accounts FROM {catalog}.{database}_gold.branch_balances"
    expected = _postgres_rows(source_db)
    assert expected and _rows(spark, mart + " ORDER BY bid") == expected
    # AND the history's current rows equal silver, and it kept more versions than there are tellers
    silver = f"{catalog}.{database}.pgbench_tellers"
    current = _rows(spark, f"SELECT {TELLER_COLUMNS} FROM {silver}__history WHERE is_current ORDER BY tid")
    assert current == _rows(spark, f"SELECT {TELLER_COLUMNS} FROM {silver} ORDER BY tid")
    assert len(current) == 10
    [(versions,)] = _rows(spark, f"SELECT count(*) FROM {silver}__history")
    assert versions > len(current)

    # WHEN more changes are captured and applied, a broken mart is added, and the gold job runs again
    subprocess.run([*pgbench, "-n", "-c", "2", "-t", "20"], env=env, check=True, capture_output=True)
    source_db.capture()
    _add_gold(source_db.config_path, database, broken=True)
    _entry_point("cdc")["main"](["cdc.py", *common])
    with pytest.raises(gold["MartsFailed"], match=rf"1 of 2 gold mart\(s\) failed.*{database}_gold\.broken: its SQL"):
        gold["main"](["gold.py", *common])
    # THEN the good mart was still refreshed, group by group, and equals PostgreSQL again
    [(path, groups)] = _rows(
        spark,
        f"SELECT summary['cdclake.gold.path'], summary['cdclake.gold.groups'] "
        f"FROM {catalog}.{database}_gold.branch_balances.snapshots ORDER BY committed_at DESC LIMIT 1",
    )
    assert (path, groups) == ("incremental", "1")
    assert _rows(spark, mart + " ORDER BY bid") == _postgres_rows(source_db)
    # AND history still mirrors silver
    current = _rows(spark, f"SELECT {TELLER_COLUMNS} FROM {silver}__history WHERE is_current ORDER BY tid")
    assert current == _rows(spark, f"SELECT {TELLER_COLUMNS} FROM {silver} ORDER BY tid")
