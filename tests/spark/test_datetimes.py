"""Dates and timestamps of any year Spark accepts (0001 to 9999, and the year 10000 a load takes) are
stored as proleptic Gregorian values by every writer of a batch's files, and read the same by Spark
and by pyiceberg.

The oracle is plain arithmetic on the source's text: days and microseconds since 1970-01-01 in the
proleptic Gregorian calendar, what the Iceberg spec stores. A value shifted into Spark's old hybrid
calendar (Parquet's LEGACY rebase) differs from it by days before 1582-10-15.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from readers import comparable_rows, pyiceberg_read, spark_read

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {timestamp_column: commit_ts}
tables:
  s.events:
    primary_key: [id]
    columns: {id: int, day: date, at: timestamp, local: timestamp_ntz}
"""
# Before, inside and after the ten days 1582 skipped (Julian 1582-10-04 was followed by Gregorian
# 1582-10-15), a Julian-only leap day's neighbours, the edges of four-digit years and beyond.
VALUES = [
    "0001-01-01 00:00:00",
    "0100-03-01 12:34:56.789012",
    "1000-02-28 23:59:59",
    "1582-10-04 10:00:00",
    "1582-10-10 10:00:00",
    "1582-10-15 00:00:00",
    "1969-12-31 23:59:59.999999",
    "9999-12-31 23:59:59.999999",
    "+10000-01-01 00:00:00",
]
LOAD_TS = "2024-01-01 00:00:00.000000"


def _days(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to the proleptic Gregorian date (H. Hinnant's days_from_civil)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _proleptic(text: str) -> tuple[int, int]:
    """``text`` (``[+]yyyy-mm-dd hh:mm:ss[.ffffff]``) as (days, microseconds) since 1970-01-01."""
    date_part, time_part = text.lstrip("+").split(" ")
    year, month, day = (int(p) for p in date_part.split("-"))
    clock, _, fraction = time_part.partition(".")
    hours, minutes, seconds = (int(p) for p in clock.split(":"))
    days = _days(year, month, day)
    micros = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return days, micros * 1_000_000 + int(fraction.ljust(6, "0"))


def _expected(state: dict[int, str]) -> list[tuple[Any, ...]]:
    """The rows (id, day, at, local) the source holds."""
    rows = []
    for key, text in state.items():
        days, micros = _proleptic(text)
        rows.append((key, days, micros, micros))
    return sorted(rows, key=repr)


def _values(table: pa.Table) -> list[tuple[Any, ...]]:
    return comparable_rows(table.select(["id", "day", "at", "local"]))


def _writer_of(path: str) -> str:
    """Who wrote a data file, told by its name: Spark's Parquet writer (a folder of part files),
    the driver (one named file), or Iceberg's writer (its own names)."""
    if "/cdclake-data-" in path:
        return "spark" if "/part-" in path else "driver"
    return "iceberg"


@pytest.mark.parametrize(
    ("settings", "batch_writer"),
    [
        # a batch over the driver-path size: Spark's Parquet writer writes the batch's files
        pytest.param({"driver_write_bytes": 0}, "spark", id="spark-parquet-writer"),
        # a small batch: the driver's pyarrow writes them
        pytest.param({}, "driver", id="driver-pyarrow"),
        # Spark SQL's MERGE: Iceberg's own writer
        pytest.param({"way": "merge"}, "iceberg", id="merge-iceberg-writer"),
    ],
)
def test_dates_of_any_year_are_stored_proleptic_and_read_alike(
    make_engine: EngineFactory, tmp_path: Path, settings: dict[str, Any], batch_writer: str
) -> None:
    # GIVEN a full load of dates and timestamps from year 1 to year 10000, and a CDC batch that
    # updates keys to other such values, deletes some and inserts new ones
    engine = make_engine(CONFIG).tuned(**settings)
    folder = tmp_path / "bronze" / "s" / "events"
    loaded = dict(enumerate(VALUES, start=1))
    write_csv(folder / "LOAD00000001.csv", [[LOAD_TS, str(k), v.split(" ")[0], v, v] for k, v in loaded.items()])
    changes: list[tuple[str, int, str]] = [
        *(("U", k, VALUES[(k + 3) % len(VALUES)]) for k in (1, 2, 3, 4, 5)),
        *(("D", k, loaded[k]) for k in (6, 7)),
        *(("I", 10 + n, v) for n, v in enumerate(VALUES[:5])),
    ]
    write_csv(
        folder / "20240102-0000010000.csv",
        [
            [op, f"2024-01-02 00:00:{n:02d}.000000", str(k), v.split(" ")[0], v, v]
            for n, (op, k, v) in enumerate(changes)
        ],
    )
    # WHEN the load and the batch are applied (the batch through the writer under test)
    report = run(engine).checked()
    # THEN both applied (Spark's Parquet writer refused such values before), the batch's new
    # images written by the writer meant (the load's by Iceberg's)
    assert sum(t.files_applied for t in report.tables) == 2
    identifier = f"silver.{engine.config.database}.events"
    files = engine.spark.sql(f"SELECT file_path FROM {identifier}.data_files").collect()
    assert {_writer_of(r[0]) for r in files} == {"iceberg", batch_writer}
    state = {k: v for k, v in loaded.items() if k not in (6, 7)}
    state |= {k: v for op, k, v in changes if op != "D"}
    # AND Spark reads the source's values, as proleptic days and microseconds
    assert _values(spark_read(engine.spark, identifier)) == _expected(state)
    # AND pyiceberg, reading the files as they are (no calendar shift), reads the same
    assert _values(pyiceberg_read(engine.spark, identifier)) == _expected(state)
