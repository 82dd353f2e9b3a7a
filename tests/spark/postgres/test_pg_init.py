"""``cdclake init`` on a real PostgreSQL: the configuration it writes (no hand edit) applies the
capture's DMS-format files, and silver equals the database (``verify``: the database is the oracle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cdclake.config import load_config
from cdclake.shells.cli import main
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison

SourceDatabase = Any  # conftest.SourceDatabase
Verify = Callable[[SourceDatabase], list[TableComparison]]

SCHEMA = """
CREATE SCHEMA sales;
CREATE TYPE sales.state AS ENUM ('new', 'paid', 'shipped');
CREATE TABLE sales.order_lines (
    order_id bigint, line smallint, qty int NOT NULL, price numeric(12,2), exact numeric,
    ratio double precision, weight real, paid boolean, code char(3), note varchar(80), body text,
    due date, local_at timestamp, placed_at timestamptz, at_time time, payload bytea, doc jsonb,
    ref uuid, state sales.state, total numeric(14,2) GENERATED ALWAYS AS (qty * price) STORED,
    PRIMARY KEY (order_id, line));
CREATE TABLE sales.audit (at timestamptz, what text);
CREATE TABLE sales.tmp_import (id int PRIMARY KEY);
CREATE TABLE public.other (id int PRIMARY KEY);
"""

ROWS = """
INSERT INTO sales.order_lines (order_id, line, qty, price, exact, ratio, weight, paid, code, note, body, due,
    local_at, placed_at, at_time, payload, doc, ref, state) VALUES
 (1, 1, 2, 19.99, 1.5, 0.25, 1.5, true, 'abc', 'first, "quoted"', E'two\\nlines', '2024-02-29',
  '2024-02-29 23:59:59.123456', '2024-02-29 23:59:59.5+02', '12:34:56', '\\x00ff10', '{"a": [1, 2]}',
  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'paid'),
 (1, 2, 1, -0.01, -123456.654321, -1e300, -3.25, false, 'x', '', '', '1970-01-01',
  '1970-01-01 00:00:00', '1999-12-31 23:00:00-05', '00:00:00', '\\x', '[]', NULL, 'new'),
 (9223372036854775807, -32768, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL);
INSERT INTO sales.audit VALUES ('2024-01-01 00:00:00+00', 'created'), (NULL, NULL);
"""


def test_init_then_capture_then_run_equals_the_database(source_db: SourceDatabase, apply_and_verify: Verify) -> None:
    # GIVEN a PostgreSQL database with the types people use, a composite key and a keyless table
    source_db.execute(SCHEMA, ROWS)
    url = f"postgresql://postgres@127.0.0.1:{source_db.server.port}/{source_db.name}"
    config = ["-q", "--config", str(source_db.config_path)]
    # WHEN init writes the configuration for sales.* without the temporary tables
    assert main([*config, "init", "--source", url, "--include", "sales.*", "--exclude", "*.tmp_*"]) == 0
    written = load_config(source_db.config_path)
    assert [t.source for t in written.tables] == ["sales.audit", "sales.order_lines"]
    lines = written.table("sales.order_lines")
    assert lines.primary_key == ("order_id", "line") and written.table("sales.audit").append_only
    assert (lines.columns["exact"], lines.columns["placed_at"], lines.columns["local_at"]) == (
        "string",  # unconstrained numeric: exact as text
        "timestamp",
        "timestamp_ntz",
    )
    # AND capture writes the DMS-format files (full load, then CDC), and run applies them
    source_db.capture(tables=("sales.order_lines", "sales.audit"))
    source_db.execute(
        "UPDATE sales.order_lines SET qty = 5, note = 'changed' WHERE line = 1",
        "DELETE FROM sales.order_lines WHERE line = 2",
        "INSERT INTO sales.order_lines (order_id, line, qty, price) VALUES (2, 1, 3, 1.25)",
        "INSERT INTO sales.audit VALUES (now(), 'more')",
    )
    source_db.capture(tables=("sales.order_lines", "sales.audit"))
    results = apply_and_verify(source_db)
    # THEN silver equals the database, table by table, with no hand edit of the configuration
    assert len(results) == 2 and all(r.equal for r in results), format_comparisons(results)
    assert {r.table: r.source_rows for r in results} == {"sales.audit": 3, "sales.order_lines": 3}
    # AND --check finds no drift until the source changes, then names the change
    assert main([*config, "init", "--source", url, "--include", "sales.*", "--check"]) == 1  # tmp_import is new
    assert main([*config, "init", "--source", url, "--include", "sales.*", "--exclude", "*.tmp_*", "--check"]) == 0
    source_db.execute("ALTER TABLE sales.order_lines ADD COLUMN region text")
    assert main([*config, "init", "--source", url, "--include", "sales.*", "--exclude", "*.tmp_*", "--check"]) == 1
