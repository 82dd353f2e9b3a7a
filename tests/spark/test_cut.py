"""The consistent cut's bound, record and tags (``engine.cut``, ``lake.cuts``), with a capture progress
record written by hand: a round applies nothing past it, a quiet table is at the cut with its old
snapshot, a crash before the record or among the tags leaves the previous cut whole and the next
round mends the tags, and bronze without a progress record has no cut and says what would give one."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyiceberg.table import StaticTable

from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.progress import PROGRESS_KEY, CaptureProgress, TableProgress
from cdclake.dms.writer import change_sequence, write_csv
from cdclake.engine.cut import CutRounds
from cdclake.engine.run import apply_pending, list_all, run
from cdclake.errors import CdclakeError
from cdclake.gold.run import refresh_marts
from cdclake.lake.committer import IcebergCommitter
from cdclake.lake.cuts import CUTS_TABLE, latest_cut, tagged_snapshot
from cdclake.lake.tables import SilverTable, table_exists
from cdclake.ops.status import table_statuses
from cdclake.ops.status_local import local_cut, local_table_statuses
from cdclake.shells.commands.run import cut_line
from cdclake.shells.query import at_cut, run_query
from cdclake.shells.status_view import status_text
from configs import keyed_tables
from readers import newest_metadata_file, warehouse_of

pytestmark = pytest.mark.spark

CONFIG = keyed_tables("s.a", "s.b", bronze="timestamp_column: ts, change_sequence_column: seq")


def _cdc(bronze: Path, table: str, second: int, rows: list[tuple[str, int, str]]) -> str:
    """A CDC file of (op, id, name) rows committed at ``second``, named as capture names them; its key."""
    ts = f"2024-01-02 00:00:{second:02d}.000000"
    records = [[op, ts, str(ident), name, change_sequence(ts, n)] for n, (op, ident, name) in enumerate(rows)]
    key = f"s/{table}/20240102-00{second:02d}000000{second:020d}.csv"
    write_csv(bronze / key, records)
    return key


def _progress(bronze: Path, second: int, newest: dict[str, str | None]) -> None:
    """The progress record a capture writes: every change committed up to ``second`` is in bronze."""
    tables = {f"s.{t}": TableProgress(key) for t, key in newest.items()}
    record = CaptureProgress(second, f"0/{second:X}", f"2024-01-02 00:00:{second:02d}.000000", tables)
    (bronze / PROGRESS_KEY).parent.mkdir(parents=True, exist_ok=True)
    (bronze / PROGRESS_KEY).write_text(record.to_json(), "utf-8")


def _names(engine: Engine, table: str, snapshot_id: int) -> list[str]:
    identifier = SilverTable(engine.catalog, engine.config.database, table).identifier
    return sorted(
        r[0] for r in engine.spark.sql(f"SELECT name FROM {identifier} VERSION AS OF {snapshot_id}").collect()
    )


def _tags(engine: Engine) -> dict[str, int | None]:
    return {t: tagged_snapshot(engine.spark, SilverTable(engine.catalog, engine.config.database, t)) for t in "ab"}


class CrashAt(IcebergCommitter):
    """A committer killed just before one step of publishing a cut (``record``, ``tag <table>``)."""

    def __init__(self, step: str) -> None:
        self.step = step

    def cut_step(self, step: str, take: Callable[[], None]) -> None:
        if step == self.step:
            raise RuntimeError(f"the job was killed before the cut's {step}")
        take()


def test_a_round_stops_at_the_progress_record_and_a_quiet_table_is_at_the_cut(
    make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    bronze = tmp_path / "bronze"
    engine = make_engine(CONFIG)
    # GIVEN both tables' first changes, a progress record at second 1, and a file of a written after it
    a1, b1 = _cdc(bronze, "a", 1, [("I", 1, "a1")]), _cdc(bronze, "b", 1, [("I", 1, "b1")])
    _progress(bronze, 1, {"a": a1, "b": b1})
    _cdc(bronze, "a", 2, [("U", 1, "a2")])
    # WHEN the run applies
    first = run(engine).checked()
    # THEN it applied no file past the record, and the cut is at second 1 with both tables
    cut = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert first.cut == "at 2024-01-02 00:00:01.000000 (LSN 0/1): 2 tables", first.cut
    assert cut is not None and cut.commit_ts == "2024-01-02 00:00:01.000000"
    # AND the run's time counts the cut as a phase of its own, as the CLI's cut line says
    assert first.phase_seconds["cut"] > 0
    assert re.fullmatch(r"cut: at .*: 2 tables; settled in \d+\.\d\d s", cut_line(first)), cut_line(first)
    assert _names(engine, "a", cut.snapshots["a"]) == ["a1"] and _names(engine, "b", cut.snapshots["b"]) == ["b1"]
    assert engine.spark.table(f"silver.{engine.config.database}.a").collect()[0]["name"] == "a1"
    assert _tags(engine) == dict(cut.snapshots)
    # WHEN the record moves to second 2, the quiet table b having nothing new
    _progress(bronze, 2, {"a": "s/a/20240102-0002000000" + f"{2:020d}.csv", "b": b1})
    second = run(engine).checked()
    # THEN the cut is at second 2: a at its new snapshot, b at the one it had
    later = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert later is not None and second.cut is not None and second.cut.startswith("at 2024-01-02 00:00:02"), second.cut
    assert later.snapshots["b"] == cut.snapshots["b"] and later.snapshots["a"] != cut.snapshots["a"]
    assert _names(engine, "a", later.snapshots["a"]) == ["a2"]
    assert later.position > cut.position and _tags(engine) == dict(later.snapshots)
    # AND `query --cut` reads the tables at the latest cut, `--cut T` at the newest cut at or before T
    db = engine.config.database
    sql = f"SELECT a.name AS a, b.name AS b FROM {db}.a JOIN silver.{db}.b ON {db}.a.id = b.id"
    for at, expected in ((None, "a2,b1"), ("2024-01-02 00:00:01.500000", "a1,b1")):
        rewritten = at_cut(engine.spark, sql, engine.catalog, db, at)
        assert run_query(engine.spark, rewritten.sql, "csv", None).text.splitlines() == ["a,b", expected]
        for view in rewritten.views:
            engine.spark.catalog.dropTempView(view)
    assert "the newest cut at or before" in rewritten.note
    with pytest.raises(CdclakeError, match="at or before 2024-01-01"):
        at_cut(engine.spark, sql, engine.catalog, db, "2024-01-01 00:00:00.000000")
    # AND a consistent mart over both is computed at the published cut (second 2): from the tables' own commit
    # times alone the newest moment both reached exactly is second 1 (b's last batch ended there)
    mart = "marts:\n  - name: pair\n    consistent: true\n    sql: SELECT a.name AS a, b.name AS b"
    config = parse_config(CONFIG + mart + " FROM cdclake.a a JOIN cdclake.b b ON a.id = b.id\n", "cut.yaml")
    with_mart = replace(engine, config=replace(config.in_database(db), bronze=engine.config.bronze))
    refreshed = refresh_marts(with_mart)
    assert [r.reason for r in refreshed] == ["consistent cut at 2024-01-02 00:00:02.000000"], refreshed
    rows = engine.spark.table(f"silver.{db}_gold.pair").collect()
    assert [(r["a"], r["b"]) for r in rows] == [("a2", "b1")]
    # AND the tag reads as the docs say: by Spark (VERSION AS OF the tag) and by pyiceberg (the metadata's refs)
    tagged = engine.spark.sql(f"SELECT name FROM silver.{db}.a VERSION AS OF 'cdclake_cut'").collect()
    assert [r["name"] for r in tagged] == ["a2"]
    metadata = StaticTable.from_metadata(str(newest_metadata_file(engine.spark, f"silver.{db}.b"))).metadata
    assert metadata.refs["cdclake_cut"].snapshot_id == later.snapshots["b"]
    # AND the first cut of the hour has a dated tag on every table (the second, in the same hour, none), read by name
    assert sorted(n for n in metadata.refs if n.startswith("cdclake_cut_")) == ["cdclake_cut_20240102_000001_000000"]
    assert metadata.refs["cdclake_cut_20240102_000001_000000"].snapshot_id == cut.snapshots["b"]
    old = engine.spark.sql(f"SELECT name FROM silver.{db}.a VERSION AS OF 'cdclake_cut_20240102_000001_000000'")
    assert [r["name"] for r in old.collect()] == ["a1"]
    # AND a run with nothing new publishes nothing new
    assert run(engine).checked().cut == "at 2024-01-02 00:00:02.000000 (LSN 0/2), unchanged"
    rows = engine.spark.table(f"silver.{engine.config.database}.{CUTS_TABLE}").count()
    assert rows == 2 * 2  # two cuts, a row per table each
    # AND `status` says where the cut stands in one line, the same through Spark and with no JVM (pyiceberg)
    warehouse = warehouse_of(engine.spark, f"silver.{db}.a")
    now = datetime.now(UTC)
    spark_cut = latest_cut(engine.spark, engine.catalog, db)
    by_spark = status_text(table_statuses(engine, now), [], "table", False, spark_cut)
    local_statuses = local_table_statuses(engine.config, engine.store, warehouse, now)
    assert local_statuses is not None
    local = status_text(local_statuses, [], "table", False, local_cut(engine.config, warehouse))
    line = "cut: at 2024-01-02 00:00:02.000000 (LSN 0/2): 2 tables, at the newest change"
    assert by_spark.splitlines()[-1] == line and local == by_spark


@pytest.mark.parametrize("step", ["record", "tag b"])
def test_a_crash_while_publishing_leaves_the_previous_cut_whole_and_the_next_round_mends_the_tags(
    make_engine: Callable[..., Engine], tmp_path: Path, step: str
) -> None:
    bronze = tmp_path / "bronze"
    engine = make_engine(CONFIG)
    a1, b1 = _cdc(bronze, "a", 1, [("I", 1, "a1")]), _cdc(bronze, "b", 1, [("I", 1, "b1")])
    _progress(bronze, 1, {"a": a1, "b": b1})
    run(engine).checked()
    before = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert before is not None
    # GIVEN a transfer from a to b in one source transaction at second 2
    a2, b2 = _cdc(bronze, "a", 2, [("U", 1, "a-")]), _cdc(bronze, "b", 2, [("U", 1, "b+")])
    _progress(bronze, 2, {"a": a2, "b": b2})
    # WHEN the job is killed just before a step of publishing the new cut
    crashed = run(replace(engine, committer=CrashAt(step))).checked()
    # THEN the tables hold the transfer, and the record's latest cut is either the old one whole or the new one whole
    assert crashed.cut is not None and crashed.cut.startswith("not published"), crashed.cut
    latest = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert latest is not None
    if step == "record":
        assert latest == before and _tags(engine) == dict(before.snapshots)
    else:
        assert latest.commit_ts == "2024-01-02 00:00:02.000000"
        assert _tags(engine) == {"a": latest.snapshots["a"], "b": before.snapshots["b"]}  # a reader of tags sees a mix
    names = {t: _names(engine, t, latest.snapshots[t]) for t in "ab"}
    assert names in ({"a": ["a1"], "b": ["b1"]}, {"a": ["a-"], "b": ["b+"]}), names
    # WHEN the next round runs, with nothing new
    again = run(engine).checked()
    # THEN the cut is the new one, and every tag is at it
    final = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert final is not None and final.commit_ts == "2024-01-02 00:00:02.000000", again.cut
    assert _tags(engine) == dict(final.snapshots)
    assert {t: _names(engine, t, final.snapshots[t]) for t in "ab"} == {"a": ["a-"], "b": ["b+"]}


class FailsOnce(IcebergCommitter):
    """A committer whose one cut step fails the first time it is taken, and works after; a tag
    step waits until ``gate`` opens (at most 20 s) and notes whether it had."""

    def __init__(self, step: str) -> None:
        self.step, self.failed = step, False
        self.gate, self.waited = threading.Event(), []

    def cut_step(self, step: str, take: Callable[[], None]) -> None:
        if step.startswith("tag "):
            self.waited.append(self.gate.wait(timeout=20))
        if step == self.step and not self.failed:
            self.failed = True
            raise RuntimeError(f"the catalog refused the cut's {step}")
        take()


def test_a_follow_round_moves_the_tags_behind_the_record_and_the_next_round_mends_a_failed_one(
    make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    bronze = tmp_path / "bronze"
    engine = make_engine(CONFIG)
    a1, b1 = _cdc(bronze, "a", 1, [("I", 1, "a1")]), _cdc(bronze, "b", 1, [("I", 1, "b1")])
    _progress(bronze, 1, {"a": a1, "b": b1})
    run(engine).checked()
    before = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert before is not None
    # GIVEN a transfer at second 2, and a catalog that refuses b's tag once
    a2, b2 = _cdc(bronze, "a", 2, [("U", 1, "a-")]), _cdc(bronze, "b", 2, [("U", 1, "b+")])
    _progress(bronze, 2, {"a": a2, "b": b2})
    committer = FailsOnce("tag b")
    follower = replace(engine, committer=committer)
    rounds = CutRounds(follower, tags_behind=True)
    # WHEN a follow round settles its cut (the tags moved in their own thread) and the loop ends
    bound = rounds.bound(lambda: list_all(follower))
    _, after = apply_pending(follower, bound.listing)
    line = rounds.settle(bound, after)
    committer.gate.set()  # the round is over: the tags may move now (had the round moved them, each waited 20 s)
    rounds.close()
    assert committer.waited == [True, True], "the tags moved while the round waited for them"
    # THEN the record is the new cut, whole; a's tag followed it and b's did not (a reader of tags sees a mix)
    latest = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert latest is not None and latest.commit_ts == "2024-01-02 00:00:02.000000", line
    assert line == "at 2024-01-02 00:00:02.000000 (LSN 0/2): 2 tables"
    assert _tags(engine) == {"a": latest.snapshots["a"], "b": before.snapshots["b"]}
    # WHEN the next round settles, with nothing new
    again = rounds.settle(rounds.bound(lambda: list_all(follower)), after)
    rounds.close()
    # THEN every tag is at the latest cut
    assert again == "at 2024-01-02 00:00:02.000000 (LSN 0/2), unchanged"
    assert _tags(engine) == dict(latest.snapshots)
    assert {t: _names(engine, t, latest.snapshots[t]) for t in "ab"} == {"a": ["a-"], "b": ["b+"]}


def test_per_table_dms_files_have_no_cut_and_the_report_names_the_setting(
    make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    # GIVEN per-table DMS files and no progress record
    bronze = tmp_path / "bronze"
    engine = make_engine(CONFIG)
    _cdc(bronze, "a", 1, [("I", 1, "a1")])
    _cdc(bronze, "b", 1, [("I", 1, "b1")])
    # WHEN the run applies them
    report = run(engine).checked()
    # THEN both are applied, no cut is recorded, and the report says what would prove one
    assert report.cut is not None and report.cut.startswith("none: ") and "PreserveTransactions" in report.cut
    assert "cut" not in report.phase_seconds and cut_line(report) == f"cut: {report.cut}"
    assert not table_exists(engine.spark, SilverTable(engine.catalog, engine.config.database, CUTS_TABLE))
    assert engine.spark.table(f"silver.{engine.config.database}.a").count() == 1


def test_transaction_ordered_files_give_a_cut_at_the_newest_file_with_a_quiet_table_in_it(
    make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    # GIVEN PreserveTransactions: one folder of files in commit order, each row naming its table; a transfer
    # moves 5 from a's row to b's row in one source transaction (the balance total stays 10)
    config = keyed_tables("s.a", "s.b", bronze="timestamp_column: ts, change_sequence_column: seq, "
                          "transaction_path: changes")  # fmt: skip
    engine = make_engine(config)
    folder = tmp_path / "bronze" / "changes"

    def transactions(second: int, rows: list[tuple[str, str, int, str]]) -> None:
        ts = f"2024-01-02 00:00:{second:02d}.000000"
        records = [[op, ts, "s", t, str(i), name, change_sequence(ts, n)] for n, (op, t, i, name) in enumerate(rows)]
        write_csv(folder / f"20240102-00{second:02d}000000.csv", records)

    transactions(1, [("I", "a", 1, "10"), ("I", "b", 1, "0")])
    transactions(2, [("U", "a", 1, "5"), ("U", "b", 1, "5")])
    # WHEN the run applies them
    first = run(engine).checked()
    # THEN the cut is at the newest transaction file, its time the newest commit either table holds
    cut = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert first.cut == "at 2024-01-02 00:00:02.000000 (changes/20240102-0002000000.csv): 2 tables", first.cut
    assert cut is not None and cut.commit_ts == "2024-01-02 00:00:02.000000"
    assert {t: _names(engine, t, cut.snapshots[t]) for t in "ab"} == {"a": ["5"], "b": ["5"]}
    # WHEN a later transaction changes a alone (b is quiet) and the next run applies it
    transactions(3, [("U", "a", 1, "7")])
    # (first a run of table a alone: b has not read the new file, so the cut stays, and its time is reported
    # still, for its lag to grow while it stalls)
    alone = run(engine, [engine.config.table("s.a")]).checked()
    assert alone.cut is not None and alone.cut.startswith("no new cut: s.b: changes/20240102-0003000000.csv")
    assert alone.cut_commit_ts == "2024-01-02 00:00:02.000000", alone.cut
    later = run(engine).checked()
    # THEN the cut moved to that file, b at it with its rows unchanged (its ledger records the file it read
    # and found nothing of its own in), and the tags follow the record
    moved = latest_cut(engine.spark, engine.catalog, engine.config.database)
    assert later.cut == "at 2024-01-02 00:00:03.000000 (changes/20240102-0003000000.csv): 2 tables", later.cut
    assert moved is not None and moved.commit_ts == "2024-01-02 00:00:03.000000"
    assert {t: _names(engine, t, moved.snapshots[t]) for t in "ab"} == {"a": ["7"], "b": ["5"]}
    assert _tags(engine) == dict(moved.snapshots)
    # AND the earlier cut still reads the transfer whole: the total is 10 at it
    db = engine.config.database
    sql = f"SELECT CAST(a.name AS INT) + CAST(b.name AS INT) AS total FROM {db}.a a JOIN {db}.b b ON a.id = b.id"
    rewritten = at_cut(engine.spark, sql, engine.catalog, db, "2024-01-02 00:00:02.500000")
    assert run_query(engine.spark, rewritten.sql, "csv", None).text.splitlines() == ["total", "10"]
    for view in rewritten.views:
        engine.spark.catalog.dropTempView(view)
