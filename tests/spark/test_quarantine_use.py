"""A quarantine people can use: what was held, why, and the next command; a replay of a fixed file
resolves its entries; a deleted file's entries are dismissed, on the record; status counts them.
And Ctrl-C during a full load stops the run, loses nothing and prints no stack trace."""

from __future__ import annotations

import gzip
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import replay, run
from cdclake.engine.select import ReplaySelection
from cdclake.errors import CdclakeError
from cdclake.lake.journals import DISMISSED_TABLE, QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE
from cdclake.ops.status import table_statuses
from cdclake.shells.cli import build_parser
from cdclake.shells.commands.quarantine import quarantine
from cdclake.shells.settings import CliSettings, cli_settings

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {timestamp_column: ts}
quarantine: {max_bad_row_ratio: 0.5}
tables:
  s.items: {primary_key: [id], columns: {id: int, qty: int}}
"""
TS1, TS2 = "2024-05-02 20:00:00.000000", "2024-05-02 21:00:00.000000"
FIRST, SECOND = "s/items/20240502-2000000000.csv", "s/items/20240502-2100000000.csv"
CORRUPT = "s/items/20240502-2200000000.parquet"


def _journal(engine: Engine, name: str) -> list[tuple]:
    identifier = f"silver.{engine.config.database}.{name}"
    if not engine.spark.catalog.tableExists(identifier):
        return []
    return sorted(tuple(r) for r in engine.spark.table(identifier).drop("quarantined_at", "dismissed_at").collect())


def _qty(engine: Engine) -> dict[int, int]:
    return {r["id"]: r["qty"] for r in engine.spark.table(f"silver.{engine.config.database}.items").collect()}


def test_held_rows_and_files_are_explained_replayed_once_fixed_and_dismissed_once_gone(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a file with two bad rows (2.7 and 1.5 into int), a later file that updates one of
    # their keys, and a corrupt Parquet file
    engine = make_engine(CONFIG)
    bronze = tmp_path / "bronze"
    first = [["I", TS1, "1", "10"], ["I", TS1, "2", "2.7"], ["I", TS1, "3", "1.5"], ["I", TS1, "4", "40"]]
    write_csv(bronze / FIRST, first)
    write_csv(bronze / SECOND, [["U", TS2, "2", "99"], ["I", TS2, "5", "50"]])
    (bronze / CORRUPT).write_bytes(b"PAR1 this is not a parquet file PAR1")
    # WHEN run
    report = run(engine)
    # THEN the good rows are applied; the bad rows are held with the row as it was in the file
    assert _qty(engine) == {1: 10, 2: 99, 4: 40, 5: 50}
    assert _journal(engine, QUARANTINE_ROWS_TABLE) == [
        ("items", FIRST, 2, f"I,{TS1},2,2.7", "value '2.7' of column qty cannot be stored exactly as int "
         "(clean.round rounds it)"),
        ("items", FIRST, 3, f"I,{TS1},3,1.5", "value '1.5' of column qty cannot be stored exactly as int "
         "(clean.round rounds it)"),
    ]  # fmt: skip
    # AND the corrupt file is held with the real reason, not the py4j call that failed
    [(_, key, reason)] = _journal(engine, QUARANTINE_TABLE)
    assert key == CORRUPT
    assert reason.startswith("unreadable file: corrupted file: the footer index is not within the file")
    assert "An error occurred while calling" not in reason
    # AND the CLI says what was held, why, and the next command; status counts the rows
    assert report.exit_code == 1
    assert report.problems() == [
        f"s.items: 1 file(s) held in quarantine ({reason}); fix them in bronze, then `cdclake replay --quarantined` "
        "(`cdclake quarantine list` shows them)",
        "s.items: 2 row(s) held in quarantine, the rest applied; `cdclake quarantine list` shows them and why; fix "
        "them in bronze, then `cdclake replay --quarantined`",
    ]
    [status] = table_statuses(engine)
    assert (status.quarantined_files, status.quarantined_rows) == (1, 2)
    assert "2 row(s) held in quarantine (last: value '" in status.behind
    assert "up to date" not in status.behind

    # WHEN the bad rows are fixed in bronze and the quarantine replayed
    first[1][3], first[2][3] = "3", "15"
    write_csv(bronze / FIRST, first)
    replayed = replay(engine, ReplaySelection(quarantined=True)).checked()
    # THEN the fixed rows are in silver once, in commit order (key 2's later update stays), and
    # their entries are resolved; the corrupt file, still corrupt, stays held
    assert _qty(engine) == {1: 10, 2: 99, 3: 15, 4: 40, 5: 50}
    assert [(t.files_applied, t.inserted, t.ignored_late) for t in replayed.tables if t.files_applied] == [(1, 1, 1)]
    assert _journal(engine, QUARANTINE_ROWS_TABLE) == []
    assert [key for _, key, _ in _journal(engine, QUARANTINE_TABLE)] == [CORRUPT]
    # AND a second replay changes nothing
    replay(engine, ReplaySelection(quarantined=True)).checked()
    assert _qty(engine) == {1: 10, 2: 99, 3: 15, 4: 40, 5: 50}

    # WHEN its entry is dismissed while the file is still in bronze THEN that is refused
    def parse(argv: list[str]) -> CliSettings:
        return cli_settings(build_parser().parse_args(argv), started=0.0, progress_bar=False)

    with pytest.raises(CdclakeError, match=f"{CORRUPT} is still in bronze: fix it there and run `cdclake replay"):
        quarantine(engine, parse(["quarantine", "dismiss", "--file", CORRUPT]))
    # WHEN the corrupt file is deleted from bronze instead of fixed, and its entry dismissed
    (bronze / CORRUPT).unlink()
    assert quarantine(engine, parse(["quarantine", "dismiss", "--missing"])) == 0
    # THEN the entry is gone, on the record, and status is up to date
    assert _journal(engine, QUARANTINE_TABLE) == []
    assert _journal(engine, DISMISSED_TABLE) == [("items", CORRUPT, 1, 0, reason, "the file is no longer in bronze")]
    [status] = table_statuses(engine)
    assert (status.quarantined_files, status.quarantined_rows, status.behind) == (0, 0, "up to date")


def _cdclake(tmp_path: Path, *args: str) -> list[str]:
    command = [sys.executable, "-m", "cdclake.shells.cli", "--config", str(tmp_path / "cdclake.yaml")]
    return [*command, "--warehouse", str(tmp_path / "warehouse"), *args]


TRACES = ("Traceback", "py4j", "at org.apache")


def test_ctrl_c_stops_a_full_load_loses_nothing_and_the_next_run_converges(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN a full load that takes a while (seconds), with one bad row
    rows = 400_000
    (tmp_path / "cdclake.yaml").write_text(
        "bronze: {path: bronze, timestamp_column: ts}\nsilver: {database: shop}\nquarantine: {max_bad_row_ratio: 0.1}\n"
        "tables:\n  s.big: {primary_key: [id], columns: {id: int, name: string, qty: int}}\n"
    )
    load = tmp_path / "bronze" / "s" / "big" / "LOAD00000001.csv.gz"
    load.parent.mkdir(parents=True)
    text = "".join(f"2024-01-01 00:00:00.000000,{i},name {i},{i % 1000}\n" for i in range(rows))
    # The bad row first: the one-scan load fails at once and the careful path does the work.
    bad = "2024-01-01 00:00:00.000000,-1,bad,2.7\n"
    load.write_bytes(gzip.compress((bad + text).encode(), compresslevel=1))
    # WHEN a run (not quiet) is interrupted once its full load has started
    first = subprocess.Popen(
        _cdclake(tmp_path, "run"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert first.stderr is not None
    seen = []
    for line in first.stderr:
        seen.append(line)
        if "full load table=s.big" in line:
            break
    time.sleep(1)
    first.send_signal(signal.SIGINT)
    interrupted_at = time.monotonic()
    out, err = first.communicate(timeout=300)
    stopped_in = time.monotonic() - interrupted_at
    err = "".join(seen) + err
    # THEN it stops (soon, not at the end of the load) with the one sentence and exit 130
    assert first.returncode == 130, err
    assert err.rstrip().endswith("cdclake: interrupted; nothing is lost, run it again")
    assert stopped_in < 60
    assert not any(trace in out + err for trace in TRACES), err
    # WHEN run again, quietly
    second = subprocess.run(_cdclake(tmp_path, "-q", "run"), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    # THEN the full load is done by this run (the first one committed nothing), the bad row held,
    # and no stack trace either
    assert second.returncode == 1, second.stderr
    assert f"full-load s.big: files=1 skipped=0 inserted={rows} " in second.stdout
    assert "s.big: 1 row(s) held in quarantine" in second.stderr
    assert not any(trace in second.stdout + second.stderr for trace in TRACES), second.stderr
    # AND silver holds every good row once
    silver = spark.read.format("iceberg").load(str(tmp_path / "warehouse" / "shop" / "big"))
    counted = silver.selectExpr("count(*) AS n", "count(DISTINCT id) AS keys", "sum(id) AS ids", "sum(qty) AS qty")
    assert tuple(counted.first()) == (rows, rows, rows * (rows - 1) // 2, sum(i % 1000 for i in range(rows)))
