"""Bad input never silently changes data: commit timestamps are ordered by the instant they name,
and a value that cannot be stored exactly, or a change without its operation, is never applied."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cdclake.columns import COMMIT_TS, CORRUPT_RECORD, ERROR
from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.files import FileKind
from cdclake.dms.store import list_bronze
from cdclake.dms.writer import write_csv
from cdclake.engine import prepare
from cdclake.engine.changes import apply_cleaning, flag_missing_keys, has_error, to_changes
from cdclake.engine.commit_instants import commit_instant
from cdclake.engine.read import bad_rows, read_and_count
from cdclake.engine.run import run
from cdclake.errors import BadInputError
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE
from cdclake.ops.status import table_statuses
from cdclake.runtime.session import CODEGEN_FACTORY_MODE, interpreted_expressions

EngineFactory = Callable[..., Engine]

PEOPLE = """
bronze: {timestamp_column: commit_ts}
cdc: {max_files_per_batch: %d}
quarantine: {max_bad_row_ratio: 0.9}
tables:
  s.people: {primary_key: [id], columns: {id: int, name: string}}
"""


# A small batch is prepared with Spark's interpreted expressions (``BatchSizes.interpreted_batch_bytes``),
# a larger one with generated code: the checks below hold for both.
EVALUATION = pytest.mark.parametrize("evaluation", ["interpreted", "generated code"])


def _evaluated(engine: Engine, evaluation: str) -> Engine:
    return engine if evaluation == "interpreted" else engine.tuned(interpreted_batch_bytes=0)


def test_interpreted_expressions_reach_the_tasks_of_the_calling_thread_only(spark: SparkSession) -> None:
    def in_task() -> str | None:
        return spark.range(1).rdd.map(lambda _: TaskContext.get().getLocalProperty(CODEGEN_FACTORY_MODE)).first()  # type: ignore[union-attr]

    other: list[str | None] = []
    with interpreted_expressions(spark):
        inside = in_task()
        thread = threading.Thread(target=lambda: other.append(in_task()))
        thread.start()
        thread.join()
    assert (inside, other, in_task()) == ("NO_CODEGEN", [None], None)


def _names(engine: Engine) -> dict[int, str]:
    return {r["id"]: r["name"] for r in engine.spark.table(f"silver.{engine.config.database}.people").collect()}


def _rows_in_quarantine(engine: Engine) -> list[tuple]:
    name = f"silver.{engine.config.database}.{QUARANTINE_ROWS_TABLE}"
    if not engine.spark.catalog.tableExists(name):
        return []
    return sorted((r["file_key"], r["row_number"], r["reason"]) for r in engine.spark.table(name).collect())


# text as written -> the instant in UTC as DMS's default text (None: not a commit timestamp)
INSTANTS = {
    "2024-05-02 20:00:00.000000": "2024-05-02 20:00:00.000000",
    "2024-05-02T19:00:03Z": "2024-05-02 19:00:03.000000",
    "2024-05-02T21:30:00.5+02:00": "2024-05-02 19:30:00.500000",
    "2024-05-02T23:30:00.25-0500": "2024-05-03 04:30:00.250000",
    "2024-01-01T01:00:00+05": "2023-12-31 20:00:00.000000",
    "2024-02-29 00:00:00": "2024-02-29 00:00:00.000000",
    " 2024-05-02 20:00:00.1234567 ": "2024-05-02 20:00:00.1234567",
    "2024-12-31 23:59:59.999999": "2024-12-31 23:59:59.999999",
    "2024-02-30 10:00:00.000000": None,
    # 26 characters Spark's legacy parser would accept (its "upgrade" error, not NULL, if parsed)
    "2024-05-02 20:00:00.00000a": None,
    "2024-5-02 20:00:00.0000000": None,
    "2024-05-02 24:00:00.000000": None,
    "2024-05-02T25:00:00Z": None,
    "2024-05-02": None,
    "20240502 200000": None,
    "yesterday": None,
    "": None,
}


def test_commit_instants_of_every_form_dms_writes(spark: SparkSession) -> None:
    # GIVEN commit timestamps in DMS's default form, ISO-8601 with Z or an offset, and non-timestamps
    frame = spark.createDataFrame([(text,) for text in INSTANTS], "text string")
    # WHEN normalised
    got = {
        r["text"]: r["instant"] for r in frame.select("text", F.expr(commit_instant("text")).alias("instant")).collect()
    }
    # THEN each is the UTC instant as DMS's text, or NULL
    assert got == INSTANTS


@EVALUATION
@pytest.mark.parametrize("files_per_batch", [1, 3])
def test_changes_are_ordered_by_the_instant_of_their_commit_timestamp(
    make_engine: EngineFactory, tmp_path: Path, files_per_batch: int, evaluation: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    interpreted: list[int] = []
    real = prepare.interpreted_expressions

    @contextmanager
    def counted(spark: SparkSession) -> Iterator[None]:
        interpreted.append(1)
        with real(spark):
            yield

    monkeypatch.setattr(prepare, "interpreted_expressions", counted)
    # GIVEN three CDC files in write order whose commit timestamps use DMS's ISO-8601 forms:
    # 19:00:03Z, then 21:30+02:00 (19:30Z), then 20:00 UTC without a zone. As text, the last
    # sorts first ('2024-05-02 2' < '2024-05-02T1'); as instants it is the newest.
    engine = _evaluated(make_engine(PEOPLE % files_per_batch), evaluation)
    table_dir = tmp_path / "bronze" / "s" / "people"
    write_csv(table_dir / "LOAD00000001.csv", [["2024-05-01 00:00:00.000000", "1", "loaded"]])
    write_csv(table_dir / "20240502-1900030000.csv", [["U", "2024-05-02T19:00:03Z", "1", "first"]])
    write_csv(table_dir / "20240502-1930000000.csv", [["U", "2024-05-02T21:30:00.5+02:00", "1", "second"]])
    write_csv(table_dir / "20240502-2000000000.csv", [["U", "2024-05-02 20:00:00.000000", "1", "third"]])
    # WHEN run (one file per batch: each change meets the stored row of the one before; three:
    # the three compete inside one batch)
    report = run(engine).checked()
    # THEN the change committed last wins and none is counted late, whichever way the batches
    # were evaluated (every batch of a few bytes interpreted, unless the engine says otherwise)
    assert len(interpreted) == (3 // files_per_batch if evaluation == "interpreted" else 0)
    assert _names(engine) == {1: "third"}
    assert sum(t.ignored_late for t in report.tables) == 0
    assert _rows_in_quarantine(engine) == []


def test_an_older_instant_written_with_an_offset_is_late(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a change at 20:00 UTC applied first, then a file with 21:00+02:00 (19:00 UTC), which as
    # text sorts after it
    engine = make_engine(PEOPLE % 1)
    table_dir = tmp_path / "bronze" / "s" / "people"
    write_csv(table_dir / "LOAD00000001.csv", [["2024-05-01 00:00:00.000000", "1", "loaded"]])
    write_csv(table_dir / "20240502-2000000000.csv", [["U", "2024-05-02 20:00:00.000000", "1", "newer"]])
    write_csv(table_dir / "20240502-2100000000.csv", [["U", "2024-05-02T21:00:00+02:00", "1", "older"]])
    # WHEN run
    report = run(engine).checked()
    # THEN the older instant does not overwrite the newer one
    assert _names(engine) == {1: "newer"}
    assert sum(t.ignored_late for t in report.tables) == 1


@EVALUATION
def test_a_commit_timestamp_that_is_null_or_does_not_parse_is_a_bad_row(
    make_engine: EngineFactory, tmp_path: Path, evaluation: str
) -> None:
    # GIVEN a CDC file with a good change, then a NULL commit timestamp, a text that is no
    # timestamp, and a day that does not exist
    engine = _evaluated(make_engine(PEOPLE % 3), evaluation)
    table_dir = tmp_path / "bronze" / "s" / "people"
    write_csv(table_dir / "LOAD00000001.csv", [["2024-05-01 00:00:00.000000", str(i), "loaded"] for i in (1, 2, 3, 4)])
    key = "s/people/20240502-2000000000.csv"
    write_csv(
        tmp_path / "bronze" / key,
        [["U", "2024-05-02 20:00:00.000000", "1", "applied"], ["U", None, "2", "null ts"],
         ["U", "yesterday", "3", "text ts"], ["U", "2024-02-30 10:00:00.000000", "4", "no such day"]],
    )  # fmt: skip
    # WHEN run
    report = run(engine).checked()
    # THEN the three rows are quarantined with their reasons, never counted late, and the stored
    # rows of their keys are untouched
    assert _rows_in_quarantine(engine) == [
        (key, 2, "commit timestamp column commit_ts is NULL"),
        (key, 3, "value 'yesterday' of column commit_ts is not a valid commit timestamp"),
        (key, 4, "value '2024-02-30 10:00:00.000000' of column commit_ts is not a valid commit timestamp"),
    ]
    assert _names(engine) == {1: "applied", 2: "loaded", 3: "loaded", 4: "loaded"}
    assert sum(t.ignored_late for t in report.tables) == 0
    assert sum(t.rows_quarantined for t in report.tables) == 3


PRICES = """
bronze: {timestamp_column: commit_ts}
quarantine: {max_bad_row_ratio: 0.9}
tables:
  s.items:
    primary_key: [id]
    columns: {id: int, qty: int, price: "decimal(10,2)", approx_qty: int, approx_price: "decimal(10,2)", w: string}
    clean:
      cast: {w: "decimal(6,1)"}
      round: [approx_qty, approx_price, w]
"""


@EVALUATION
def test_a_value_that_cannot_be_stored_exactly_is_a_bad_row_unless_rounding_is_chosen(
    make_engine: EngineFactory, tmp_path: Path, evaluation: str
) -> None:
    # GIVEN a fraction into an int column and more fraction digits than a decimal's scale, beside
    # exact values with trailing zeros and columns that opt into rounding
    engine = _evaluated(make_engine(PRICES), evaluation)
    key = "s/items/20240502-2000000000.csv"
    ts = "2024-05-02 20:00:00.000000"
    write_csv(
        tmp_path / "bronze" / key,
        [["I", ts, "1", "3", "12.30", "2.5", "1.005", "0.25"], ["I", ts, "2", "2.7", "1.00", "1", "1", "1"],
         ["I", ts, "3", "3", "12.345", "1", "1", "1"], ["I", ts, "4", "-2.000", "-12.340", "-2.5", "-0.001", "-0.25"]],
    )  # fmt: skip
    # WHEN run
    run(engine).checked()
    # THEN the two lossy values are bad rows with their reasons; exact values and the opted-in
    # columns (rounded half up) are applied
    assert _rows_in_quarantine(engine) == [
        (key, 2, "value '2.7' of column qty cannot be stored exactly as int (clean.round rounds it)"),
        (key, 3, "value '12.345' of column price cannot be stored exactly as decimal(10,2) (clean.round rounds it)"),
    ]
    rows = engine.spark.table(f"silver.{engine.config.database}.items").drop("_cdc_order", "commit_ts").collect()
    assert sorted(tuple(r) for r in rows) == [
        (1, 3, Decimal("12.30"), 3, Decimal("1.01"), Decimal("0.3")),
        (4, -2, Decimal("-12.34"), -3, Decimal("0.00"), Decimal("-0.3")),
    ]


NO_OP = (
    "has no Op column (DMS's CdcInsertsOnly or CdcInsertsAndUpdates with IncludeOpForFullLoad=false), so its "
    "inserts, updates and deletes cannot be told apart: set IncludeOpForFullLoad=true on the S3 target endpoint "
    "and bronze.include_op_for_full_load: true"
)


def _without_op(spark: SparkSession, tmp_path: Path, layout: str) -> tuple[str, str]:
    """A configuration and the key of a CDC file written without the Op column, as DMS writes one
    with CdcInsertsOnly and IncludeOpForFullLoad=false, in ``layout``."""
    table_dir = tmp_path / "bronze" / "s" / "people"
    ts = "2024-05-02 20:00:00.000000"
    rows = [[ts, "1", "changed"], [ts, "2", "new"]]
    settings = {"headerless CSV": "{timestamp_column: commit_ts}", "CSV with a header": "{csv_header: true}"}
    if layout == "Parquet":
        table_dir.mkdir(parents=True)
        out = tmp_path / "parquet"
        spark.createDataFrame(rows, "commit_ts string, id string, name string").coalesce(1).write.parquet(str(out))
        (table_dir / "20240502-2000000000.parquet").write_bytes(next(out.glob("part-*.parquet")).read_bytes())
        key, config = "s/people/20240502-2000000000.parquet", "{format: parquet}"
    else:
        header = ["commit_ts", "id", "name"] if layout == "CSV with a header" else None
        write_csv(table_dir / "20240502-2000000000.csv", rows, header=header)
        key, config = "s/people/20240502-2000000000.csv", settings[layout]
    return key, f"bronze: {config}\ntables:\n  s.people: {{primary_key: [id], columns: {{id: int, name: string}}}}\n"


@pytest.mark.parametrize("layout", ["headerless CSV", "CSV with a header", "Parquet"])
def test_a_cdc_file_without_op_is_refused_naming_the_endpoint_setting(
    spark: SparkSession, make_engine: EngineFactory, tmp_path: Path, layout: str
) -> None:
    # GIVEN a loaded table and a CDC file without the Op column
    table_dir = tmp_path / "bronze" / "s" / "people"
    key, config = _without_op(spark, tmp_path, layout)
    load = [["2024-05-01 00:00:00.000000", "1", "loaded"]] if layout == "headerless CSV" else [["1", "loaded"]]
    header = ["id", "name"] if layout == "CSV with a header" else None
    if layout == "Parquet":
        out = tmp_path / "load"
        spark.createDataFrame([(1, "loaded")], "id int, name string").coalesce(1).write.parquet(str(out))
        (table_dir / "LOAD00000001.parquet").write_bytes(next(out.glob("part-*.parquet")).read_bytes())
    else:
        write_csv(table_dir / "LOAD00000001.csv", load, header=header)
    engine = make_engine(config)
    # WHEN run
    report = run(engine).checked()
    # THEN the file is held with the one sentence that names the setting, and nothing of it applied
    [(held, reason)] = _files_in_quarantine(engine)
    assert held == key
    assert reason == f"{key} {NO_OP}."
    assert [t.quarantined_files for t in report.tables if t.kind == "cdc"] == [[key]]
    assert _names(engine) == {1: "loaded"}


def _files_in_quarantine(engine: Engine) -> list[tuple]:
    name = f"silver.{engine.config.database}.{QUARANTINE_TABLE}"
    if not engine.spark.catalog.tableExists(name):
        return []
    return sorted((r["file_key"], r["reason"]) for r in engine.spark.table(name).collect())


def test_the_bad_rows_of_a_wide_full_load_are_named_promptly(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a 50-column table (an `int unsigned` value configured as int) whose LOAD file has
    # values spanning lines and one value out of the int range (planning the bad rows' lookup
    # took 75 s at 40 columns and ran out of memory at 50)
    width = 50
    columns = ", ".join(f"c{i}: {'int' if i % 3 == 0 else 'string'}" for i in range(width))
    config = (
        f"quarantine: {{max_bad_row_ratio: 0}}\ntables:\n  s.wide:\n    primary_key: [id]\n"
        f"    columns: {{id: int, {columns}}}\n"
    )
    engine = make_engine(config)
    rows = [
        [str(n), *[str(n * i) if i % 3 == 0 else f'line {n}\nsecond, "{i}"' for i in range(width)]] for n in range(300)
    ]
    rows[150][1] = "4294967295"
    write_csv(tmp_path / "bronze" / "s" / "wide" / "LOAD00000001.csv", rows)
    table = engine.config.tables[0]
    files = list_bronze(engine.store).for_table("s", "wide", FileKind.FULL_LOAD)
    changes, counts = read_and_count(engine, table, files, full_load=True)
    # WHEN its bad rows are looked up (above the ratio: the error names them)
    started = time.monotonic()
    with pytest.raises(BadInputError) as failure:
        bad_rows(engine, table, changes, files, counts)
    # THEN the row is named with its reason, well within a minute
    assert time.monotonic() - started < 60
    assert "s/wide/LOAD00000001.csv data row 151: value '4294967295' of column c0 is not a valid int" in str(
        failure.value
    )


ORDERS = """
bronze: {csv_header: true, timestamp_column: ts}
tables:
  s.orders: {primary_key: [id], columns: {id: int, qty: int}}
  s.other: {primary_key: [id], columns: {id: int, qty: int}}
"""


def test_a_header_that_contradicts_the_declared_columns_is_held_before_anything_is_written(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN declared columns id, qty and, among the CDC files of s.orders, one whose header says
    # `quantity` instead of `qty` (files before and after it are right), and a second table
    engine = make_engine(ORDERS)
    bronze = tmp_path / "bronze" / "s"
    ts = "2024-01-02 00:00:0{}.000000"
    for table in ("orders", "other"):
        write_csv(bronze / table / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "1"],
                                                        ["2024-01-01 00:00:00.000000", "2", "2"]],
                  header=["ts", "id", "qty"])  # fmt: skip
        write_csv(bronze / table / "20240102-0000010000.csv", [["U", ts.format(1), "1", "5"]],
                  header=["Op", "ts", "id", "qty"])  # fmt: skip
    key = "s/orders/20240102-0000020000.csv"
    write_csv(tmp_path / "bronze" / key, [["U", ts.format(2), "2", "7"]], header=["Op", "ts", "id", "quantity"])
    write_csv(bronze / "orders" / "20240102-0000030000.csv", [["U", ts.format(3), "1", "9"]],
              header=["Op", "ts", "id", "qty"])  # fmt: skip
    # WHEN run
    report = run(engine)
    # THEN the file is held with the reason naming it, the header column and the declared one
    assert _files_in_quarantine(engine) == [
        (
            key,
            f"{key}: header column(s) quantity are not among the declared columns of s.orders (declared but not in "
            "the header: qty), so the file is not applied (they would become new columns, leaving declared ones "
            "NULL): declare them under the table's columns or correct the file, then run `cdclake replay "
            "--quarantined`.",
        )
    ]
    assert [t.quarantined_files for t in report.tables if t.table == "s.orders" and t.kind == "cdc"] == [[key]]
    # AND nothing of it reached silver (no `quantity` column, key 2 untouched), while the files
    # before and after it and the other table were applied
    orders = engine.spark.table(f"silver.{engine.config.database}.orders")
    assert [c for c in orders.columns if not c.startswith("_cdc_")] == ["ts", "id", "qty"]
    assert {r["id"]: r["qty"] for r in orders.collect()} == {1: 9, 2: 2}
    other = engine.spark.table(f"silver.{engine.config.database}.other")
    assert {r["id"]: r["qty"] for r in other.collect()} == {1: 5, 2: 2}
    assert not report.failures
    # AND status shows the column
    statuses = {s.source: s for s in table_statuses(engine)}
    assert (statuses["s.orders"].undeclared_columns, statuses["s.other"].undeclared_columns) == ("quantity", "")
    assert statuses["s.orders"].quarantined_files == 1


def test_a_wide_full_load_with_a_bad_row_is_planned_in_seconds(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a LOAD file of a 60-column table with one value that is not an int: the careful path
    # filters the typed and checked rows, and Spark's constraint inference over that projection
    # planned for minutes before it was switched off
    columns = [f"c{i}" for i in range(60)]
    engine = make_engine(
        "bronze: {timestamp_column: ts}\ntables:\n  s.wide:\n    primary_key: [id]\n    columns: {id: int, "
        + ", ".join(f"{c}: int" for c in columns)
        + "}\n"
    )
    rows = [["2024-01-01 00:00:00.000000", str(r), *[str(r + i) for i in range(60)]] for r in range(200)]
    rows[20][31] = "x"
    write_csv(tmp_path / "bronze" / "s" / "wide" / "LOAD00000001.csv", rows)
    # WHEN the full load runs, watched by a clock (planning cannot be cancelled: the thread is a daemon)
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(run(engine)), daemon=True)
    worker.start()
    worker.join(timeout=240)
    # THEN it finished, the bad row is held with its reason and the other 199 rows are loaded
    assert done, "the full load of a wide table was still planning after 240 s"
    assert done[0].failures == []
    held = ("s/wide/LOAD00000001.csv", 21, "value 'x' of column c29 is not a valid int")
    assert _rows_in_quarantine(engine) == [held]
    assert engine.spark.table(f"silver.{engine.config.database}.wide").count() == 199


def test_a_commit_timestamp_typed_as_a_timestamp_gives_the_instant_its_text_would(spark: SparkSession) -> None:
    # GIVEN the same commit timestamps as DMS text and as Parquet timestamps (microseconds, UTC),
    # a fraction with trailing zeros and none among them
    texts = ["2024-05-02 20:00:00.000000", "2024-05-02 20:00:00.500000", "2024-12-31 23:59:59.999999"]
    config = parse_config("bronze: {format: parquet, timestamp_column: ts}\ntables:\n  s.t: {primary_key: [id]}\n")
    typed = spark.createDataFrame([("U", t, 1) for t in texts], "Op string, ts string, id int").withColumn(
        CORRUPT_RECORD, F.lit(None).cast("string")
    )  # as the reader gives them
    # WHEN each becomes changes
    instants = {
        kind: [r[COMMIT_TS] for r in to_changes(frame, config.bronze, config.tables[0]).collect()]
        for kind, frame in {"text": typed, "timestamp": typed.withColumn("ts", F.col("ts").cast("timestamp"))}.items()
    }
    # THEN both carry DMS's text of the instant
    assert instants["timestamp"] == instants["text"] == texts


def test_the_invalid_flag_marks_exactly_the_rows_with_a_reason(spark: SparkSession) -> None:
    # GIVEN raw rows with one problem each of every kind the typing, the cleaning and the key check
    # find, and good rows (the one-scan full load fails at a flagged row: a row flagged wrongly
    # would load silently, a good row flagged wrongly would only take the careful path)
    config = parse_config(
        "bronze: {timestamp_column: ts}\ntables:\n  s.t:\n    primary_key: [id]\n"
        '    columns: {id: int, amount: "decimal(5,2)", n: int}\n    clean: {cast: {ts: timestamp}}\n'
    )
    good = ("I", "2024-05-02 20:00:00.000000", "1", "1.50", "2", None)
    rows = [
        good,
        ("U", "2024-05-02T20:00:00Z", "2", "1.5", "-3", None),  # ISO-8601: good too
        ("X", "2024-05-02 20:00:00.000000", "3", "1.50", "2", None),  # unknown Op
        ("I", "2024-02-30 20:00:00.000000", "4", "1.50", "2", None),  # no such day
        ("I", "2024-05-02 20:00:00.000000", "5", "1.505", "2", None),  # lossy decimal
        ("I", "2024-05-02 20:00:00.000000", "6", "1.50", "2.7", None),  # lossy int
        ("I", "2024-05-02 20:00:00.000000", "seven", "1.50", "2", None),  # not an int
        ("I", "2024-05-02 20:00:00.000000", None, "1.50", "2", None),  # NULL key
        ("I", "2024-05-02 20:00:00.000000", "9", "1.50", "2", "a,b,c"),  # wrong number of fields
        ("I", None, "10", "1.50", "2", None),  # NULL commit timestamp: a CDC row's error
    ]
    schema = f"Op string, ts string, id string, amount string, n string, {CORRUPT_RECORD} string"
    raw = spark.createDataFrame(rows, schema)
    changes = flag_missing_keys(
        apply_cleaning(to_changes(raw, config.bronze, config.tables[0]), config.tables[0].clean, "s.t"), ["id"]
    )
    # WHEN each row's flag is read beside its reasons
    checked = changes.select("id", has_error(changes).alias("flag"), (has_error()).alias("reasons"), ERROR).collect()
    # THEN the flag is set exactly where a reason is, and every problem row has one
    assert [(r["flag"], r["reasons"]) for r in checked] == [(r["reasons"], r["reasons"]) for r in checked]
    assert [r["flag"] for r in checked] == [False, False] + [True] * 8


# Commit timestamps at the edges of the parse's one regular expression: its parts are rewritten
# as "date time|fraction|zone|", so a '|' in the text, a line terminator after the match (Java's
# '$' matches before one), and the zone's and fraction's optional parts are where it could differ
# from a regexp_extract per part.
INSTANT_EDGES = {
    "2024-05-02 20:00:00.000000\n": "2024-05-02 20:00:00.000000\n",  # DMS's form: kept as written
    "2024-05-02T20:00:00Z\u2028": "2024-05-02 20:00:00.000000",  # a terminator '\\s' does not match
    "2024-05-02T21:30:00.5+02:00\r\n": "2024-05-02 19:30:00.500000",
    "2024-05-02 20:00:00,25 -05": "2024-05-03 01:00:00.250000",
    "2024-05-02T20:00:00.123456789-0530": "2024-05-03 01:30:00.123456789",
    "2024-05-02 20:00:00|5": None,
    "2024-05-02 20:00:00.000000|": None,
    "|2024-05-02 20:00:00": None,
    "2024-05-02T20:00:00Z\n\n": "2024-05-02 20:00:00.000000",  # '\\s*' takes both
    "2024-05-02T20:00:00Z\u2028\u2028": None,  # '$' allows one terminator only
}


def test_commit_instants_at_the_edges_of_the_one_match_parse(spark: SparkSession) -> None:
    # GIVEN commit timestamps at the edges of the parse
    config = parse_config("bronze: {timestamp_column: ts}\ntables:\n  s.t: {primary_key: [id], columns: {id: int}}\n")
    raw = spark.createDataFrame(
        [("I", t, 1, None) for t in INSTANT_EDGES], f"Op string, ts string, id int, {CORRUPT_RECORD} string"
    )
    # WHEN normalised as one expression and by the typing (two projections)
    alone = {r["ts"]: r["instant"] for r in raw.select("ts", F.expr(commit_instant("ts")).alias("instant")).collect()}
    typed = {r["ts"]: r[COMMIT_TS] for r in to_changes(raw, config.bronze, config.tables[0]).collect()}
    # THEN both give each one's instant, or NULL where it is no timestamp
    assert alone == typed == INSTANT_EDGES


def test_typing_casts_each_value_once_and_flags_exactly_the_bad_values(spark: SparkSession) -> None:
    # GIVEN text values at the edges of the checks: spaces around digits, a '.' or an exponent,
    # the UTF-8 replacement character in one text column of several
    config = parse_config(
        "bronze: {timestamp_column: ts}\ntables:\n  s.t:\n    primary_key: [id]\n"
        '    columns: {id: int, amount: "decimal(5,2)", n: bigint}\n    clean: {cast: {ts: timestamp}}\n'
    )
    ts = "2024-05-02 20:00:00.000000"
    rows = {  # id -> (amount, n, note), the reason expected (None: a good row)
        "1": (("1.50  ", " 7", "ok"), None),
        "2": (("  1.505", "7", "ok"), "value '  1.505' of column amount cannot be stored exactly as decimal(5,2)"),
        "3": (("1.5e1", "2.0", "ok"), None),
        "4": (("1.505e0", "7", "ok"), "value '1.505e0' of column amount cannot be stored exactly as decimal(5,2)"),
        "5": (("1.50", "2.70 ", "ok"), "value '2.70 ' of column n cannot be stored exactly as bigint"),
        "6": (("1.50", "7", "a\ufffdb"), "bytes that are not valid UTF-8"),
        "7": (("x", "7", "ok"), "value 'x' of column amount is not a valid decimal(5,2)"),
        "8": ((None, None, None), None),
    }
    schema = f"Op string, ts string, id string, amount string, n string, note string, {CORRUPT_RECORD} string"
    raw = spark.createDataFrame([("I", ts, i, *values, None) for i, (values, _) in rows.items()], schema)
    changes = flag_missing_keys(
        apply_cleaning(to_changes(raw, config.bronze, config.tables[0]), config.tables[0].clean, "s.t"), ["id"]
    )
    # WHEN typed and checked
    checked = {
        r["id"]: (r["flag"], r["reason"])
        for r in changes.select(
            "id", has_error(changes).alias("flag"), F.concat_ws("; ", ERROR).alias("reason")
        ).collect()
    }
    # THEN exactly the bad values are flagged, each with its reason
    assert {i: flag for i, (flag, _) in checked.items()} == {
        int(i): reason is not None for i, (_, reason) in rows.items()
    }
    for i, (_, reason) in rows.items():
        assert (reason or "") in checked[int(i)][1] and (reason is not None or checked[int(i)][1] == "")
    # AND each value is cast once per row (the check reads the cast's result): one cast of each
    # in the plan of the typed, flagged rows
    plan = changes.select("id", "amount", "n", "ts", has_error(changes))._jdf.queryExecution().executedPlan().toString()
    casts = [r"cast\(amount#\d+ as decimal\(5,2\)\)", r"cast\(n#\d+ as bigint\)", r"cast\(ts#\d+ as timestamp\)"]
    assert [len(re.findall(cast, plan)) for cast in casts] == [1, 1, 1], plan


def test_parquet_text_holding_the_replacement_character_is_loaded_as_it_is(
    spark: SparkSession, make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a Parquet LOAD file whose text holds U+FFFD, a character like any other there (Spark
    # decodes no Parquet text: only CSV bytes that are not UTF-8 become U+FFFD), under the default
    # bronze format (CSV: files are read by their own format)
    table_dir = tmp_path / "bronze" / "s" / "people"
    table_dir.mkdir(parents=True)
    out = tmp_path / "load"
    rows = [("2024-05-01 00:00:00.000000", 1, "caf\ufffd"), ("2024-05-01 00:00:00.000000", 2, "ok")]
    spark.createDataFrame(rows, "commit_ts string, id int, name string").coalesce(1).write.parquet(str(out))
    (table_dir / "LOAD00000001.parquet").write_bytes(next(out.glob("part-*.parquet")).read_bytes())
    engine = make_engine(PEOPLE % 1)
    # WHEN loaded
    report = run(engine).checked()
    # THEN both rows are loaded, nothing quarantined
    assert _names(engine) == {1: "caf\ufffd", 2: "ok"}
    assert _rows_in_quarantine(engine) == []
    assert [t.rows_quarantined for t in report.tables] == [0]
