"""Rendering query results (aligned table, CSV, JSON lines) and the replication lag."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from cdclake.gold.status import MartStatus
from cdclake.lake.cuts import PublishedCut
from cdclake.ops import table_status as status_module
from cdclake.ops.table_status import TableStatus, _lag
from cdclake.shells.output import format_rows
from cdclake.shells.query import row_limit
from cdclake.shells.status_view import (
    WIDTH,
    compact_marts,
    compact_tables,
    cut_line,
    human_duration,
    status_text,
    table_state,
)

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


# --------------------------------------------------------------------------- query output


def test_csv_tells_null_from_the_empty_string() -> None:
    # GIVEN a NULL, an empty string, a quote and a line break
    rows = [[None, "", 'say "hi"', "a\nb"]]
    # WHEN rendered as CSV
    text = format_rows(["n", "e", "q", "l"], rows, "csv")
    # THEN NULL is an empty unquoted field and the empty string is "" (PostgreSQL's COPY CSV)
    assert text == 'n,e,q,l\n,"","say ""hi""","a\nb"\n'


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        ("csv", "flag,other\ntrue,false\n"),
        ("json", '{"flag": true, "other": false}\n'),
    ],
)
def test_booleans_print_as_true_and_false(style: str, expected: str) -> None:
    # GIVEN booleans as Spark returns them / WHEN rendered / THEN true and false, never True/False
    assert format_rows(["flag", "other"], [[True, False]], style) == expected


def test_table_style_booleans() -> None:
    # GIVEN / WHEN a boolean renders in the table view / THEN it reads true
    assert format_rows(["flag"], [[True]], "table").splitlines()[3] == "| true |"


@pytest.mark.parametrize(
    ("style", "limit", "rows"),
    [("csv", None, None), ("json", None, None), ("table", None, 1000), ("csv", 5, 5), ("table", 0, None)],
)
def test_exports_are_whole_unless_a_limit_is_given(style: str, limit: int | None, rows: int | None) -> None:
    # GIVEN a format and maybe --limit / WHEN the row limit is chosen / THEN exports are whole by default
    assert row_limit(style, limit) == rows


# --------------------------------------------------------------------------- status views


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0.4, "0s"), (45, "45s"), (125, "2m 5s"), (8040, "2h 14m"), (90_061, "1d 1h")],
)
def test_lag_reads_as_a_duration(seconds: float | None, text: str) -> None:
    # GIVEN a lag in seconds / WHEN shown / THEN its two largest units
    assert human_duration(seconds) == text


def _status(source: str, **fields: object) -> TableStatus:
    values: dict[str, object] = {"rows": 10, "snapshots": 3, "files_applied": 2, "lag_seconds": 8040.0}
    values.update(fields)
    return TableStatus(source, f"db.{source.split('.')[1]}", exists=True, **values)  # type: ignore[arg-type]


def test_compact_status_fits_a_terminal_and_says_what_needs_attention() -> None:
    # GIVEN a table up to date, one behind with a long name and a held file, one not loaded
    reason = (
        "2 CDC file(s) not applied yet; 1 file(s) held in quarantine (last: bad Op 'X'); `cdclake replay --quarantined`"
    )
    statuses = [
        _status("inventory.order-items", behind="up to date"),
        _status(
            "warehouse_management_system.inventory_movements_by_location",
            pending_files=2,
            quarantined_files=1,
            last_applied_file="warehouse_management_system/inventory_movements_by_location/20240102-0000010000.csv",
            behind=reason,
        ),
        TableStatus("s.new", "db.new", exists=False, pending_files=1, behind="not loaded: 1 full-load and 1 CDC files"),
    ]
    # WHEN the compact view is rendered
    lines = compact_tables(statuses).splitlines()
    # THEN one line per table no wider than 100 columns, the lag as a duration, short markers as state
    assert lines[:4] == [
        "TABLE                             ROWS  APPLIED  PENDING  LAG     STATE",
        "inventory.order-items               10        2        0  2h 14m  up to date",
        "warehouse_manag…ents_by_location    10        2        2  2h 14m  2 pending, 1 held",
        "s.new                                -        -        1  -       not loaded",
    ]
    assert all(len(line) <= WIDTH for line in lines[:4])
    # AND below, the whole reason of each table that is behind
    assert lines[4:] == [
        "",
        f"warehouse_management_system.inventory_movements_by_location: {reason}",
        "s.new: not loaded: 1 full-load and 1 CDC files",
    ]


def test_a_new_status_field_is_one_marker_away_from_the_compact_view(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a marker for a field (as the quarantined-rows count will add one)
    markers = (*status_module.ATTENTION_MARKERS, ("tombstones", lambda n: f"{n} tombstones"))
    monkeypatch.setattr(status_module, "ATTENTION_MARKERS", markers)
    # WHEN a table with that field set is shown / THEN the marker is its state
    assert table_state(_status("s.t", tombstones=4, behind="up to date")) == "4 tombstones"


def test_wide_status_has_every_field_with_the_lag_as_a_duration() -> None:
    # GIVEN one table status / WHEN shown with --wide
    text = status_text([_status("s.t", behind="up to date")], [], "table", wide=True)
    header = [c.strip() for c in text.splitlines()[1].strip("|").split("|")]
    # THEN every field is a column (the lag as a duration), and csv keeps the lag in seconds
    assert header == [("lag" if f == "lag_seconds" else f) for f in TableStatus.__dataclass_fields__]
    assert "| 2h 14m |" in text
    assert "8040.0" in status_text([_status("s.t")], [], "csv", wide=False).splitlines()[1]


def test_compact_mart_status_and_why_the_last_refresh_was_full() -> None:
    # GIVEN a mart refreshed in full because its SQL has a HAVING, and one never refreshed
    full = MartStatus(
        "shop_gold.big_cities", True, 12, "2026-11-25T14:38:46+00:00", "full",
        "its SQL is not a GROUP BY of its keys (HAVING filters its groups)", "{}", 2, 125.0,
    )  # fmt: skip
    # WHEN the compact view is rendered
    lines = compact_marts([full, MartStatus("shop_gold.new", exists=False)]).splitlines()
    # THEN one line each, and below, the reason in SQL's words
    assert lines == [
        "MART                  ROWS  LAST REFRESH (UTC)   PATH               BEHIND  LAG",
        "shop_gold.big_cities    12  2026-11-25 14:38:46  full                    2  2m 5s",
        "shop_gold.new            -  -                    not refreshed yet       -  -",
        "",
        "shop_gold.big_cities: last refreshed in full: "
        "its SQL is not a GROUP BY of its keys (HAVING filters its groups)",
    ]


def test_unloaded_load_files_and_undeclared_header_columns_show_in_the_compact_view() -> None:
    # GIVEN a table with a LOAD file its load does not hold and a held file with an undeclared column
    status = _status("s.t", unloaded_load_files="LOAD00000002.csv", undeclared_columns="quantity", behind="up to date")
    # WHEN shown compactly / THEN both are in its state, in the user's words
    assert table_state(status) == "LOAD files not loaded: LOAD00000002.csv, undeclared header columns: quantity"


def test_the_table_format_says_where_the_latest_cut_stands_and_csv_and_json_keep_their_shape() -> None:
    # GIVEN two tables whose newest applied changes are 35 s and 2 min after a published cut
    tables = [
        _status("s.a", latest_change="2024-01-02 00:00:37.000000", behind="up to date"),
        _status("s.b", latest_change="2024-01-02 00:02:02.500000", behind="up to date"),
    ]
    cut = PublishedCut("capture", "0002", "LSN 0/2", "2024-01-02 00:00:02.000000", {"a": 1, "b": 2})
    # WHEN status is shown with the cut
    compact, wide = (status_text(tables, [], "table", w, cut) for w in (False, True))
    # THEN the table format ends with one line: T, the position, the tables, how far T is behind the newest change
    line = "cut: at 2024-01-02 00:00:02.000000 (LSN 0/2): 2 tables, 2m 0s behind the newest change"
    assert compact == status_text(tables, [], "table", False) + "\n" + line + "\n"
    assert wide.splitlines()[-1] == line
    # AND a cut at the newest change, or at the first full load (no T yet), says so
    assert cut_line(replace(cut, commit_ts="2024-01-02 00:02:02.500000"), tables).endswith(
        ": 2 tables, at the newest change"
    )
    assert cut_line(replace(cut, commit_ts=None), tables) == "cut: at the first full load (LSN 0/2): 2 tables"
    # AND csv and json are one record per table, as before
    for style in ("csv", "json"):
        assert status_text(tables, [], style, False, cut) == status_text(tables, [], style, False)
