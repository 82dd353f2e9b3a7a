"""PostgreSQL -> capture -> bronze -> cdclake run -> silver, checked against the source database.

The oracle is the source database itself (``cdclake.verify.postgres.dialect``), never the capture's own output.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdclake.sources.postgres.change_stream import ChangeCapture
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison
from local_databases import PG_BIN
from pg_transfers import start_capture

SourceDatabase = Any  # conftest.SourceDatabase (a conftest cannot be imported by name)
Verify = Callable[[SourceDatabase], list[TableComparison]]


def _assert_equal(results: list[TableComparison]) -> None:
    assert results and all(r.equal for r in results), format_comparisons(results)


def _cdc_files(bronze: Path) -> list[Path]:
    return sorted(p for p in bronze.rglob("*.csv") if not p.name.startswith("LOAD"))


def test_pgbench_workload_is_captured_applied_and_verified(source_db: SourceDatabase, apply_and_verify: Verify) -> None:
    # GIVEN pgbench's TPC-B-like database, captured once (slot + full load from its snapshot)
    env = {**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(source_db.server.port), "PGUSER": "postgres"}
    pgbench = [str(PG_BIN / "pgbench"), "-d", source_db.name]
    subprocess.run([*pgbench[:1], "-i", "-s", "1", "-q", *pgbench[1:]], env=env, check=True, capture_output=True)
    first = source_db.capture()
    assert first.load_rows == 100_000 + 10 + 1  # accounts, tellers, branches; history is empty
    # WHEN 4 clients run 40 transactions each, and the changes are captured and applied
    subprocess.run([*pgbench, "-n", "-c", "4", "-t", "40"], env=env, check=True, capture_output=True)
    second = source_db.capture()
    assert second.transactions == 160 and second.changes == 160 * 4
    results = apply_and_verify(source_db)
    # THEN every silver table equals its source table, pgbench_history (no key) as append-only rows
    _assert_equal(results)
    assert {r.table: r.source_rows for r in results}["public.pgbench_history"] == 160
    assert "append_only: true" in source_db.config_path.read_text()
    # AND a change that was not captured is reported by key (verify can fail)
    source_db.execute("UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1")
    conn = source_db.connect()
    try:
        from cdclake.verify.postgres.dialect import verify

        engine_results = verify(_engine_of(apply_and_verify, source_db), conn)
    finally:
        conn.close()
    branches = next(r for r in engine_results if r.table == "public.pgbench_branches")
    assert branches.different == ["bid=1"] and not branches.missing and not branches.unexpected


def _engine_of(apply_and_verify: Verify, db: SourceDatabase):  # type: ignore[no-untyped-def]
    """The engine the fixture built for ``db`` (read back from the closure)."""
    cells = apply_and_verify.__closure__ or ()
    engines = next(c.cell_contents for c in cells if isinstance(c.cell_contents, dict))
    return engines[db.name]


SCHEMA = """
CREATE TABLE orders (
    region text, order_id int, status varchar(40), amount numeric(12,2), ratio double precision,
    weight real, exact numeric, placed_at timestamptz, local_at timestamp, due date, paid boolean,
    payload bytea, doc jsonb, tags text[], ref uuid, code char(4), big bigint, small smallint,
    PRIMARY KEY (region, order_id));
CREATE TABLE notes (id bigint PRIMARY KEY, body text, version int);
ALTER TABLE notes REPLICA IDENTITY FULL;
CREATE TABLE events (at timestamptz, message text);
"""

TEXTS = ["plain", "a, b", 'say "x"', "multi\nline", "", "ünïcødé ✓ 日本", "tab\there", "back\\slash", "NULL", None]


def _order_values(rng: random.Random, region: str, order_id: int) -> str:
    def lit(value: object) -> str:
        if value is None:
            return "NULL"
        return "'" + str(value).replace("'", "''") + "'"

    zone = rng.choice(["+00", "+05:30", "-08", "+14"])
    stamp = f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 1{rng.randint(0, 9)}:00:00.{rng.randint(0, 999999):06d}"
    values = [
        lit(region), str(order_id), lit(rng.choice(TEXTS)),
        lit(rng.choice([None, f"{rng.randint(-(10**9), 10**9) / 100:.2f}"])),
        lit(rng.choice([None, rng.random() * 1e6, -0.0, 1e-300])), lit(rng.choice([None, 1.1, 3.4e38, rng.random()])),
        lit(rng.choice([None, "0.000000000001", "123456789012345678901234567890.123456789", "-5"])),
        lit(rng.choice([None, stamp + zone])),
        lit(rng.choice([None, "1999-12-31 23:59:59.5", "2024-02-29 00:00:00"])),
        lit(rng.choice([None, "2024-02-29", "1970-01-01"])), lit(rng.choice([None, True, False])),
        rng.choice(["NULL", "'\\x00ff10'::bytea", "''::bytea", "convert_to('ü,\"x\"', 'UTF8')"]),
        lit(rng.choice([None, '{"a": [1, 2.50, "x,y"], "b": null}', "[]"])),
        lit(rng.choice([None, '{a,"b c",NULL}', "{}"])),
        lit(rng.choice([None, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"])),
        lit(rng.choice([None, "ab", "abcd"])), lit(rng.choice([None, 2**62, -(2**63)])),
        lit(rng.choice([None, -32768, 7])),
    ]  # fmt: skip
    return "(" + ", ".join(values) + ")"


def test_custom_workload_with_key_changes_deletes_and_awkward_values(
    source_db: SourceDatabase, apply_and_verify: Verify
) -> None:
    rng = random.Random(7)
    source_db.execute(SCHEMA)
    source_db.execute(
        "INSERT INTO orders VALUES " + ", ".join(_order_values(rng, r, i) for r in ("eu", "us") for i in range(40)),
        "INSERT INTO notes SELECT g, repeat(md5(g::text), 400), 1 FROM generate_series(1, 20) g",  # ~12 KB: TOASTed
        "INSERT INTO events VALUES (now(), 'created')",
    )
    # GIVEN the initial full load (and an empty change stream)
    report = source_db.capture()
    assert report.load_rows == 80 + 20 + 1
    _assert_equal(apply_and_verify(source_db))

    # WHEN a workload of inserts, updates, deletes, re-inserts and key changes runs
    source_db.execute(
        "DELETE FROM orders WHERE order_id < 5",
        "INSERT INTO orders VALUES " + ", ".join(_order_values(rng, "eu", i) for i in range(3)),  # re-inserted keys
        "UPDATE orders SET order_id = order_id + 1000 WHERE region = 'us' AND order_id BETWEEN 10 AND 14",  # key change
        "UPDATE orders SET region = 'apac' WHERE region = 'us' AND order_id = 20",  # key change of one key part
        "UPDATE orders SET status = 'multi\nline, \"quoted\"', amount = NULL WHERE order_id % 3 = 0",
        "UPDATE notes SET version = version + 1 WHERE id <= 10",  # the TOASTed body is not in the WAL
        "UPDATE notes SET body = 'short' WHERE id = 11",
        "DELETE FROM notes WHERE id = 12",
        "INSERT INTO events VALUES ('2024-01-01 00:00:00+02', 'a, \"b\"\nc')",
    )
    source_db.transaction(  # several changes to one key in one transaction, and a key moved twice
        "UPDATE orders SET status = 'first' WHERE region = 'eu' AND order_id = 30",
        "UPDATE orders SET status = 'second' WHERE region = 'eu' AND order_id = 30",
        "UPDATE orders SET order_id = 2000 WHERE region = 'eu' AND order_id = 31",
        "UPDATE orders SET order_id = 31 WHERE region = 'eu' AND order_id = 2000",
        "DELETE FROM orders WHERE region = 'eu' AND order_id = 32",
        "INSERT INTO orders VALUES " + _order_values(rng, "eu", 32),
    )
    report = source_db.capture(min_file_size=2048)  # small files: several per table
    # THEN silver equals the source after every capture
    assert report.changes > 0 and report.cdc_files > 3
    _assert_equal(apply_and_verify(source_db))
    # AND a key change is written as a delete of the old key and an insert of the new one
    orders_text = "".join(p.read_text() for p in _cdc_files(source_db.bronze / "public" / "orders"))
    assert not any(line.startswith("U,") and ",us,1010," in line for line in orders_text.splitlines())
    assert any(line.startswith("D,") and ",us,10," in line for line in orders_text.splitlines())

    # WHEN more rounds of random changes run
    for _ in range(2):
        statements = []
        for _ in range(60):
            region, order_id = rng.choice(["eu", "us", "apac"]), rng.randint(0, 60)
            choice = rng.random()
            if choice < 0.3:
                statements.append(f"DELETE FROM orders WHERE region = '{region}' AND order_id = {order_id}")
            elif choice < 0.6:
                statements.append(
                    f"INSERT INTO orders VALUES {_order_values(rng, region, order_id)} ON CONFLICT (region, order_id) "
                    "DO UPDATE SET status = EXCLUDED.status, placed_at = EXCLUDED.placed_at, payload = EXCLUDED.payload"
                )
            else:
                statements.append(
                    f"UPDATE orders SET order_id = order_id + 100 WHERE region = '{region}' AND order_id = {order_id}"
                )
        source_db.execute(*statements)
        source_db.capture(min_file_size=rng.choice([1, 4096, 10**6]))
        # THEN silver still equals the source
        _assert_equal(apply_and_verify(source_db))


def test_files_written_but_slot_not_advanced_are_not_written_twice(
    source_db: SourceDatabase, apply_and_verify: Verify, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a captured table and changes pending
    source_db.execute("CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
    source_db.capture()
    source_db.execute(
        "INSERT INTO t VALUES (2, 'b')", "UPDATE t SET v = 'c' WHERE id = 1", "DELETE FROM t WHERE id = 2"
    )

    # WHEN the capture crashes after its files are durable but before the slot moves
    def crash(self: ChangeCapture, lsn: int) -> None:
        if self.buffers == {} and self.report.cdc_files:
            raise RuntimeError("crash before confirming the slot")

    with monkeypatch.context() as patch:
        patch.setattr(ChangeCapture, "confirm", crash)
        with pytest.raises(RuntimeError):
            source_db.capture()
    written = _cdc_files(source_db.bronze)
    assert len(written) == 1
    source_db.execute("INSERT INTO t VALUES (3, 'd')")
    report = source_db.capture()
    # THEN the re-read changes are recognised as already in bronze; only the new one is written
    assert report.skipped_changes == 3 and report.changes == 1
    assert _cdc_files(source_db.bronze)[:-1] == written
    _assert_equal(apply_and_verify(source_db))


def test_follow_mode_killed_and_restarted_mid_workload_loses_nothing(
    source_db: SourceDatabase, apply_and_verify: Verify
) -> None:
    rng = random.Random(11)
    source_db.execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance numeric(14,2), seen timestamptz)",
        "INSERT INTO accounts SELECT g, 'owner ' || g, g * 10, now() FROM generate_series(1, 200) g",
    )
    source_db.capture()  # slot + full load

    def workload(transactions: int) -> None:
        for _ in range(transactions):
            a, b = rng.randint(1, 260), rng.randint(1, 260)
            source_db.transaction(
                f"UPDATE accounts SET balance = balance - 1, seen = clock_timestamp() WHERE id = {a}",
                f"INSERT INTO accounts VALUES ({b}, 'new, \"{b}\"', 0, now()) ON CONFLICT (id) DO UPDATE "
                "SET balance = accounts.balance + 1",
                f"DELETE FROM accounts WHERE id = {rng.randint(1, 260)} AND {rng.random()} < 0.2",
            )

    # GIVEN a continuous capture running while changes are made
    follower = start_capture(source_db, "0.3", "2")
    workload(80)
    time.sleep(1.0)
    # WHEN it is killed without warning mid-workload, and started again
    follower.send_signal(signal.SIGKILL)
    follower.wait(timeout=10)
    files_before_restart = len(_cdc_files(source_db.bronze))
    workload(40)
    follower = start_capture(source_db, "0.3", "2")
    workload(80)
    time.sleep(1.0)
    # AND stopped cleanly mid-workload
    follower.send_signal(signal.SIGTERM)
    _, errors = follower.communicate(timeout=20)
    assert follower.returncode == 130, errors.decode()
    workload(20)
    source_db.capture()  # what is still pending
    # THEN the files are unique, in write order, and silver equals the source
    names = [p.name for p in _cdc_files(source_db.bronze)]
    assert files_before_restart > 0 and len(names) > files_before_restart
    assert names == sorted(names) and len(set(names)) == len(names)
    _assert_equal(apply_and_verify(source_db))
