"""A consistent cut of the whole database, under a live cross-table workload (``engine.cut``, ``lake.cuts``).

Money moves between the rows of two tables, one busy and one quiet, in transactions that keep the
total constant, while ``cdclake capture --follow`` writes bronze and ``run`` (then ``run --follow``)
applies it round after round. At every published cut the total holds, read by Spark (``VERSION AS
OF``) and by pyiceberg (an independent reader: the cut record and the tables read from their
newest metadata files, no Spark, no catalog); every cut's source position and commit time only move
forward; cuts advance through rounds in which the quiet table had no change at all, and past the
quiet table's reload by ``capture --reload`` while transfers go on (its LOAD snapshot and the busy
table's changes meet at the cut). The same check at the tables' latest snapshots, between two
tables' commits of a round, finds the total broken: the test tests something.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.notices import Polling
from cdclake.dms.progress import read_progress
from cdclake.engine.follow import FollowSettings, follow
from cdclake.engine.run import run
from cdclake.lake.cuts import CUTS_TABLE, PublishedCut, latest_cut, tagged_snapshot
from cdclake.lake.tables import SilverTable
from cdclake.report import Round
from pg_transfers import SCHEMA, TOTAL, Transfers, start_capture
from readers import newest_metadata_file

pytestmark = pytest.mark.spark

SourceDatabase = Any  # conftest.SourceDatabase


def _spark_total(engine: Engine, snapshots: dict[str, int]) -> int:
    parts = [
        f"SELECT sum(balance) AS s FROM {SilverTable(engine.catalog, engine.config.database, name).identifier} "
        f"VERSION AS OF {sid}"
        for name, sid in snapshots.items()
    ]
    return int(engine.spark.sql(f"SELECT sum(s) FROM ({' UNION ALL '.join(parts)})").collect()[0][0])


def _latest_total(engine: Engine) -> int:
    names = ", ".join(
        f"(SELECT sum(balance) FROM {SilverTable(engine.catalog, engine.config.database, n).identifier})"
        for n in ("busy", "quiet")
    )
    return int(engine.spark.sql(f"SELECT {names.replace(', ', ' + ')}").collect()[0][0])


def _pyiceberg_cut(engine: Engine) -> tuple[PublishedCut, int]:
    """The latest cut and its total, read by pyiceberg alone: the record from ``cdclake_cuts``'s newest
    metadata file (the rows of its greatest position), each table at the recorded snapshot."""
    from pyiceberg.table import StaticTable

    def metadata(name: str) -> str:
        identifier = SilverTable(engine.catalog, engine.config.database, name).identifier
        return str(newest_metadata_file(engine.spark, identifier))

    rows = StaticTable.from_metadata(metadata(CUTS_TABLE)).scan().to_arrow().to_pylist()
    newest = max(r["cut_position"] for r in rows)
    chosen = [r for r in rows if r["cut_position"] == newest]
    snapshots = {r["table_name"]: int(r["snapshot_id"]) for r in chosen}
    total = 0
    for name, sid in snapshots.items():
        scan = StaticTable.from_metadata(metadata(name)).scan(snapshot_id=sid, selected_fields=("balance",))
        total += sum(v for v in scan.to_arrow().column("balance").to_pylist())
    first = chosen[0]
    return PublishedCut(first["cut_kind"], newest, first["position_text"], first["cut_ts"], snapshots), total


@dataclass
class CutLog:
    """Every cut seen, checked as it is seen."""

    engine: Engine
    cuts: list[PublishedCut] = field(default_factory=list)
    latest_totals: list[int] = field(default_factory=list)

    def check(self) -> PublishedCut:
        engine = self.engine
        cut = latest_cut(engine.spark, engine.catalog, engine.config.database)
        assert cut is not None and set(cut.snapshots) == {"busy", "quiet"}
        independent, independent_total = _pyiceberg_cut(engine)
        assert independent == cut, "pyiceberg reads the same latest cut as the engine"
        assert _spark_total(engine, dict(cut.snapshots)) == TOTAL, f"Spark at the cut {cut}"
        assert independent_total == TOTAL, f"pyiceberg at the cut {cut}"
        for name, sid in cut.snapshots.items():
            assert tagged_snapshot(engine.spark, SilverTable(engine.catalog, engine.config.database, name)) == sid
        if self.cuts:
            before = self.cuts[-1]
            assert cut.position >= before.position, "the cut's source position only moves forward"
            assert (cut.commit_ts or "") >= (before.commit_ts or ""), "the cut's T only moves forward"
        if not self.cuts or cut != self.cuts[-1]:
            self.cuts.append(cut)
        return cut


def _capture_moved_past(engine: Engine, cut: PublishedCut | None, timeout: float = 120.0) -> None:
    """Wait until capture's progress record stands past ``cut`` (a busy machine may starve capture between two
    rounds; a round before it flushes again would find no new position)."""
    deadline = time.monotonic() + timeout
    while True:
        progress = read_progress(engine.store)
        if progress is not None and (cut is None or f"{progress.position:020d}" > cut.position):
            return
        assert time.monotonic() < deadline, f"capture did not move past {cut} in {timeout} s"
        time.sleep(0.2)


def test_every_cut_keeps_a_cross_table_invariant_that_latest_snapshots_break(
    source_db: SourceDatabase, make_engine: Callable[..., Engine]
) -> None:
    # GIVEN two tables loaded (capture's first run, then `run`): the first cut is the full load's
    source_db.execute(SCHEMA)
    source_db.capture()
    text = source_db.config_path.read_text("utf-8")
    first = make_engine(text)
    config = parse_config(text, str(source_db.config_path))
    engine = replace(first, config=replace(config, database=first.config.database, bronze=first.config.bronze))
    run(engine).checked()
    log = CutLog(engine)
    assert log.check().snapshots.keys() == {"busy", "quiet"}
    # AND transfers running, between the tables (cross) or within the busy one, captured continuously
    transfers = Transfers(source_db)
    transfers.cross.set()
    transfers.start()
    capture = start_capture(source_db)
    try:
        quiet_phase: list[PublishedCut] = []
        for round_number in range(6):
            # rounds 2 to 4: nothing writes the quiet table (rounds 3 and 4 find nothing new of it)
            if round_number == 2:
                transfers.cross.clear()
            if round_number == 5:
                transfers.cross.set()
            _capture_moved_past(engine, log.cuts[-1] if log.cuts else None)
            # WHEN a round commits the busy table first (what a reader sees between two tables' commits)
            busy_only = run(engine, [t for t in engine.config.tables if t.target == "busy"]).checked()
            log.latest_totals.append(_latest_total(engine))
            # AND then every table, ending at a cut
            report = run(engine).checked()
            assert report.cut is not None and report.cut.startswith("at "), report.cut
            before = log.cuts[-1]
            cut = log.check()
            assert cut.position > before.position, "every round ends at a new cut"
            if round_number in (3, 4):
                quiet_phase.append(cut)
            assert busy_only.cut is not None
        # AND the quiet table loaded again by capture mid-way (capture stopped, `capture --reload`, started
        # again) while transfers between the tables go on: the cut after its reload keeps the total too
        transfers.cross.set()
        capture.send_signal(signal.SIGTERM)
        capture.communicate(timeout=30)
        source_db.capture(reload=("public.quiet",))
        capture = start_capture(source_db)
        before_reload = log.cuts[-1]
        reloaded = run(engine).checked()
        quiet = [(t.kind, t.loaded, t.files_applied) for t in reloaded.tables if t.table.endswith("quiet")]
        assert any(loaded for _, loaded, _ in quiet), quiet
        assert reloaded.cut is not None and reloaded.cut.startswith("at "), reloaded.cut
        after_reload = log.check()
        assert after_reload.position > before_reload.position
        assert after_reload.snapshots["quiet"] != before_reload.snapshots["quiet"]
        # AND two more rounds through the follow loop
        seen: list[str] = []

        def each_round(done: Round) -> None:
            seen.append(done.report.cut or "")
            log.check()
            if len(seen) == 2:  # two rounds, however long a round takes on a busy machine
                engine.stopping.set()

        follow(engine, FollowSettings(poll_seconds=0.5, max_run_seconds=300.0), Polling(), on_round=each_round)
        engine.stopping.clear()
        assert len(seen) == 2 and all(line.startswith("at ") for line in seen), seen
    finally:
        transfers.done.set()
        transfers.join(timeout=10)
        capture.send_signal(signal.SIGTERM)
        _, errors = capture.communicate(timeout=30)
    assert capture.returncode == 130, errors.decode()
    # THEN every cut kept the total (checked as each was seen, by Spark and by pyiceberg), and cuts moved
    # on in every round, also while the quiet table had nothing new: its snapshot stayed, T went on
    assert len(log.cuts) >= 8, [c.commit_ts for c in log.cuts]
    assert quiet_phase[0].snapshots["quiet"] == quiet_phase[1].snapshots["quiet"]
    assert quiet_phase[0].commit_ts is not None and quiet_phase[1].commit_ts is not None
    assert quiet_phase[0].commit_ts < quiet_phase[1].commit_ts
    assert quiet_phase[0].snapshots["busy"] != quiet_phase[1].snapshots["busy"]
    # AND the latest snapshots, read between two tables' commits, broke the total (the check can fail)
    assert any(total != TOTAL for total in log.latest_totals), log.latest_totals
    assert transfers.count > 100
    # AND once capture has written everything, the last cut is the source as it is now
    source_db.capture()
    assert run(engine).checked().cut is not None
    final = log.check()
    conn = source_db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT (SELECT sum(balance) FROM busy), (SELECT sum(balance) FROM quiet)")
            busy_sum, quiet_sum = cur.fetchone()
    finally:
        conn.close()
    by_table = {
        name: engine.spark.sql(
            f"SELECT sum(balance) FROM {SilverTable(engine.catalog, engine.config.database, name).identifier} "
            f"VERSION AS OF {final.snapshots[name]}"
        ).collect()[0][0]
        for name in ("busy", "quiet")
    }
    assert by_table == {"busy": busy_sum, "quiet": quiet_sum}
