"""Awkward bronze keys and listings: more than 1,000 keys per table and per date folder, keys with
spaces, non-ASCII and glob characters, 0-byte objects, and local folders that cannot be listed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from cdclake.dms.files import FileKind, parse_key, spark_path
from cdclake.dms.s3_bronze import S3Bronze
from cdclake.dms.store import LocalBronze, list_bronze
from cdclake.errors import BronzeError

from .conftest import BUCKET

ODD_TABLE = "my schema/tâble ✓ a+b%20 [old]"  # a space, non-ASCII, '+', a literal "%20", glob characters


def put(client: Any, key: str, body: bytes) -> None:
    client.put_object(Bucket=BUCKET, Key=f"dms/{key}", Body=body)


def count_list_calls(client: Any) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    client.meta.events.register("before-call.s3.ListObjectsV2", lambda **kw: calls.append(kw))
    return calls


# --------------------------------------------------------------------------- more than 1,000 keys


def test_a_table_folder_with_more_than_1000_keys_is_listed_in_pages(s3_client: Any) -> None:
    # GIVEN 1,001 CDC files of one table, and another table beside it
    for i in range(1001):
        put(s3_client, f"s/t/20240301-{i:010d}.csv", b"x")
    put(s3_client, "s/other/20240301-0000000001.csv", b"x")
    calls = count_list_calls(s3_client)
    # WHEN only that table's folder is listed and classified
    listing = list_bronze(S3Bronze(s3_client, BUCKET, "dms"), "s/t")
    # THEN every file of the table comes back, in order, from two ListObjectsV2 pages
    names = [f.name for f in listing.for_table("s", "t", FileKind.CDC)]
    assert (len(names), names[0], names[-1], listing.sources(), len(calls)) == (
        1001,
        "20240301-0000000000.csv",
        "20240301-0000001000.csv",
        {("s", "t")},
        2,
    )


def test_a_date_folder_with_more_than_1000_keys_is_listed_in_pages(s3_client: Any) -> None:
    # GIVEN 1,001 CDC files in one date folder and one in the next day's folder
    for i in range(1001):
        put(s3_client, f"s/t/2024/03/01/20240301-{i:010d}.csv", b"x")
    put(s3_client, "s/t/2024/03/02/20240302-0000000000.csv", b"x")
    calls = count_list_calls(s3_client)
    store = S3Bronze(s3_client, BUCKET, "dms")
    # WHEN the date folder alone, then the table, is listed
    day = list(store.list_keys("s/t/2024/03/01"))
    table = list_bronze(store, "s/t")
    # THEN the folder holds its 1,001 keys (two pages) and the table all 1,002 files (two more pages)
    assert (len(day), len(table.files), table.unrecognised, len(calls)) == (1001, 1002, (), 4)


# --------------------------------------------------------------------------- spaces, non-ASCII, glob characters


def test_odd_keys_round_trip_through_listing_size_head_and_staging(s3_client: Any, tmp_path: Path) -> None:
    # GIVEN a LOAD file under a table folder with a space, non-ASCII, '+', '%20' and brackets
    key = f"{ODD_TABLE}/LOAD00000001.csv"
    put(s3_client, key, b"1,a\n")
    store = S3Bronze(s3_client, BUCKET, "dms", staging_dir=tmp_path / "staging")
    # WHEN it is listed, sized, its head read and it is staged
    listing = list_bronze(store)
    file = listing.files[0]
    path = store.spark_paths([file])[file.key]
    # THEN the key comes back exactly (S3 answers URL-encoded keys; botocore decodes them)
    assert (file.key, file.schema, file.table, file.size) == (key, "my schema", "tâble ✓ a+b%20 [old]", 4)
    assert (store.size(file.key), store.read_head(file.key, 10)) == (4, b"1,a\n")
    # AND the staged copy sits at the key, its path handed to Spark with the glob characters escaped
    staged = (tmp_path / "staging" / key).resolve()
    assert (path, staged.read_bytes()) == (spark_path(str(staged)), b"1,a\n")
    assert path.endswith("/tâble ✓ a+b%20 \\[old\\]/LOAD00000001.csv")


def test_spark_paths_without_staging_keep_the_key_unquoted(s3_client: Any) -> None:
    # GIVEN / WHEN Glue (no staging) gets the path of an odd key
    file = parse_key(f"{ODD_TABLE}/LOAD00000001.csv", 4)
    path = S3Bronze(s3_client, BUCKET, "dms").spark_paths([file])[file.key]
    # THEN it is the s3:// URI as the key is spelled, only glob characters escaped (no percent-encoding)
    assert path == f"s3://{BUCKET}/dms/my schema/tâble ✓ a+b%20 \\[old\\]/LOAD00000001.csv"


def test_spark_path_escapes_every_glob_character() -> None:
    # GIVEN / WHEN a path with each Hadoop glob character is made literal / THEN each one is escaped
    assert spark_path("/b/{a,b}/[x]*?\\.csv") == "/b/\\{a,b\\}/\\[x\\]\\*\\?\\\\.csv"


def test_local_odd_keys_round_trip(tmp_path: Path) -> None:
    # GIVEN a local bronze file under the same odd folder
    path = tmp_path / ODD_TABLE / "LOAD00000001.csv"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"1,a\n")
    store = LocalBronze(tmp_path)
    # WHEN it is listed and its Spark path asked for
    (file,) = list_bronze(store).files
    # THEN the key is exact and the path escapes the brackets
    assert (file.key, store.spark_paths([file])[file.key]) == (
        f"{ODD_TABLE}/LOAD00000001.csv",
        spark_path(str(path.resolve())),
    )


# --------------------------------------------------------------------------- 0-byte objects


def test_an_empty_object_is_size_0_everywhere(s3_client: Any, tmp_path: Path) -> None:
    # GIVEN a 0-byte CDC object (the engine holds such files in quarantine as "empty file")
    put(s3_client, "s/t/20240301-0000000001.csv", b"")
    store = S3Bronze(s3_client, BUCKET, "dms", staging_dir=tmp_path / "staging")
    # WHEN it is listed, sized, its head read and it is staged
    (file,) = list_bronze(store).files
    path = store.spark_paths([file])[file.key]
    # THEN it is 0 bytes each time and nothing fails
    assert (file.size, store.size(file.key), store.read_head(file.key, 1 << 16), Path(path).read_bytes()) == (
        0,
        0,
        b"",
        b"",
    )


def test_a_local_empty_file_is_size_0(tmp_path: Path) -> None:
    # GIVEN / WHEN an empty local file is listed / THEN its size is 0
    (tmp_path / "s/t").mkdir(parents=True)
    (tmp_path / "s/t/LOAD00000001.csv").write_bytes(b"")
    assert [(f.key, f.size) for f in list_bronze(LocalBronze(tmp_path)).files] == [("s/t/LOAD00000001.csv", 0)]


# --------------------------------------------------------------------------- local faults are errors, not gaps


def test_a_local_file_that_vanishes_while_listed_is_an_error(tmp_path: Path) -> None:
    # GIVEN a table folder holding a dangling link (a file removed between the walk and its stat)
    (tmp_path / "s/t").mkdir(parents=True)
    (tmp_path / "s/t/LOAD00000001.csv").symlink_to(tmp_path / "gone.csv")
    # WHEN it is listed / THEN BronzeError names the file instead of skipping it or a raw OSError
    with pytest.raises(BronzeError, match=re.escape(f"{tmp_path / 's/t/LOAD00000001.csv'} cannot be read")):
        list(LocalBronze(tmp_path).list_keys())


def test_a_local_folder_that_cannot_be_listed_is_an_error(tmp_path: Path) -> None:
    # GIVEN a "table folder" that is a file
    (tmp_path / "s").mkdir()
    (tmp_path / "s/t").write_bytes(b"")
    # WHEN it is listed / THEN BronzeError names it (os.walk alone would yield nothing)
    with pytest.raises(BronzeError, match=re.escape(f"The bronze folder {tmp_path / 's/t'} cannot be listed")):
        list(LocalBronze(tmp_path).list_keys("s/t"))


def test_a_local_table_folder_that_does_not_exist_holds_no_keys(tmp_path: Path) -> None:
    # GIVEN / WHEN a table that has no folder yet is listed / THEN it holds no keys
    assert list(LocalBronze(tmp_path).list_keys("s/none")) == []
