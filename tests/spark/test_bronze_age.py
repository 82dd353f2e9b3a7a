"""Runs whose cost does not grow with bronze's age: many batches with the ledger compacted to a
watermark and bronze listed from it, checked against a plain-Python replay of the change log; a held
file below the watermark; a ledger written before checkpoints existed; the follow loop."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdclake.context import Engine
from cdclake.dms.notices import Polling
from cdclake.dms.store import LocalBronze
from cdclake.dms.writer import SourceChange, cdc_file_name, cdc_records, write_csv
from cdclake.engine.follow import FollowSettings, follow
from cdclake.engine.run import replay, run
from cdclake.engine.select import ReplaySelection
from cdclake.lake.ledger import read_ledger
from cdclake.lake.ledger_record import LedgerCheckpoint
from cdclake.report import Round
from oracle import replay_change_log

EngineFactory = Callable[..., Engine]
TABLES = ("alpha", "beta")
CONFIG = """
bronze: {timestamp_column: ts}
tables:
""" + "".join(f"  s.{t}: {{primary_key: [id], columns: {{id: int, name: string}}}}\n" for t in TABLES)
LOAD_TS = "2024-01-01 00:00:00.000000"
INITIAL = [{"id": str(i), "name": f"n{i}", "ts": LOAD_TS} for i in range(1, 4)]


class CountingBronze(LocalBronze):
    """A local bronze that records where each listing started (``start_after``)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.starts: list[tuple[str, str | None]] = []

        self.folder_listings: list[str] = []

    def list_keys(self, under: str = "", start_after: str | None = None) -> Iterator[tuple[str, int]]:
        self.starts.append((under, start_after))
        return super().list_keys(under, start_after)

    def list_folders(self, under: str = "") -> Iterator[str]:
        self.folder_listings.append(under)
        return super().list_folders(under)


class Source:
    """Writes DMS files for the tables (date folders, year first) and keeps each table's change log."""

    def __init__(self, bronze: Path) -> None:
        self.bronze = bronze
        self.log: dict[str, list[SourceChange]] = {t: [] for t in TABLES}
        self.minute = 0
        for table in TABLES:
            write_csv(bronze / "s" / table / "LOAD00000001.csv", [[LOAD_TS, r["id"], r["name"]] for r in INITIAL])

    def cdc_file(self, table: str, changes: list[tuple[str, int, str]], empty: bool = False) -> str:
        written = []
        for op, ident, name in changes:
            self.minute += 1
            day, rest = divmod(self.minute, 24 * 60)
            ts = f"2024-01-{2 + day:02d} {rest // 60:02d}:{rest % 60:02d}:00.000000"
            written.append(SourceChange(op, {"id": str(ident), "name": name, "ts": ts}, ts, ""))
        stamp = written[-1].commit_ts
        key = f"s/{table}/{stamp[:4]}/{stamp[5:7]}/{stamp[8:10]}/{cdc_file_name(stamp)}"
        path = self.bronze / key
        if empty:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")
        else:
            self.log[table] += written
            write_csv(path, cdc_records(written, ["id", "name"], with_timestamp=True, with_seq=False))
        return key

    def fill(self, table: str, key: str, changes: list[tuple[str, int, str]]) -> None:
        """Write the rows of a file that was empty (a fix before a replay), stamped with its name's time."""
        d = key.rsplit("/", 1)[-1]
        stamp = f"{d[:4]}-{d[4:6]}-{d[6:8]} {d[9:11]}:{d[11:13]}:{d[13:15]}.000000"
        written = [SourceChange(op, {"id": str(i), "name": n, "ts": stamp}, stamp, "") for op, i, n in changes]
        self.log[table] += written
        write_csv(self.bronze / key, cdc_records(written, ["id", "name"], with_timestamp=True, with_seq=False))

    def expected(self, table: str) -> dict[tuple[str, ...], dict[str, Any]]:
        return replay_change_log(INITIAL, self.log[table], ["id"])


def silver(engine: Engine, table: str) -> dict[tuple[str, ...], dict[str, Any]]:
    rows = engine.spark.table(f"silver.{engine.config.database}.{table}").collect()
    return {(str(r["id"]),): {"id": str(r["id"]), "name": r["name"], "ts": r["ts"]} for r in rows}


def _ledgers(engine: Engine, table: str) -> tuple[Any, Any]:
    silver_table = engine.silver_table(engine.config.table(table))
    return read_ledger(engine.spark, silver_table), read_ledger(engine.spark, silver_table, whole=True)


def test_many_runs_with_the_ledger_compacted_and_bronze_listed_from_the_watermark_agree_with_the_replay(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN two loaded tables in date-partitioned bronze, listed through a store that records its starts
    store = CountingBronze(tmp_path / "bronze")
    source = Source(tmp_path / "bronze")
    engine = make_engine(CONFIG, store)
    run(engine).checked()
    held_key = ""
    # WHEN twelve runs each apply a new file of each table (one of them empty: held in quarantine)
    for step in range(12):
        for table in TABLES:
            if step == 3 and table == "alpha":
                held_key = source.cdc_file(table, [("U", 1, "never")], empty=True)
                continue
            source.cdc_file(table, [("U", 1 + step % 3, f"{table}{step}"), ("I", 10 + step, f"i{step}")])
        marks = {t: _ledgers(engine, t)[0].applied.watermarks.get(f"s/{t}") for t in TABLES}
        store.starts.clear()
        run(engine).checked()
        # THEN after each run silver equals the replay of the change log
        for table in TABLES:
            assert silver(engine, table) == source.expected(table), (step, table)
    # AND the last run listed each table's folder from its watermark, a date-folder key, not the whole folder
    starts = dict(store.starts)
    for table in TABLES:
        ledger, whole = _ledgers(engine, table)
        mark = marks[table]
        assert mark is not None and starts[f"s/{table}"] == mark and mark.startswith(f"s/{table}/2024/01/")
        # AND the compacted ledger agrees with the whole one on every key, holding only a few keys
        cdc_keys = sorted(
            p.relative_to(tmp_path / "bronze").as_posix()
            for p in (tmp_path / "bronze" / "s" / table).rglob("2024*.csv")
        )
        assert [k in ledger.applied for k in cdc_keys] == [k in whole.applied for k in cdc_keys]
        assert len(ledger.applied) == len(whole.applied)
        assert ledger.applied.size <= 4 and whole.applied.size == len(whole.applied)
    # AND the empty file below alpha's watermark is an exception: not applied, held
    ledger, whole = _ledgers(engine, "alpha")
    assert ledger.applied.covered(held_key) and held_key not in ledger.applied and held_key not in whole.applied
    # WHEN the file is fixed and the quarantine replayed, then a later file arrives
    source.fill("alpha", held_key, [("U", 2, "fixed")])
    replay(engine, ReplaySelection(quarantined=True)).checked()
    source.cdc_file("alpha", [("U", 3, "after")])
    run(engine).checked()
    # THEN it is applied, in order, and nothing below the watermark is left pending
    assert silver(engine, "alpha") == source.expected("alpha")
    ledger, _ = _ledgers(engine, "alpha")
    assert held_key in ledger.applied and not ledger.applied.exceptions


def test_a_ledger_written_before_checkpoints_is_read_whole_once_then_compacted(
    make_engine: EngineFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a warehouse whose batches were committed by a version that wrote no checkpoint
    store = CountingBronze(tmp_path / "bronze")
    source = Source(tmp_path / "bronze")
    engine = make_engine(CONFIG, store)
    with monkeypatch.context() as old_version:
        old_version.setattr(LedgerCheckpoint, "properties", lambda self: {})
        run(engine).checked()
        for step in range(5):
            source.cdc_file("alpha", [("U", 1, f"old{step}")])
            run(engine).checked()
    old, whole = _ledgers(engine, "alpha")
    assert old.applied.watermarks == {} and old.applied == whole.applied  # read back to the full load
    # WHEN this version runs twice with new files
    starts = []
    for step in range(2):
        source.cdc_file("alpha", [("U", 2, f"new{step}")])
        store.starts.clear()
        run(engine).checked()
        starts.append(dict(store.starts)["s/alpha"])
    # THEN the first run listed alpha's folder whole (no watermark yet); the second from the watermark the
    # first one's checkpoint recorded
    assert starts[0] is None and starts[1] is not None and starts[1].startswith("s/alpha/2024/01/")
    ledger, whole = _ledgers(engine, "alpha")
    assert ledger.applied.watermarks and len(ledger.applied) == len(whole.applied) == 8
    assert silver(engine, "alpha") == source.expected("alpha")


def test_the_follow_loop_lists_from_the_watermarks_and_applies_every_file_once(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN tables with a compacted ledger, and new files of each in bronze
    store = CountingBronze(tmp_path / "bronze")
    source = Source(tmp_path / "bronze")
    engine = make_engine(CONFIG, store)
    run(engine).checked()
    for step in range(3):
        for table in TABLES:
            source.cdc_file(table, [("U", 1, f"{table}{step}")])
        run(engine).checked()
    marks = {t: _ledgers(engine, t)[0].applied.watermarks[f"s/{t}"] for t in TABLES}
    for table in TABLES:
        source.cdc_file(table, [("D", 2, ""), ("I", 7, "seven")])
    store.starts.clear()
    # WHEN the loop follows bronze until idle
    outcome = follow(engine, FollowSettings(poll_seconds=0.2, idle_seconds=1.0), Polling())
    # THEN its first listing started at each table's watermark, and silver equals the replay
    assert outcome.failures == {} and outcome.files_applied == 2
    assert [s for s in store.starts[:2]] == [(f"s/{t}", marks[t]) for t in TABLES]
    for table in TABLES:
        assert silver(engine, table) == source.expected(table)


def test_a_table_that_never_gets_a_file_has_bronze_folders_listed_once_a_loop_not_once_a_round(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN the tables loaded, and a third configured table that is empty at the source: it never gets a file
    store = CountingBronze(tmp_path / "bronze")
    source = Source(tmp_path / "bronze")
    engine = make_engine(CONFIG + "  s.quiet: {primary_key: [id], columns: {id: int, name: string}}\n", store)
    run(engine).checked()
    store.folder_listings.clear()
    rounds = []

    def each_round(done: Round) -> None:
        rounds.append(done.number)
        if len(rounds) < 4:  # a new file of alpha each round: the loop stays busy
            source.cdc_file("alpha", [("U", 1, f"round{len(rounds)}")])

    # WHEN the loop follows bronze for several rounds
    outcome = follow(engine, FollowSettings(poll_seconds=0.1, idle_seconds=1.0), Polling(), on_round=each_round)
    # THEN bronze's folders (a schema listing, then its tables') were listed once for the whole loop, where
    # each round asks whether the quiet table's name is a mistyped one
    assert outcome.failures == {} and len(rounds) >= 4
    assert store.folder_listings == ["", "s"]
    assert silver(engine, "alpha") == source.expected("alpha")
