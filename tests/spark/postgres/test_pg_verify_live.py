"""``cdclake verify`` against a PostgreSQL that keeps changing: lag is not reported as a difference, and a real
difference planted in silver is still found (verify/live.py, ``verify.run._settle``).

The source changes under a steady load while verify reads it; capture and ``run`` catch silver up only once
verify has started waiting (so its first read certainly saw lag). Verify then reads the differing rows again
and reports only the planted row. A second verify, with the changes captured but not applied and a short
wait, reports the table as lagging, with its size, not as differing.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from conftest import SourceDatabase, loaded_engine

from cdclake.context import Engine
from cdclake.engine.run import run
from cdclake.verify.applied import silver_position
from cdclake.verify.live import LiveSettings, SilverPosition
from cdclake.verify.postgres.dialect import PostgresDialect
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison
from cdclake.verify.run import LiveCheck, verify

SCHEMA = """
CREATE TABLE accounts (id int PRIMARY KEY, owner text, balance numeric(12,2), touched int NOT NULL DEFAULT 0);
INSERT INTO accounts SELECT i, 'owner ' || i, i * 1.5, 0 FROM generate_series(1, 2000) AS i;
"""


class Load:
    """Transactions on random rows (updates, and an insert and a delete now and then) until stopped; never id 7."""

    def __init__(self, source_db: SourceDatabase) -> None:
        self.source_db, self.stop, self.transactions = source_db, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = self.source_db.connect()
        conn.autocommit = True
        chance = random.Random(7)
        with conn.cursor() as cur:
            while not self.stop.is_set():
                key = chance.randint(101, 2000)
                cur.execute("UPDATE accounts SET balance = balance + 1, touched = touched + 1 WHERE id = %s", (key,))
                if self.transactions % 10 == 0:
                    cur.execute("INSERT INTO accounts VALUES (%s, 'new', 0, 0)", (3000 + self.transactions,))
                    cur.execute("DELETE FROM accounts WHERE id = %s", (chance.randint(20, 100),))
                self.transactions += 1
                time.sleep(0.01)
        conn.close()


class Catchup:
    """capture + run again and again in a thread of its own (the shared Spark session), from its first start."""

    def __init__(self, source_db: SourceDatabase, engine: Engine) -> None:
        self.source_db, self.engine, self.stop, self.rounds = source_db, engine, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.failure: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.source_db.capture()
                run(self.engine).checked()
                self.rounds += 1
        except BaseException as failure:  # told by the test, not lost in the thread
            self.failure = failure


def _accounts(results: list[TableComparison]) -> TableComparison:
    (accounts,) = [r for r in results if r.table == "public.accounts"]
    return accounts


def test_lag_under_load_is_not_a_difference_and_a_planted_difference_persists(
    source_db: SourceDatabase, make_engine: Callable[..., Engine]
) -> None:
    # GIVEN a table captured and applied, and a load changing the source, nothing of it applied yet
    engine = loaded_engine(source_db, make_engine, SCHEMA)
    load, catchup = Load(source_db), Catchup(source_db, engine)
    load.thread.start()
    # AND, during the load, a difference planted in silver (a row the load never touches)
    silver = engine.silver_table(engine.config.tables[0]).identifier
    engine.spark.sql(f"UPDATE {silver} SET owner = 'planted' WHERE id = 7")
    time.sleep(1.0)

    def silver_at(table: object) -> SilverPosition:
        """Silver's position; the first call (verify starts waiting) lets capture and run catch up, and stops
        the load a second later."""
        if catchup.thread.ident is None:
            catchup.thread.start()
            threading.Timer(1.0, load.stop.set).start()
        assert catchup.failure is None, catchup.failure
        return silver_position(engine, engine.config.tables[0])

    conn = source_db.connect()
    try:
        # WHEN verify runs while the source changes, waiting for silver to catch up
        live = LiveCheck(LiveSettings(wait_seconds=120.0, delivery_seconds=3.0, poll_seconds=0.5), silver_at)
        results = verify(engine, PostgresDialect(conn), live=live)
    finally:
        conn.close()
        load.stop.set()
        catchup.stop.set()
        load.thread.join()
        if catchup.thread.ident is not None:
            catchup.thread.join()
    assert catchup.failure is None, catchup.failure
    accounts = _accounts(results)
    # THEN only the planted row is reported, with its column; the rows that were lag are counted, not reported
    assert accounts.verdict == "differing", format_comparisons(results)
    assert accounts.different == ["id=7"] and accounts.differing_columns == {"id=7": ["owner"]}
    assert not accounts.missing and not accounts.unexpected, format_comparisons(results)
    assert accounts.lag_resolved > 0 and load.transactions > 50, (accounts.lag_resolved, load.transactions)
    # AND it says where the source stood when verify started (PostgreSQL's clock and WAL position)
    assert "UTC, log position " in accounts.position
    assert "DIFFERS public.accounts: 1 row(s) differ; " in format_comparisons(results)
    assert "differed only until silver caught up" in format_comparisons(results)

    # WHEN silver has caught up, then more changes are captured but not applied, and verify may wait only 2 s
    source_db.capture()
    run(engine).checked()
    source_db.execute("UPDATE accounts SET owner = 'late' WHERE id BETWEEN 10 AND 12")
    source_db.capture()
    conn = source_db.connect()
    try:
        quick = LiveCheck(LiveSettings(wait_seconds=2.0, delivery_seconds=1.0, poll_seconds=0.5), silver_at)
        lagging = _accounts(verify(engine, PostgresDialect(conn), live=quick))
    finally:
        conn.close()
    # THEN the table is lagging, with its size (the files waiting), not differing
    assert lagging.verdict == "lagging" and not lagging.equal
    assert "1 file(s) waiting in bronze" in lagging.lagging, lagging.lagging
    assert "LAGGING public.accounts" in format_comparisons([lagging])
