"""Bronze storage: a local directory and an S3 prefix (moto), plus reading file heads through gzip."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path
from typing import Any

import pytest

from cdclake.dms.files import parse_key
from cdclake.dms.s3_bronze import S3Bronze
from cdclake.dms.store import LocalBronze, head_text, list_bronze, open_store
from cdclake.errors import BronzeError

from .conftest import BUCKET

HEADER = b"Op,id,name\n"
BODY = HEADER + b"".join(b"I,%d,name number %d\n" % (i, i) for i in range(3000))


def put(client: Any, key: str, body: bytes) -> None:
    client.put_object(Bucket=BUCKET, Key=key, Body=body)


@pytest.fixture
def bronze(tmp_path: Path) -> LocalBronze:
    """A local bronze root with one full-load file, one CDC file in a date folder and a stray file."""
    root = tmp_path / "bronze"
    for key, data in {
        "public/hosts/LOAD00000001.csv": b"1,a\n",
        "public/hosts/2024/03/01/20240301-1200000000.csv": b"I,2,b\n",
        "sales/orders/notes.txt": b"hi",
    }.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return LocalBronze(root)


# --------------------------------------------------------------------------- LocalBronze


def test_local_list_keys(bronze: LocalBronze) -> None:
    # GIVEN / WHEN a local bronze root is listed
    # THEN every file comes back as a relative key with its size
    assert sorted(bronze.list_keys()) == [
        ("public/hosts/2024/03/01/20240301-1200000000.csv", 6),
        ("public/hosts/LOAD00000001.csv", 4),
        ("sales/orders/notes.txt", 2),
    ]


def test_local_list_keys_under(bronze: LocalBronze) -> None:
    # GIVEN / WHEN only one table's folder is listed
    # THEN only its keys come back, still relative to the root
    assert sorted(k for k, _ in bronze.list_keys("sales/orders")) == ["sales/orders/notes.txt"]


def test_local_missing_directory(tmp_path: Path) -> None:
    # GIVEN a bronze root that does not exist
    store = LocalBronze(tmp_path / "nope")
    # WHEN it is listed / THEN BronzeError names it
    with pytest.raises(BronzeError, match=re.escape(f"The bronze directory {tmp_path / 'nope'} does not exist.")):
        list(store.list_keys())


def test_list_bronze_classifies(bronze: LocalBronze) -> None:
    # GIVEN / WHEN a local root is listed and classified
    listing = list_bronze(bronze)
    # THEN DMS files are sorted and the stray file is reported
    assert ([f.key for f in listing.files], listing.unrecognised) == (
        ["public/hosts/LOAD00000001.csv", "public/hosts/2024/03/01/20240301-1200000000.csv"],
        ("sales/orders/notes.txt: not a DMS full-load (LOADxxxxxxxx) or CDC (timestamp) file name",),
    )


def test_local_read_head(bronze: LocalBronze) -> None:
    # GIVEN / WHEN the first 3 bytes of a file are read / THEN only those come back
    assert bronze.read_head("public/hosts/LOAD00000001.csv", 3) == b"1,a"


def test_local_read_head_missing_file(bronze: LocalBronze) -> None:
    # GIVEN / WHEN a missing file's head is read / THEN BronzeError names the file
    with pytest.raises(BronzeError, match=r"public/hosts/LOAD00000009\.csv cannot be read"):
        bronze.read_head("public/hosts/LOAD00000009.csv", 10)


def test_local_spark_paths(bronze: LocalBronze) -> None:
    # GIVEN / WHEN Spark paths are asked for a file
    file = parse_key("public/hosts/LOAD00000001.csv")
    # THEN the path is the absolute local file
    assert bronze.spark_paths([file]) == {file.key: str((bronze.directory / file.key).resolve())}


def test_local_size(bronze: LocalBronze) -> None:
    # GIVEN / WHEN a file, a missing file and a folder are sized
    # THEN only the file has a size (its byte count)
    path = bronze.directory / "public/hosts/LOAD00000001.csv"
    assert (
        bronze.size("public/hosts/LOAD00000001.csv"),
        bronze.size("public/hosts/LOAD00000002.csv"),
        bronze.size("public/hosts"),
    ) == (path.stat().st_size, None, None)


def test_local_root(tmp_path: Path) -> None:
    # GIVEN / WHEN a local store's root is asked / THEN it is the directory
    assert LocalBronze(tmp_path).root == str(tmp_path)


# --------------------------------------------------------------------------- head_text


def test_head_text_plain(bronze: LocalBronze) -> None:
    # GIVEN / WHEN the head of an uncompressed file is read / THEN it is returned as is
    assert head_text(bronze, parse_key("public/hosts/LOAD00000001.csv")) == b"1,a\n"


def test_head_text_gzip(tmp_path: Path) -> None:
    # GIVEN a small gzip CSV file
    (tmp_path / "s" / "t").mkdir(parents=True)
    (tmp_path / "s/t/LOAD00000001.csv.gz").write_bytes(gzip.compress(b"Op,id\nI,1\n"))
    # WHEN its head is read with the default budget
    head = head_text(LocalBronze(tmp_path), parse_key("s/t/LOAD00000001.csv.gz"))
    # THEN the whole text comes back decompressed
    assert head == b"Op,id\nI,1\n"


def test_head_text_compressed_prefix(tmp_path: Path) -> None:
    # GIVEN a compressed file (about 15 KB) several times larger than the bytes read
    (tmp_path / "s" / "t").mkdir(parents=True)
    (tmp_path / "s/t/LOAD00000001.csv.gz").write_bytes(gzip.compress(BODY, compresslevel=6))
    # WHEN only its first 2 KiB are read
    head = head_text(LocalBronze(tmp_path), parse_key("s/t/LOAD00000001.csv.gz"), max_bytes=2048)
    # THEN they decompress to the first 2 KiB of text (the output is capped at the budget too)
    assert head == BODY[:2048]


def test_head_text_first_30_bytes_of_gzip(tmp_path: Path) -> None:
    # GIVEN a larger gzip file written in stored (level 0) blocks, so bytes decode as soon as they arrive
    (tmp_path / "s" / "t").mkdir(parents=True)
    (tmp_path / "s/t/LOAD00000001.csv.gz").write_bytes(gzip.compress(BODY, compresslevel=0, mtime=0))
    # WHEN only its first 30 bytes are read (10 of gzip header, 5 of block header)
    head = head_text(LocalBronze(tmp_path), parse_key("s/t/LOAD00000001.csv.gz"), max_bytes=30)
    # THEN the 15 data bytes in them decompress
    assert head == b"Op,id,name\nI,0,"


def test_head_text_not_gzip(tmp_path: Path) -> None:
    # GIVEN a .gz file that holds plain text
    (tmp_path / "s" / "t").mkdir(parents=True)
    (tmp_path / "s/t/LOAD00000001.csv.gz").write_bytes(BODY)
    # WHEN / THEN BronzeError says it is not gzip
    with pytest.raises(BronzeError, match=r"^s/t/LOAD00000001\.csv\.gz is not a readable gzip file"):
        head_text(LocalBronze(tmp_path), parse_key("s/t/LOAD00000001.csv.gz"))


# --------------------------------------------------------------------------- S3Bronze (moto)


def test_s3_from_uri(s3_client: Any) -> None:
    # GIVEN / WHEN a store is made from an s3:// URI with a trailing slash
    store = S3Bronze.from_uri(s3_client, f"s3://{BUCKET}/dms/cdc/")
    # THEN the bucket and prefix are split and the root is normalised
    assert (store.bucket, store.prefix, store.root) == (BUCKET, "dms/cdc", f"s3://{BUCKET}/dms/cdc")


def test_s3_from_uri_without_prefix(s3_client: Any) -> None:
    # GIVEN / WHEN a store is made from a bare bucket URI / THEN its root is the bucket
    assert S3Bronze.from_uri(s3_client, f"s3://{BUCKET}").root == f"s3://{BUCKET}"


def test_s3_from_uri_rejects_other_schemes(s3_client: Any) -> None:
    # GIVEN / WHEN a non-S3 URI is given / THEN BronzeError names it
    with pytest.raises(BronzeError, match=re.escape("'/data/bronze' is not an s3:// URI.")):
        S3Bronze.from_uri(s3_client, "/data/bronze")


def test_open_store(s3_client: Any, tmp_path: Path) -> None:
    # GIVEN / WHEN stores are opened for an s3:// URI and a local path
    s3 = open_store(f"s3://{BUCKET}/dms", None, s3_client)
    local = open_store(str(tmp_path), None)
    # THEN each is the matching kind
    assert (type(s3).__name__, s3.root, type(local).__name__, local.root) == (
        "S3Bronze",
        f"s3://{BUCKET}/dms",
        "LocalBronze",
        str(tmp_path),
    )


def test_s3_list_keys_over_1000_objects(s3_client: Any) -> None:
    # GIVEN more objects than one ListObjectsV2 page holds
    for i in range(1005):
        put(s3_client, f"dms/s/t/LOAD{i + 1:08X}.csv", b"x")
    # WHEN the prefix is listed
    keys = list(S3Bronze(s3_client, BUCKET, "dms").list_keys())
    # THEN every object comes back (the listing follows pages)
    assert (len(keys), keys[0], keys[-1]) == (1005, ("s/t/LOAD00000001.csv", 1), ("s/t/LOAD000003ED.csv", 1))


def test_s3_prefix_is_a_folder(s3_client: Any) -> None:
    # GIVEN objects under the prefix, beside it with the same leading letters, and outside it
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"abc")
    put(s3_client, "dms-old/s/t/LOAD00000001.csv", b"x")
    put(s3_client, "other/s/t/LOAD00000001.csv", b"x")
    # WHEN the prefix is listed
    # THEN only objects inside the prefix folder come back, relative to it
    assert list(S3Bronze(s3_client, BUCKET, "dms").list_keys()) == [("s/t/LOAD00000001.csv", 3)]


def test_s3_list_keys_under(s3_client: Any) -> None:
    # GIVEN two tables under the prefix
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"abc")
    put(s3_client, "dms/s/t2/LOAD00000001.csv", b"x")
    # WHEN one table's folder is listed / THEN only its keys come back
    assert list(S3Bronze(s3_client, BUCKET, "dms").list_keys("s/t")) == [("s/t/LOAD00000001.csv", 3)]


def test_s3_list_keys_without_prefix(s3_client: Any) -> None:
    # GIVEN objects at the bucket root
    put(s3_client, "s/t/LOAD00000001.csv", b"abc")
    # WHEN a store without prefix lists / THEN keys are the object keys
    assert list(S3Bronze(s3_client, BUCKET).list_keys()) == [("s/t/LOAD00000001.csv", 3)]


def test_s3_missing_bucket(s3_client: Any) -> None:
    # GIVEN a bucket that does not exist
    store = S3Bronze(s3_client, "no-such-bucket", "dms")
    # WHEN it is listed / THEN BronzeError names the bucket
    with pytest.raises(BronzeError, match=re.escape("The bronze bucket 'no-such-bucket' does not exist.")):
        list(store.list_keys())


def test_s3_read_head_uses_a_range(s3_client: Any) -> None:
    # GIVEN an object larger than the head
    put(s3_client, "dms/s/t/LOAD00000001.csv", BODY)
    # WHEN the first 11 bytes are read
    head = S3Bronze(s3_client, BUCKET, "dms").read_head("s/t/LOAD00000001.csv", len(HEADER))
    # THEN exactly those bytes come back
    assert head == HEADER


def test_s3_read_head_shorter_object(s3_client: Any) -> None:
    # GIVEN an object smaller than the head budget
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"abc")
    # WHEN / THEN the whole object comes back
    assert S3Bronze(s3_client, BUCKET, "dms").read_head("s/t/LOAD00000001.csv", 1 << 16) == b"abc"


def test_s3_head_text_gzip(s3_client: Any) -> None:
    # GIVEN a gzip object
    put(s3_client, "dms/s/t/20240301-1200000000.csv.gz", gzip.compress(BODY))
    store = S3Bronze(s3_client, BUCKET, "dms")
    # WHEN its head is read through a range and decompressed / THEN it is the start of the text
    assert head_text(store, parse_key("s/t/20240301-1200000000.csv.gz"), max_bytes=1024) == BODY[:1024]


def test_s3_read_head_empty_object(s3_client: Any) -> None:
    # GIVEN an empty object
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"")
    store = S3Bronze(s3_client, BUCKET, "dms")
    # WHEN its head is read / THEN it is empty, as for a local empty file (the bug: a raw ClientError)
    assert store.read_head("s/t/LOAD00000001.csv", 1 << 16) == b""


def test_s3_read_head_missing_object(s3_client: Any) -> None:
    # GIVEN a key with no object
    store = S3Bronze(s3_client, BUCKET, "dms")
    # WHEN its head is read / THEN BronzeError names the file, as for a local store (the bug: a raw botocore error)
    with pytest.raises(BronzeError, match=r"LOAD00000009\.csv"):
        store.read_head("s/t/LOAD00000009.csv", 10)


def test_s3_size(s3_client: Any) -> None:
    # GIVEN one object under the prefix
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"abc")
    store = S3Bronze(s3_client, BUCKET, "dms")
    # WHEN it and a missing key are sized / THEN only it has a size, its byte count
    assert (store.size("s/t/LOAD00000001.csv"), store.size("s/t/LOAD00000002.csv")) == (3, None)


def test_s3_spark_paths_without_staging(s3_client: Any) -> None:
    # GIVEN a store without staging directory (AWS Glue reads s3:// itself)
    file = parse_key("s/t/LOAD00000001.csv", 3)
    # WHEN / THEN Spark gets the s3:// URI of the object
    assert S3Bronze(s3_client, BUCKET, "dms").spark_paths([file]) == {
        file.key: f"s3://{BUCKET}/dms/s/t/LOAD00000001.csv"
    }


def test_s3_spark_paths_downloads_into_staging(s3_client: Any, tmp_path: Path) -> None:
    # GIVEN an object and a store with a staging directory
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"1,a\n")
    store = S3Bronze(s3_client, BUCKET, "dms", staging_dir=tmp_path / "staging")
    file = parse_key("s/t/LOAD00000001.csv", 4)
    # WHEN Spark paths are asked for
    paths = store.spark_paths([file])
    # THEN the object is downloaded under the staging directory at its key
    local = tmp_path / "staging" / "s/t/LOAD00000001.csv"
    assert (paths, local.read_bytes()) == ({file.key: str(local.resolve())}, b"1,a\n")


@pytest.mark.parametrize(
    ("staged_bytes", "after"),
    [
        # a staged copy with the object's size (but other bytes, to see whether it is fetched again) is reused
        pytest.param(b"XXXX", b"XXXX", id="same-size-reused"),
        # a partial staged copy (an interrupted download) is downloaded again
        pytest.param(b"1,", b"1,a\n", id="other-size-refreshed"),
    ],
)
def test_s3_spark_paths_reuse_a_staged_file_only_of_the_objects_size(
    s3_client: Any, tmp_path: Path, staged_bytes: bytes, after: bytes
) -> None:
    # GIVEN an object of 4 bytes and a staged copy of it
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"1,a\n")
    staged = tmp_path / "s/t/LOAD00000001.csv"
    staged.parent.mkdir(parents=True)
    staged.write_bytes(staged_bytes)
    # WHEN Spark paths are asked for
    S3Bronze(s3_client, BUCKET, "dms", staging_dir=tmp_path).spark_paths([parse_key("s/t/LOAD00000001.csv", 4)])
    # THEN the staged file holds what it should
    assert staged.read_bytes() == after


def test_a_load_file_written_again_with_the_same_size_has_a_new_version(s3_client: Any, tmp_path: Path) -> None:
    # GIVEN a LOAD file on S3 and one in a local folder, listed
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"abc")
    s3 = S3Bronze(s3_client, BUCKET, "dms")
    local = tmp_path / "s" / "t" / "LOAD00000001.csv"
    local.parent.mkdir(parents=True)
    local.write_bytes(b"abc")
    before = [list_bronze(store).files[0].version for store in (s3, LocalBronze(tmp_path))]
    # WHEN each is written again in place with other bytes of the same size (a second later)
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"xyz")
    local.write_bytes(b"xyz")
    os.utime(local, ns=(local.stat().st_mtime_ns + 10**9,) * 2)
    after = [list_bronze(store).files[0] for store in (s3, LocalBronze(tmp_path))]
    # THEN the listing gives each a new version (the ETag, the modification time), same key and size
    assert [(f.key, f.size) for f in after] == [("s/t/LOAD00000001.csv", 3)] * 2
    assert all(old is not None and new.version not in (None, old) for old, new in zip(before, after, strict=True))


def test_an_object_written_again_with_the_same_size_is_staged_again(s3_client: Any, tmp_path: Path) -> None:
    # GIVEN a LOAD file staged for local Spark
    store = S3Bronze(s3_client, BUCKET, "dms", staging_dir=tmp_path / "staging")
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"abc")
    Path(store.spark_paths(list_bronze(store).files)["s/t/LOAD00000001.csv"]).read_bytes()
    # WHEN it is written again in place with other bytes of the same size, and listed again
    put(s3_client, "dms/s/t/LOAD00000001.csv", b"xyz")
    staged = Path(store.spark_paths(list_bronze(store).files)["s/t/LOAD00000001.csv"])
    # THEN Spark reads the new bytes, not the stale copy
    assert staged.read_bytes() == b"xyz"
