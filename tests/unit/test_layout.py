"""Which columns a DMS file holds: headerless column order, header parsing, per-file layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.config import BronzeSettings, TableConfig, load_config
from cdclake.dms.files import FileKind, parse_key
from cdclake.dms.layout import FileLayout, headerless_columns, lacks_change_sequence, layout_for, parse_header
from cdclake.dms.reader import plan_scans
from cdclake.dms.store import LocalBronze, list_bronze
from cdclake.errors import BadInputError, CdclakeError

TABLE = TableConfig(source_schema="s", source_table="t", target="t", columns={"id": "int", "name": "string"})
TS_AND_SEQ = BronzeSettings(timestamp_column="ts", change_sequence_column="seq")


# --------------------------------------------------------------------------- headerless_columns


def test_hosts_example_cdc_columns(hosts_yaml: Path) -> None:
    # GIVEN the shipped example (timestamp column and change sequence column configured)
    config = load_config(hosts_yaml)
    # WHEN the columns of a headerless CDC file are derived
    columns = headerless_columns(config.bronze, config.tables[0], FileKind.CDC)
    # THEN Op, the timestamp, the declared columns and the change sequence come in DMS's order
    assert columns == (
        "Op",
        "last_updated_ts",
        "id",
        "url",
        "name",
        "since",
        "location",
        "response_time",
        "response_rate",
        "AR_H_CHANGE_SEQ",
    )


def test_full_load_has_no_op_column() -> None:
    # GIVEN default settings (IncludeOpForFullLoad off)
    # WHEN / THEN a full-load file starts with the timestamp column, not Op
    assert headerless_columns(TS_AND_SEQ, TABLE, FileKind.FULL_LOAD) == ("ts", "id", "name", "seq")


def test_full_load_with_include_op_for_full_load() -> None:
    # GIVEN IncludeOpForFullLoad
    settings = BronzeSettings(include_op_for_full_load=True, timestamp_column="ts")
    # WHEN / THEN full-load files start with Op too
    assert headerless_columns(settings, TABLE, FileKind.FULL_LOAD) == ("Op", "ts", "id", "name")


def test_plain_settings_cdc_columns() -> None:
    # GIVEN no timestamp nor change-sequence column
    # WHEN / THEN a CDC file is Op then the declared columns
    assert headerless_columns(BronzeSettings(), TABLE, FileKind.CDC) == ("Op", "id", "name")


def test_declared_change_sequence_column_keeps_its_place() -> None:
    # GIVEN a table that declares the change sequence column itself, before another column
    table = TableConfig("s", "t", "t", columns={"id": "int", "seq": "string", "name": "string"})
    # WHEN / THEN it is not appended a second time
    assert headerless_columns(TS_AND_SEQ, table, FileKind.CDC) == ("Op", "ts", "id", "seq", "name")


def test_declared_timestamp_column_is_not_repeated() -> None:
    # GIVEN a table that declares the timestamp column among its columns
    table = TableConfig("s", "t", "t", columns={"ts": "timestamp", "id": "int"})
    # WHEN / THEN it appears once, where it is declared
    assert headerless_columns(BronzeSettings(timestamp_column="ts"), table, FileKind.CDC) == ("Op", "ts", "id")


# --------------------------------------------------------------------------- parse_header


def test_header_with_quoted_names() -> None:
    # GIVEN a header whose names are quoted, one holding the delimiter and one a doubled quote
    head = b'Op,"id","last, first","say ""hi"""\nI,1,x,y\n'
    # WHEN / THEN the names are unquoted
    assert parse_header(head, ",", "k") == ("Op", "id", "last, first", 'say "hi"')


def test_header_with_other_delimiter() -> None:
    # GIVEN a semicolon-delimited header
    # WHEN / THEN it is split on the configured delimiter
    assert parse_header(b"Op;id;name\nI;1;a\n", ";", "k") == ("Op", "id", "name")


def test_header_only_file_without_newline() -> None:
    # GIVEN a file that is nothing but an unterminated header
    # WHEN / THEN the header is still read
    assert parse_header(b"id,name", ",", "k") == ("id", "name")


def test_empty_file() -> None:
    # GIVEN an empty file
    # WHEN / THEN BadInputError names it and asks for a header
    with pytest.raises(BadInputError, match=r"^s/t/LOAD00000001\.csv is empty: a CSV file with AddColumnName"):
        parse_header(b"", ",", "s/t/LOAD00000001.csv")


@pytest.mark.parametrize("head", [b"id,,name\n", b'id,""\n', b"\n1,2\n"])
def test_empty_column_name(head: bytes) -> None:
    # GIVEN a header with an empty name (or a blank first line)
    # WHEN / THEN BadInputError names the file
    with pytest.raises(BadInputError, match=r"^k has an empty column name in its header row\.$"):
        parse_header(head, ",", "k")


def test_multibyte_character_cut_at_end_of_head() -> None:
    # GIVEN a head that ends in the middle of a two-byte character on the second line
    head = "id,nàme\n1,é".encode()[:-1]
    # WHEN / THEN the complete first line is still read
    assert parse_header(head, ",", "k") == ("id", "nàme")


def test_multibyte_header_name() -> None:
    # GIVEN a header with non-ASCII names
    # WHEN / THEN they are decoded as UTF-8
    assert parse_header("número,größe\n".encode(), ",", "k") == ("número", "größe")


def test_multibyte_character_cut_in_first_line() -> None:
    # GIVEN a head cut inside a two-byte character of the header line itself (no newline yet)
    head = "id,nà".encode()[:-1]
    # WHEN / THEN the user gets a BadInputError naming the file, not a Python decoding error
    with pytest.raises(BadInputError, match=r"^k "):
        parse_header(head, ",", "k")


def test_header_not_utf8() -> None:
    # GIVEN a Latin-1 header
    head = "id,prénom\n1,x\n".encode("latin-1")
    # WHEN / THEN the error is one the command line reports (a CdclakeError naming the file)
    with pytest.raises(CdclakeError, match=r"^k "):
        parse_header(head, ",", "k")


# --------------------------------------------------------------------------- layout_for


def test_layout_for_parquet() -> None:
    # GIVEN a Parquet file
    file = parse_key("s/t/LOAD00000001.parquet")
    # WHEN / THEN the file describes its own columns
    assert layout_for(BronzeSettings(format="parquet"), TABLE, file, None) == FileLayout(
        "parquet", None, has_header=False
    )


def test_layout_for_headerless_cdc_csv() -> None:
    # GIVEN a headerless CDC CSV file
    file = parse_key("s/t/20240301-1200000000.csv")
    # WHEN / THEN the columns come from the configuration, Op first
    assert layout_for(TS_AND_SEQ, TABLE, file, None) == FileLayout(
        "csv", ("Op", "ts", "id", "name", "seq"), has_header=False
    )


def test_layout_for_headerless_full_load_csv() -> None:
    # GIVEN a headerless full-load CSV file without IncludeOpForFullLoad
    file = parse_key("s/t/LOAD00000001.csv")
    # WHEN / THEN there is no Op column
    assert layout_for(BronzeSettings(), TABLE, file, None) == FileLayout("csv", ("id", "name"), has_header=False)


def test_layout_for_csv_with_header() -> None:
    # GIVEN a CSV file with a parsed header holding Op
    file = parse_key("s/t/20240301-1200000000.csv")
    header = ("Op", "id", "name")
    # WHEN / THEN the header is the column list
    assert layout_for(BronzeSettings(csv_header=True), TABLE, file, header) == FileLayout(
        "csv", header, has_header=True
    )


def test_layout_for_csv_with_header_without_op() -> None:
    # GIVEN a full-load CSV file whose header has no Op
    file = parse_key("s/t/LOAD00000001.csv")
    # WHEN / THEN the columns are the header's, with no Op
    assert layout_for(BronzeSettings(csv_header=True), TABLE, file, ("id", "name")).columns == ("id", "name")


def test_layout_for_csv_with_header_needs_the_header() -> None:
    # GIVEN headered CSV settings but no parsed header
    file = parse_key("s/t/LOAD00000001.csv")
    # WHEN / THEN it is a programming error
    with pytest.raises(ValueError, match="needs its header parsed first"):
        layout_for(BronzeSettings(csv_header=True), TABLE, file, None)


# --------------------------------------------------------------------------- a task without the change-sequence rule


def test_a_header_without_the_configured_change_sequence_is_found() -> None:
    # GIVEN headers as DMS writes them with and without the task's AR_H_CHANGE_SEQ mapping rule
    with_rule = ("Op", "ts", "id", "name", "SEQ")  # names compare case-insensitively, as Spark resolves them
    without_rule = ("Op", "ts", "id", "name")
    # THEN only the one without it lacks the change sequence, and nothing lacks one none is configured
    assert not lacks_change_sequence(TS_AND_SEQ, with_rule)
    assert lacks_change_sequence(TS_AND_SEQ, without_rule)
    assert not lacks_change_sequence(BronzeSettings(timestamp_column="ts"), without_rule)


def test_cdc_files_without_the_change_sequence_are_said_once_a_table_and_still_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN two CDC files whose header rows lack the configured change-sequence column, and a LOAD file
    settings = BronzeSettings(timestamp_column="ts", change_sequence_column="AR_H_CHANGE_SEQ", csv_header=True)
    folder = tmp_path / "s" / "t"
    folder.mkdir(parents=True)
    (folder / "LOAD00000001.csv").write_text("ts,id,name\n2024-01-01 00:00:00,1,a\n")
    for name in ("20240102-000000000.csv", "20240103-000000000.csv"):
        (folder / name).write_text("Op,ts,id,name\nU,2024-01-02 00:00:00,1,b\n")
    store = LocalBronze(tmp_path)
    files = sorted(f for f in list_bronze(store, "s/t").files)
    # WHEN their scans are planned
    groups = plan_scans(store, settings, TABLE, files)
    # THEN every file is read, and one warning names the table, the count, the setting and the fix
    assert sum(len(members) for members in groups.values()) == 3
    [warning] = [r.getMessage() for r in caplog.records if "change sequence missing" in r.getMessage()]
    assert warning.startswith("change sequence missing table=s.t files=2 first=s/t/20240102-000000000.csv:")
    assert "AR_H_CHANGE_SEQ mapping rule" in warning
    # AND the next batch of the table in this process (a follow loop's next round) does not say it again
    caplog.clear()
    (folder / "20240104-000000000.csv").write_text("Op,ts,id,name\nU,2024-01-04 00:00:00,1,c\n")
    plan_scans(store, settings, TABLE, sorted(f for f in list_bronze(store, "s/t").files if f.kind is FileKind.CDC))
    assert not [r for r in caplog.records if "change sequence missing" in r.getMessage()]
