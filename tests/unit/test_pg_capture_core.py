"""The pure parts of PostgreSQL capture: pgoutput decoding, type mapping, value text, file names,
file headers across schema changes and the configuration edits that declare new column types."""

from __future__ import annotations

import struct
from datetime import datetime
from decimal import Decimal

import pytest

from cdclake.config import parse_config
from cdclake.sources.postgres.catalog import (
    SourceColumn,
    SourceTable,
    configuration_yaml,
    declare_columns,
    spark_type,
    value_text,
)
from cdclake.sources.postgres.change_stream import file_columns, render_records
from cdclake.sources.postgres.pgoutput import UNCHANGED_TOAST, Begin, RowChange, decode, format_lsn, parse_lsn
from cdclake.sources.postgres.state import TableFolder, change_sequence
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison
from cdclake.verify.rows import canonical, differing_columns, row_digest


def _tuple(*values: object) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED_TOAST:
            out += b"u"
        else:
            data = str(v).encode()
            out += b"t" + struct.pack("!i", len(data)) + data
    return out


def test_decode_update_with_old_key_and_unchanged_toast() -> None:
    payload = b"U" + struct.pack("!I", 42) + b"K" + _tuple("1", None) + b"N" + _tuple("2", UNCHANGED_TOAST)
    assert decode(payload) == RowChange("U", 42, new=("2", UNCHANGED_TOAST), old=("1", None), old_is_key=True)


def test_decode_begin_reads_commit_lsn_and_time() -> None:
    message = decode(b"B" + struct.pack("!Qqi", 0x1_0000_0010, 86_400_000_000, 7))
    assert isinstance(message, Begin) and message.final_lsn == 0x1_0000_0010 and message.xid == 7
    assert message.commit_ts.isoformat() == "2000-01-02T00:00:00+00:00"


def test_numeric_precision_comes_from_the_type_modifier() -> None:
    assert spark_type("numeric", ((12 << 16) | 2) + 4) == "decimal(12,2)"
    assert spark_type("numeric", -1) == "string"  # unconstrained: exact text, never rounded
    assert spark_type("numeric", ((40 << 16) | 2) + 4) == "string"
    assert spark_type("timestamptz", -1) == "timestamp" and spark_type("timestamp", -1) == "timestamp_ntz"


def test_values_become_text_spark_casts_correctly() -> None:
    assert value_text("timestamptz")("2024-01-01 01:30:00.5+05:30") == "2023-12-31 20:00:00.500000"
    # ±infinity: clamped to the ends of Spark's range (what psycopg2 reads them as, too)
    assert value_text("timestamptz")("infinity") == "9999-12-31 23:59:59.999999"
    assert value_text("timestamp")("-infinity") == "0001-01-01 00:00:00.000000"
    assert (value_text("date")("infinity"), value_text("date")("-infinity")) == ("9999-12-31", "0001-01-01")
    assert value_text("timestamp")("0044-03-15 12:00:00 BC") == "0044-03-15 12:00:00 BC"  # left for the engine
    # money (lc_monetary=C): the amount DMS's NUMERIC(38,4) holds
    assert value_text("money")("-$92,233,720,368,547,758.08") == "-92233720368547758.08"
    assert value_text("money")("$0.00") == "0.00"
    assert value_text("bool")("t") == "true"
    assert value_text("bytea")("\\x00ff") == "00ff"


def test_verify_canonical_forms_agree_across_sources() -> None:
    assert canonical(Decimal("1.5"), "decimal(10,2)") == canonical(Decimal("1.50"), "decimal(10,2)")
    assert canonical(1.1, "float") == canonical(struct.unpack("f", struct.pack("f", 1.1))[0], "float")
    assert canonical(memoryview(b"\x00\xff"), "string") == "00ff"
    # psycopg2 reads -infinity as datetime.min: year 1 with four digits, as Spark prints it
    assert canonical(datetime.min, "timestamp_ntz") == "0001-01-01 00:00:00.000000"
    assert canonical("$1.25", "decimal(38,4)") == "$1.25"  # not a number: compared as it is, no crash


def test_verify_names_the_differing_columns_and_sums_up_in_one_line() -> None:
    columns = ["id", "price", "note"]
    left, right = row_digest(["1", "2.00", "a"]), row_digest(["1", "3.00", "b"])
    assert differing_columns(columns, left, right) == ["price", "note"]
    results = [
        TableComparison("s.a", 1, 1),
        TableComparison("s.b", 2, 2, different=["id=1"], differing_columns={"id=1": ["price", "note"]}),
        TableComparison("s.c", problem="no such table at the source"),
    ]
    text = format_comparisons(results).splitlines()
    assert (
        "  content differs: id=1 (columns: price, note)" in text and "SKIPPED s.c: no such table at the source" in text
    )
    assert text[-1] == "verify: 1 table(s) equal, 1 differing, 1 skipped"


def test_file_names_increase_even_when_commit_time_goes_back(tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder = TableFolder(tmp_path)
    first = folder.next_name("2024-01-01 10:00:00.500000", 100)
    folder.last_stamp = first[: -len(".csv")][:-20]
    second = folder.next_name("2024-01-01 09:59:59.000000", 200)
    assert first < second and len(first) == len(second)
    assert change_sequence(100, 2) < change_sequence(101, 1) and len(change_sequence(1, 1)) == 30
    assert parse_lsn(format_lsn(0x1_0000_00AB)) == 0x1_0000_00AB


def test_a_file_of_two_layouts_has_their_union_and_null_where_a_record_lacks_a_column() -> None:
    before, after = ("id", "size", "note"), ("id", "note", "color")
    columns = file_columns([before, before, after])
    assert columns == ("id", "size", "note", "color")
    text = render_records(
        columns, [(before, ["U", "ts", "1", "S", "n", "seq1"]), (after, ["I", "ts", "2", "x", "red", "seq2"])]
    )
    assert text == "U,ts,1,S,n,,seq1\nI,ts,2,,x,red,seq2\n"


def _config() -> str:
    table = SourceTable(
        "public", "items", (SourceColumn("id", "int4", -1, "int"), SourceColumn("qty", "int4", -1, "int")), ("id",), "d"
    )
    return configuration_yaml([table], "bronze", "shop", "dms_commit_ts", "AR_H_CHANGE_SEQ")


def test_declaring_columns_edits_only_their_entries() -> None:
    text = _config().replace('qty: "int"', 'qty: "int"  # a comment stays')
    edited = declare_columns(text, "public.items", {"qty": "bigint", "color": "string", "id": "int"})
    assert edited is not None
    assert edited.replace('qty: "bigint"', 'qty: "int"').replace('\n      color: "string"', "") == text
    assert parse_config(edited).table("public.items").columns == {"id": "int", "qty": "bigint", "color": "string"}
    assert declare_columns(edited, "public.items", {"qty": "bigint"}) == edited  # idempotent
    assert declare_columns(text, "public.other", {"x": "int"}) is None


def test_declaring_columns_in_a_flow_mapping() -> None:
    text = "bronze: {csv_header: true}\ntables:\n  s.t:\n    primary_key: [id]\n    columns: {id: int, v: int}\n"
    edited = declare_columns(text, "s.t", {"v": "date", "w": "decimal(12,2)"})
    assert edited is not None
    assert parse_config(edited).table("s.t").columns == {"id": "int", "v": "date", "w": "decimal(12,2)"}


@pytest.mark.parametrize(
    ("pg_type", "type_modifier", "kind", "element_length", "large"),
    [
        ("numeric", (12 << 16 | 2) + 4, "b", 0, False),  # numeric(12,2): a few bytes
        ("numeric", (1000 << 16) + 4, "b", 0, False),  # numeric(1000): ~500 bytes, under ~2 kB
        ("numeric", -1, "b", 0, True),  # unconstrained: up to 131072 digits
        ("varchar", 100 + 4, "b", 0, False),  # at most 400 bytes in UTF-8
        ("varchar", 600 + 4, "b", 0, True),  # up to 2400 bytes
        ("varchar", -1, "b", 0, True),
        ("bpchar", 3 + 4, "b", 0, False),
        ("inet", -1, "b", 0, False),
        ("daterange", -1, "r", 4, False),
        ("numrange", -1, "r", -1, True),
        ("text", -1, "b", 0, True),
        ("jsonb", -1, "b", 0, True),
        ("_int4", -1, "b", 0, True),  # an array
    ],
)
def test_only_columns_whose_values_can_exceed_toasts_threshold_are_warned_about(
    pg_type: str, type_modifier: int, kind: str, element_length: int, large: bool
) -> None:
    from cdclake.sources.postgres.catalog import can_be_toasted

    assert can_be_toasted(pg_type, type_modifier, kind, element_length) is large


def test_a_keyless_row_is_named_by_its_values_and_a_digest_the_same_in_every_run() -> None:
    from cdclake.verify.rows import row_name

    # GIVEN two keyless rows that differ only past what their name shows, and one with a NULL
    long_a, long_b = "x" * 40 + "a", "x" * 40 + "b"
    first = row_name(["id", "note"], ["7", long_a])
    second = row_name(["id", "note"], ["7", long_b])
    # THEN the name shows the values (each cut to 24 characters) and an MD5 of them whole
    assert first.startswith("row (id=7, note=" + "x" * 23 + "…) md5:") and len(first.split("md5:")[1]) == 12
    assert first != second  # the digest tells them apart
    assert row_name(["id", "note"], ["7", "\x00NULL"]).startswith("row (id=7, note=NULL) md5:")
    # AND the digest does not depend on the process (Python's own string hash does): a fixed value
    assert row_name(["a"], ["1"]) == "row (a=1) md5:" + __import__("hashlib").md5(b"1:1").hexdigest()[:12]
    # AND a row of many columns is cut to 160 characters of values
    wide = row_name([f"c{i}" for i in range(40)], ["v" * 10] * 40)
    assert len(wide.split(") md5:")[0]) == len("row (") + 160
