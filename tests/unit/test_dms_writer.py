"""The DMS file writer (CSV dialect, names, change sequences) and the plain-Python replay oracle."""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import pytest

from cdclake.dms.files import parse_key
from cdclake.dms.writer import (
    SourceChange,
    cdc_file_name,
    cdc_records,
    change_sequence,
    csv_field,
    csv_text,
    load_file_name,
    write_csv,
)
from oracle import replay_change_log

# --------------------------------------------------------------------------- csv_field


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("plain", "plain"),
        (" padded ", " padded "),
        (None, ""),
        ("", '""'),
        ("a,b", '"a,b"'),
        ('say "hi"', '"say ""hi"""'),
        ("two\nlines", '"two\nlines"'),
        ("carriage\rreturn", '"carriage\rreturn"'),
    ],
)
def test_csv_field_default_dialect(value: str | None, written: str) -> None:
    # GIVEN / WHEN a value is written with the default delimiter and null marker
    # THEN NULL is the empty unquoted field and anything ambiguous is quoted
    assert csv_field(value) == written


def test_csv_field_null_marker() -> None:
    # GIVEN a NULL marker of NULL
    # WHEN / THEN None is written as the bare marker
    assert csv_field(None, null_value="NULL") == "NULL"


def test_csv_field_value_equal_to_null_marker_is_quoted() -> None:
    # GIVEN a text value equal to the NULL marker
    # WHEN / THEN it is quoted so it is not read back as NULL
    assert csv_field("NULL", null_value="NULL") == '"NULL"'


def test_csv_field_other_delimiter() -> None:
    # GIVEN a semicolon delimiter
    # WHEN / THEN values holding it are quoted and commas are not
    assert (csv_field("a;b", ";"), csv_field("a,b", ";")) == ('"a;b"', "a,b")


# --------------------------------------------------------------------------- csv_text / write_csv

RECORDS = [
    ["I", "1", "plain", None],
    ["U", "2", "", "a,b"],
    ["D", "3", 'say "hi"', "two\nlines"],
]


def test_csv_text_raw_null_and_empty() -> None:
    # GIVEN a record with NULL and an empty string
    # WHEN / THEN NULL is an empty field and "" is a quoted empty field
    assert csv_text([["1", None, ""]]) == '1,,""\n'


def test_csv_text_round_trips_through_python_csv() -> None:
    # GIVEN records with quotes, delimiters and newlines
    text = csv_text(RECORDS)
    # WHEN Python's csv module reads the text back
    rows = list(csv.reader(io.StringIO(text, newline="")))
    # THEN the values come back (None reads as "": csv cannot tell them apart)
    assert rows == [["" if v is None else v for v in r] for r in RECORDS]


def test_csv_text_round_trips_with_other_delimiter_and_null_marker() -> None:
    # GIVEN a semicolon delimiter and a NULL marker
    text = csv_text([["a;b", None, "NULL", "x,y"]], delimiter=";", null_value="NULL")
    # WHEN Python's csv module reads it back
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=";"))
    # THEN the bare marker is NULL and the quoted one is text (quoting is only visible in the raw text)
    assert (text, rows) == ('"a;b";NULL;"NULL";x,y\n', [["a;b", "NULL", "NULL", "x,y"]])


def test_write_csv_with_header(tmp_path: Path) -> None:
    # GIVEN a header and records
    path = write_csv(tmp_path / "s" / "t" / "LOAD00000001.csv", [["1", None]], header=["id", "name"])
    # WHEN / THEN the parent folders are created and the file holds header then rows
    assert path.read_text(encoding="utf-8") == "id,name\n1,\n"


def test_write_csv_gzip(tmp_path: Path) -> None:
    # GIVEN records written compressed
    path = write_csv(tmp_path / "LOAD00000001.csv.gz", RECORDS, compress=True)
    # WHEN the file is decompressed / THEN it is the same text as uncompressed
    assert gzip.decompress(path.read_bytes()).decode("utf-8") == csv_text(RECORDS)


def test_write_csv_utf8(tmp_path: Path) -> None:
    # GIVEN a non-ASCII value
    path = write_csv(tmp_path / "f.csv", [["ünïcødé"]])
    # WHEN / THEN it is written as UTF-8
    assert path.read_bytes() == "ünïcødé\n".encode()


# --------------------------------------------------------------------------- names and sequences


@pytest.mark.parametrize(
    ("counter", "name"),
    [(1, "LOAD00000001.csv"), (9, "LOAD00000009.csv"), (10, "LOAD0000000A.csv"), (16, "LOAD00000010.csv")],
)
def test_load_file_name_is_hex(counter: int, name: str) -> None:
    # GIVEN / WHEN a full-load counter is named / THEN it is 8 upper-case hex digits
    assert load_file_name(counter) == name


def test_load_file_name_extension() -> None:
    # GIVEN / WHEN a Parquet full-load file is named / THEN the extension follows
    assert load_file_name(255, "parquet.gz") == "LOAD000000FF.parquet.gz"


def test_cdc_file_name() -> None:
    # GIVEN a commit timestamp with microseconds
    # WHEN / THEN the name is yyyyMMdd-HHmmss plus four fraction digits
    assert cdc_file_name("2024-03-01 12:34:56.789012") == "20240301-1234567890.csv"


def test_cdc_file_name_pads_missing_fraction() -> None:
    # GIVEN a commit timestamp without fraction
    # WHEN / THEN the time part is padded to ten digits
    assert cdc_file_name("2024-03-01 12:34:56", "csv.gz") == "20240301-1234560000.csv.gz"


def test_written_names_are_recognised_as_dms_files() -> None:
    # GIVEN names made by the writer
    load = parse_key(f"s/t/{load_file_name(10)}")
    cdc = parse_key(f"s/t/{cdc_file_name('2024-03-01 12:34:56.789012')}")
    # WHEN / THEN the bronze parser reads them as a full-load and a CDC file in that order
    assert (load.kind.value, cdc.kind.value, load < cdc) == ("full-load", "cdc", True)


def test_change_sequence_width_and_value() -> None:
    # GIVEN / WHEN a change sequence is made
    seq = change_sequence("2024-03-01 12:00:00.123456", 7)
    # THEN it is 20 time digits and a 15-digit counter, 35 characters in all
    assert (seq, len(seq)) == ("20240301120000123456000000000000007", 35)


def test_change_sequence_pads_short_timestamps() -> None:
    # GIVEN a timestamp without fraction
    # WHEN / THEN the time digits are padded on the right to 20
    assert change_sequence("2024-03-01 12:00:00", 1) == "20240301120000000000000000000000001"


def test_change_sequence_orders_by_counter_within_a_commit() -> None:
    # GIVEN counters 9 and 10 in one commit
    # WHEN / THEN text order is counter order (fixed width)
    assert change_sequence("2024-03-01 12:00:00", 9) < change_sequence("2024-03-01 12:00:00", 10)


def test_change_sequence_orders_by_commit_time_first() -> None:
    # GIVEN a later commit with a smaller counter
    earlier = change_sequence("2024-03-01 12:00:00.000001", 999)
    later = change_sequence("2024-03-01 12:00:00.000002", 1)
    # WHEN / THEN the later commit sorts after
    assert earlier < later


# --------------------------------------------------------------------------- cdc_records


def test_cdc_records_dms_column_order() -> None:
    # GIVEN one change
    change = SourceChange("U", {"id": "1", "name": None}, "2024-03-01 12:00:00", "seq1")
    # WHEN it becomes a headerless CDC record / THEN it is Op, timestamp, columns, sequence
    assert cdc_records([change], ["id", "name"]) == [["U", "2024-03-01 12:00:00", "1", None, "seq1"]]


def test_cdc_records_without_timestamp_and_sequence() -> None:
    # GIVEN one change and neither optional column
    change = SourceChange("D", {"id": "1"}, "2024-03-01 12:00:00", "seq1")
    # WHEN / THEN only Op and the columns remain; missing columns are NULL
    assert cdc_records([change], ["id", "name"], with_timestamp=False, with_seq=False) == [["D", "1", None]]


# --------------------------------------------------------------------------- replay


def change(op: str, ident: str, name: str | None, ts: str, counter: int = 1) -> SourceChange:
    return SourceChange(op, {"id": ident, "name": name}, ts, change_sequence(ts, counter))


T1, T2, T3 = "2024-03-01 12:00:01", "2024-03-01 12:00:02", "2024-03-01 12:00:03"


def test_replay_insert() -> None:
    # GIVEN / WHEN an insert is replayed on an empty table / THEN the row is there
    assert replay_change_log([], [change("I", "1", "a", T1)], ["id"]) == {("1",): {"id": "1", "name": "a"}}


def test_replay_update_replaces_the_row() -> None:
    # GIVEN an existing row
    initial = [{"id": "1", "name": "a"}]
    # WHEN an update is replayed / THEN the row holds the new values
    assert replay_change_log(initial, [change("U", "1", "b", T1)], ["id"]) == {("1",): {"id": "1", "name": "b"}}


def test_replay_delete_removes_the_row() -> None:
    # GIVEN two existing rows
    initial = [{"id": "1", "name": "a"}, {"id": "2", "name": "b"}]
    # WHEN one is deleted / THEN only the other remains
    assert replay_change_log(initial, [change("D", "1", "a", T1)], ["id"]) == {("2",): {"id": "2", "name": "b"}}


def test_replay_delete_of_missing_row_is_ignored() -> None:
    # GIVEN / WHEN a delete of an unknown key is replayed / THEN the table stays empty
    assert replay_change_log([], [change("D", "9", None, T1)], ["id"]) == {}


def test_replay_reinsert_after_delete() -> None:
    # GIVEN a row deleted then inserted again with new values (input not in commit order)
    changes = [change("I", "1", "again", T3), change("D", "1", "a", T2), change("I", "1", "a", T1)]
    # WHEN / THEN the re-inserted row is there
    assert replay_change_log([], changes, ["id"]) == {("1",): {"id": "1", "name": "again"}}


def test_replay_ties_on_commit_time_decided_by_sequence() -> None:
    # GIVEN two updates in one commit, listed with the later sequence first
    changes = [change("U", "1", "second", T1, counter=2), change("U", "1", "first", T1, counter=1)]
    # WHEN / THEN the higher sequence wins
    assert replay_change_log([{"id": "1", "name": "a"}], changes, ["id"]) == {("1",): {"id": "1", "name": "second"}}


def test_replay_composite_key() -> None:
    # GIVEN rows keyed on (id, region) that share an id
    initial = [{"id": "1", "region": "eu", "v": "a"}, {"id": "1", "region": "us", "v": "b"}]
    changes = [SourceChange("D", {"id": "1", "region": "us", "v": "b"}, T1, change_sequence(T1, 1))]
    # WHEN one is deleted / THEN the other is kept
    assert replay_change_log(initial, changes, ["id", "region"]) == {("1", "eu"): {"id": "1", "region": "eu", "v": "a"}}
