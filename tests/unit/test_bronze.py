"""The DMS bronze layout as pure functions over keys: naming, apply order, unrecognised keys."""

from __future__ import annotations

import random

import pytest

from cdclake.dms.files import FileKind, UnrecognisedKey, classify, parse_key


def names(keys: list[str]) -> list[str]:
    """Keys in the order BronzeFile sorting puts them (input shuffled so order is never inherited)."""
    files = [parse_key(k) for k in keys]
    random.Random(7).shuffle(files)
    return [f.key for f in sorted(files)]


# --------------------------------------------------------------------------- parse_key


def test_full_load_file() -> None:
    # GIVEN / WHEN a full-load key is parsed
    file = parse_key("public/hosts/LOAD00000001.csv", 42)
    # THEN its table, kind, format and size are known
    assert (file.schema, file.table, file.kind, file.file_format, file.compressed, file.size) == (
        "public",
        "hosts",
        FileKind.FULL_LOAD,
        "csv",
        False,
        42,
    )


def test_cdc_file() -> None:
    # GIVEN / WHEN a CDC key is parsed
    file = parse_key("public/hosts/20240301-1200000000.csv")
    # THEN it is a CDC file of that table, named by its timestamp
    assert (file.source, file.kind, file.name) == ("public.hosts", FileKind.CDC, "20240301-1200000000.csv")


@pytest.mark.parametrize(
    ("name", "file_format", "compressed"),
    [
        ("LOAD00000001.csv", "csv", False),
        ("LOAD00000001.csv.gz", "csv", True),
        ("LOAD00000001.parquet", "parquet", False),
        ("20240301-1200000000.csv.gz", "csv", True),
        ("20240301-1200000000.parquet", "parquet", False),
    ],
)
def test_format_and_compression(name: str, file_format: str, compressed: bool) -> None:
    # GIVEN / WHEN a file name with a format and maybe .gz is parsed
    file = parse_key(f"s/t/{name}")
    # THEN the format and the compressed flag are read from the name
    assert (file.file_format, file.compressed) == (file_format, compressed)


@pytest.mark.parametrize("folders", ["2024/03/01", "20240301", "2024/03/01/12", "2024/03"])
def test_date_partition_folders(folders: str) -> None:
    # GIVEN a file under DMS date-partition folders
    file = parse_key(f"public/hosts/{folders}/20240301-1200000000.csv")
    # THEN it belongs to the table above the folders and keeps its full key
    assert (file.source, file.key) == ("public.hosts", f"public/hosts/{folders}/20240301-1200000000.csv")


@pytest.mark.parametrize("folder", ["2024_03_01", "2024-03-01", "2024030112"])
def test_date_partition_folders_with_other_dms_delimiters(folder: str) -> None:
    # GIVEN a folder written with another DatePartitionDelimiter / DatePartitionSequence
    file = parse_key(f"public/hosts/{folder}/20240301-1200000000.csv")
    # THEN the file is still recognised as a CDC file of the table
    assert (file.source, file.kind) == ("public.hosts", FileKind.CDC)


def test_key_is_normalised() -> None:
    # GIVEN a key with leading, trailing and doubled slashes
    file = parse_key("/public//hosts/LOAD00000001.csv")
    # THEN the stored key is the clean relative key
    assert file.key == "public/hosts/LOAD00000001.csv"


def test_lowercase_hex_counter() -> None:
    # GIVEN / WHEN a LOAD file with lower-case hex digits is parsed
    # THEN its counter is read as hexadecimal
    assert parse_key("s/t/LOAD0000000a.csv").sort_key[1] == 10


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("hosts/LOAD00000001.csv", "expected <schema>/<table>/<file>"),
        ("LOAD00000001.csv", "expected <schema>/<table>/<file>"),
        ("public/hosts/archive/LOAD00000001.csv", "folders between the table and the file must be date partitions"),
        ("public/hosts/LOAD1.csv", "not a DMS full-load (LOADxxxxxxxx) or CDC (timestamp) file name"),
        ("public/hosts/LOAD00000001.json", "not a DMS full-load (LOADxxxxxxxx) or CDC (timestamp) file name"),
        ("public/hosts/20240301-1200000000.txt", "not a DMS full-load (LOADxxxxxxxx) or CDC (timestamp) file name"),
        ("public/hosts/_SUCCESS", "not a DMS full-load (LOADxxxxxxxx) or CDC (timestamp) file name"),
    ],
)
def test_unrecognised_key_raises_with_reason(key: str, reason: str) -> None:
    # GIVEN / WHEN a key that is not a DMS data file is parsed
    # THEN UnrecognisedKey names the key and the reason
    with pytest.raises(UnrecognisedKey) as caught:
        parse_key(key)
    assert str(caught.value) == f"{key}: {reason}"


# --------------------------------------------------------------------------- ordering


def test_load_files_sort_by_hex_counter() -> None:
    # GIVEN full-load files whose text order differs from their counter order
    keys = ["s/t/LOAD00000010.csv", "s/t/LOAD0000000A.csv", "s/t/LOAD00000009.csv", "s/t/LOAD0000000b.csv"]
    # WHEN / THEN they are ordered by counter: 9, A (10), b (11), 10 (16)
    assert names(keys) == [
        "s/t/LOAD00000009.csv",
        "s/t/LOAD0000000A.csv",
        "s/t/LOAD0000000b.csv",
        "s/t/LOAD00000010.csv",
    ]


def test_cdc_files_sort_by_timestamp() -> None:
    # GIVEN CDC files of two days and two times
    keys = ["s/t/20240302-0000000000.csv", "s/t/20240301-1200000001.csv", "s/t/20240301-1200000000.csv"]
    # WHEN / THEN they are ordered by their timestamp names
    assert names(keys) == [
        "s/t/20240301-1200000000.csv",
        "s/t/20240301-1200000001.csv",
        "s/t/20240302-0000000000.csv",
    ]


def test_full_load_before_cdc() -> None:
    # GIVEN a CDC file and a later-numbered LOAD file
    keys = ["s/t/20000101-0000000000.csv", "s/t/LOAD000000FF.csv"]
    # WHEN / THEN the full load comes first, whatever the names say
    assert names(keys) == ["s/t/LOAD000000FF.csv", "s/t/20000101-0000000000.csv"]


def test_cdc_files_across_date_folders_sort_by_timestamp() -> None:
    # GIVEN CDC files in two date-partition layouts whose folder order disagrees with time
    keys = [
        "s/t/20240302/20240302-0100000000.csv",
        "s/t/2024/03/01/20240301-2300000000.csv",
        "s/t/2024/03/01/20240301-1200000000.csv",
    ]
    # WHEN / THEN their timestamps decide
    assert names(keys) == [
        "s/t/2024/03/01/20240301-1200000000.csv",
        "s/t/2024/03/01/20240301-2300000000.csv",
        "s/t/20240302/20240302-0100000000.csv",
    ]


def test_compressed_and_plain_sort_together() -> None:
    # GIVEN gzip and plain CDC files interleaved in time
    keys = ["s/t/20240301-1300000000.csv", "s/t/20240301-1200000000.csv.gz"]
    # WHEN / THEN compression does not affect the order
    assert names(keys) == ["s/t/20240301-1200000000.csv.gz", "s/t/20240301-1300000000.csv"]


# --------------------------------------------------------------------------- classify


LISTING = [
    ("public/hosts/20240301-1200000000.csv", 30),
    ("public/hosts/LOAD00000002.csv", 20),
    ("public/hosts/LOAD00000001.csv", 10),
    ("public/hosts/notes.txt", 5),
    ("sales/orders/LOAD00000001.parquet", 40),
    ("README", 1),
]


def test_classify_reports_unrecognised_keys_without_raising() -> None:
    # GIVEN a listing with two keys that are not DMS files
    # WHEN it is classified
    listing = classify(LISTING)
    # THEN each is reported with its reason
    assert listing.unrecognised == (
        "public/hosts/notes.txt: not a DMS full-load (LOADxxxxxxxx) or CDC (timestamp) file name",
        "README: expected <schema>/<table>/<file>",
    )


def test_classify_keeps_sizes_and_sorts() -> None:
    # GIVEN / WHEN a listing is classified
    listing = classify(LISTING)
    # THEN the DMS files come sorted (full load first), with their sizes
    assert [(f.key, f.size) for f in listing.files] == [
        ("public/hosts/LOAD00000001.csv", 10),
        ("sales/orders/LOAD00000001.parquet", 40),
        ("public/hosts/LOAD00000002.csv", 20),
        ("public/hosts/20240301-1200000000.csv", 30),
    ]


def test_listing_for_table_and_kind() -> None:
    # GIVEN a classified listing
    listing = classify(LISTING)
    # WHEN one table's full-load files are asked for
    files = listing.for_table("public", "hosts", FileKind.FULL_LOAD)
    # THEN only those come back, in counter order
    assert [f.name for f in files] == ["LOAD00000001.csv", "LOAD00000002.csv"]


def test_listing_sources() -> None:
    # GIVEN / WHEN a listing is classified / THEN its sources are the tables with DMS files
    assert classify(LISTING).sources() == {("public", "hosts"), ("sales", "orders")}


def test_a_parallel_loads_segment_files_are_full_load_files_in_segment_then_counter_order() -> None:
    # GIVEN the names a parallel load writes (LOAD_<segment>_<counter>) beside a plain load's
    names = ["LOAD_2_00000001.csv", "LOAD_1_00000002.csv", "LOAD_1_00000001.csv", "LOAD_10_00000001.csv.gz"]
    files = sorted(parse_key(f"s/t/{name}") for name in names)
    # THEN each is a full-load file, in segment order, then counter order
    assert all(f.kind is FileKind.FULL_LOAD for f in files)
    assert [f.name for f in files] == [
        "LOAD_1_00000001.csv",
        "LOAD_1_00000002.csv",
        "LOAD_2_00000001.csv",
        "LOAD_10_00000001.csv.gz",
    ]
    assert files[-1].compressed and sorted([parse_key("s/t/LOAD00000002.csv"), *files])[0].name == "LOAD00000002.csv"
