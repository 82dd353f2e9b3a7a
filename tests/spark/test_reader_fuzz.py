"""Fuzz the CSV reader on real Spark: random values (delimiters, quotes, newlines, backslashes,
non-ASCII), random delimiters, then random damage (bytes inserted, a cut, a row in another
encoding). Whatever the bytes, the read ends in a clear ``CdclakeError`` or in rows where each is
either flagged (quarantined as a bad row) or exactly what the source wrote; never a crash, never a
silent wrong value. Rows written before the damage are always read exactly.

Few, small examples (Spark is slow to start a job); derandomized unless CDCLAKE_PROPERTY_EXAMPLES is set.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate
from pathlib import Path

from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from cdclake.columns import FILE_INDEX, ROW_POSITION
from cdclake.context import Engine
from cdclake.dms.files import parse_key
from cdclake.dms.reader import read_files
from cdclake.dms.store import LocalBronze
from cdclake.engine.changes import has_error
from cdclake.engine.read import read_and_count
from cdclake.errors import CdclakeError
from property_settings import property_settings

EngineFactory = Callable[..., Engine]


KEY = "s/t/20240101-1000000000.csv"
TS = "2024-01-01 10:00:00.000000"
# Characters that stress CSV: every delimiter, the quote, line breaks, a backslash, non-ASCII, a
# NUL. Latin-1 letters that re-encode to valid UTF-8 (such as "Ã©") are left out: such mojibake is
# valid text and cannot be told apart from a real value by any reader.
ALPHABET = st.sampled_from(list("ab ,;|\t\"\n\r\\'é✓\u0000x1"))
VALUES = st.one_of(st.none(), st.text(ALPHABET, max_size=6))


def _config(delimiter: str) -> str:
    quoted = {"\t": '"\\t"'}.get(delimiter, f"'{delimiter}'")
    return f"""
bronze: {{timestamp_column: ts, csv_delimiter: {quoted}}}
tables:
  s.t:
    primary_key: [id]
    columns: {{id: int, name: string, note: string}}
"""


def _field(value: str | None, delimiter: str) -> str:
    """A value as DMS writes it: NULL is an empty unquoted field, quoted RFC-4180 style when needed."""
    if value is None:
        return ""
    if value == "" or any(ch in value for ch in (delimiter, '"', "\n", "\r")):
        return '"' + value.replace('"', '""') + '"'
    return value


def _rows_bytes(rows: list[tuple[str | None, str | None]], delimiter: str) -> list[bytes]:
    return [
        delimiter.join(["I", TS, str(i), _field(name, delimiter), _field(note, delimiter)]).encode() + b"\n"
        for i, (name, note) in enumerate(rows, start=1)
    ]


@st.composite
def damaged_files(draw: st.DrawFn) -> tuple[str, list[tuple[str | None, str | None]], bytes, int, str]:
    """(delimiter, rows, file bytes, offset of the first damaged byte, the damage done)."""
    delimiter = draw(st.sampled_from([",", ";", "|", "\t"]))
    rows = draw(st.lists(st.tuples(VALUES, VALUES), min_size=1, max_size=6))
    lines = _rows_bytes(rows, delimiter)
    data = b"".join(lines)
    damage = draw(st.sampled_from(["none", "insert", "cut", "latin-1", "utf-16"]))
    if damage == "insert":
        at = draw(st.integers(0, len(data)))
        junk = draw(st.binary(min_size=1, max_size=4))
        return delimiter, rows, data[:at] + junk + data[at:], at, damage
    if damage == "cut":
        at = draw(st.integers(1, len(data) - 1))
        return delimiter, rows, data[:at], at, damage
    if damage in ("latin-1", "utf-16"):
        row = draw(st.integers(0, len(rows) - 1))
        text = lines[row].decode()
        if damage == "latin-1" and text.isascii():
            return delimiter, rows, data, len(data), "none"  # the same bytes: nothing damaged
        encoded = text.encode("latin-1", errors="replace") if damage == "latin-1" else text.encode("utf-16")
        at = sum(len(line) for line in lines[:row])
        return delimiter, rows, data[:at] + encoded + b"".join(lines[row + 1 :]), at, damage
    return delimiter, rows, data, len(data), "none"


@property_settings(15, [HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=damaged_files())
def test_any_csv_bytes_read_exactly_or_flagged_or_a_clear_error(
    make_engine: EngineFactory, tmp_path: Path, case: tuple[str, list[tuple[str | None, str | None]], bytes, int, str]
) -> None:
    delimiter, rows, data, damaged_at, damage = case
    # GIVEN a CDC file of those bytes
    engine = make_engine(_config(delimiter))
    path = tmp_path / "bronze" / KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    file = parse_key(KEY, len(data))
    table = engine.config.tables[0]
    # WHEN it is read and counted as a batch is
    try:
        changes, counts = read_and_count(engine, table, [file], full_load=False)
    except CdclakeError as exc:  # a clear error: the file is named, nothing applied
        assert KEY in str(exc) or table.source in str(exc), str(exc)
        return
    got = [
        (r["id"], r["name"], r["note"], bool(r["bad"]))
        for r in changes.withColumn("bad", has_error()).orderBy(FILE_INDEX, ROW_POSITION).collect()
    ]
    # THEN the counts match the rows, and rows written wholly before the damage are exact and unflagged
    expected = [(i, name, note, False) for i, (name, note) in enumerate(rows, start=1)]
    ends = list(accumulate(len(line) for line in _rows_bytes(rows, delimiter)))
    intact = sum(1 for end in ends if end <= damaged_at)
    assert (counts.total, counts.bad) == (len(got), sum(bad for *_, bad in got))
    assert got[:intact] == expected[:intact]
    if damage == "none":
        assert got == expected
    elif damage in ("latin-1", "utf-16"):
        # AND a row in another encoding is flagged (U+FFFD, field count, Op, key), never read as other text
        assert all(row[3] or row in expected for row in got[intact:]), (got, expected)
    elif damage == "cut":
        # AND a cut leaves at most the cut row after them (a cut inside the last value is valid CSV:
        # see docs/runbook.md, what no reader can catch)
        assert len(got) <= intact + 1
    # (bytes inserted inside a value can make another valid value: only the rows before them are checked)


def test_a_bronze_root_with_spaces_non_ascii_and_glob_characters(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a bronze root (as a staging directory may be) named with a space, non-ASCII and brackets
    root = tmp_path / "my bronze ✓ [copy] {1}"
    (root / "s/t").mkdir(parents=True)
    (root / KEY).write_bytes(f"I,{TS},1,a,b\n".encode())
    engine = make_engine(_config(","))
    store = LocalBronze(root)
    # WHEN its file is read by Spark
    raw = read_files(engine.spark, store, engine.config.bronze, engine.config.tables[0], [parse_key(KEY, 1)])
    # THEN the one row comes back (the brackets were not read as a glob that matches nothing)
    assert [(r["id"], r["name"], r["note"]) for r in raw.collect()] == [("1", "a", "b")]


def test_carriage_returns_inside_quoted_values_are_kept(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN values holding "\r" and "\r\n" (text typed on Windows), quoted as DMS writes them
    path = tmp_path / "bronze" / KEY
    path.parent.mkdir(parents=True)
    path.write_bytes(f'I,{TS},1,"a\rb","c\r\nd"\nI,{TS},2,"\r",x\n'.encode())
    engine = make_engine(_config(","))
    table = engine.config.tables[0]
    # WHEN they are read
    changes, _ = read_and_count(engine, table, [parse_key(KEY, 1)], full_load=False)
    # THEN each value is exactly what was written (Spark's parser would have made both "\n")
    assert [(r["id"], r["name"], r["note"]) for r in changes.orderBy(ROW_POSITION).collect()] == [
        (1, "a\rb", "c\r\nd"),
        (2, "\r", "x"),
    ]
