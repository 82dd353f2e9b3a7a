"""Rendering query results (aligned table, CSV, JSON lines) and the replication lag."""

from __future__ import annotations

import datetime as dt

import pytest

from cdclake.ops.status import _lag
from cdclake.shells.output import format_rows

COLUMNS = ["id", "name"]
ROWS = [[1, None], [22, "bob"]]
NOW = dt.datetime(2024, 3, 1, 12, 1, 30, tzinfo=dt.UTC)


def test_table_style() -> None:
    # GIVEN two rows, one with NULL
    # WHEN / THEN they render as an aligned table with NULL spelled out and a row count
    assert format_rows(COLUMNS, ROWS, "table").splitlines() == [
        "+----+------+",
        "| id | name |",
        "+----+------+",
        "| 1  | NULL |",
        "| 22 | bob  |",
        "+----+------+",
        "(2 rows)",
    ]


def test_table_style_width_follows_longest_value() -> None:
    # GIVEN a value longer than its column name
    # WHEN / THEN the column widens to fit it
    assert format_rows(["n"], [["long value"]], "table").splitlines()[:2] == ["+------------+", "| n          |"]


def test_table_style_single_row_count() -> None:
    # GIVEN / WHEN one row is rendered / THEN the count is singular
    assert format_rows(["id"], [[1]], "table").splitlines()[-1] == "(1 row)"


def test_table_style_no_rows() -> None:
    # GIVEN / WHEN no rows are rendered / THEN the header and a zero count remain
    assert format_rows(["id"], [], "table") == "+----+\n| id |\n+----+\n+----+\n(0 rows)\n"


def test_csv_style() -> None:
    # GIVEN rows with NULL and a value holding a comma
    # WHEN / THEN they render as CSV with NULL as an empty field
    assert format_rows(COLUMNS, [[1, None], [22, "a,b"]], "csv") == 'id,name\n1,\n22,"a,b"\n'


def test_json_style() -> None:
    # GIVEN rows with NULL and a date
    rows = [[1, None, dt.date(2024, 3, 1)]]
    # WHEN / THEN each row is one JSON object, NULL as null and other types as text
    assert format_rows(["id", "name", "day"], rows, "json") == '{"id": 1, "name": null, "day": "2024-03-01"}\n'


def test_lag_in_seconds() -> None:
    # GIVEN a latest change 90 seconds before now (DMS timestamps carry no zone: UTC)
    # WHEN / THEN the lag is 90 seconds
    assert _lag("2024-03-01 12:00:00", NOW) == 90.0


def test_lag_rounds_to_tenths() -> None:
    # GIVEN a latest change with microseconds
    # WHEN / THEN the lag is rounded to a tenth of a second
    assert _lag("2024-03-01 12:00:00.750000", NOW) == 89.2


@pytest.mark.parametrize("latest", [None, "", "not a time"])
def test_lag_unknown(latest: str | None) -> None:
    # GIVEN no or an unreadable latest change
    # WHEN / THEN there is no lag
    assert _lag(latest, NOW) is None


@pytest.mark.parametrize("style", ["table", "csv", "json"])
def test_binary_values_print_as_hex_in_every_style(style: str) -> None:
    # GIVEN a binary value as Spark returns it from a real DMS Parquet bytea column
    rows = [[1, bytearray(b"whthctcu")]]
    # WHEN rendered in any style
    text = format_rows(["id", "my_bytea"], rows, style)
    # THEN it shows as PostgreSQL's hex form, never as a Python repr
    assert "\\x7768746863746375" in text.replace("\\\\", "\\")
    assert "bytearray" not in text
    assert text.endswith("\n")
