"""Bronze storage at the edge: a local directory or an S3 prefix (through boto3).

Both list keys relative to the bronze root and hand Spark a path it can read. On AWS Glue Spark
reads ``s3://`` itself; local Spark has no S3 connector, so an ``S3Bronze`` with a staging
directory downloads the objects of a batch first (that is also how moto stands in for S3 in tests).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cdclake.dms.files import BronzeFile, BronzeListing, classify
from cdclake.errors import BronzeError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any


class BronzeStore(Protocol):
    """Where DMS writes; keys are relative to ``root``."""

    @property
    def root(self) -> str: ...

    def list_keys(self, under: str = "") -> Iterator[tuple[str, int]]: ...

    def read_head(self, key: str, max_bytes: int) -> bytes: ...

    def spark_paths(self, files: Iterable[BronzeFile]) -> dict[str, str]: ...

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None when it does not exist."""
        ...


def list_bronze(store: BronzeStore, under: str = "", transaction_path: str | None = None) -> BronzeListing:
    """Classify everything under ``under`` into DMS files and unrecognised keys."""
    return classify(store.list_keys(under), transaction_path)


def head_text(store: BronzeStore, file: BronzeFile, max_bytes: int = 1 << 16) -> bytes:
    """The first bytes of a file, decompressed when it is gzip (enough to read a CSV header)."""
    raw = store.read_head(file.key, max_bytes)
    if not file.compressed:
        return raw
    try:
        # A streaming decompressor accepts a truncated stream: the range read may cut it anywhere.
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, max_bytes)
    except zlib.error as exc:
        raise BronzeError(f"{file.key} is not a readable gzip file ({exc}).") from None


@dataclass
class LocalBronze:
    directory: Path

    @property
    def root(self) -> str:
        return str(self.directory)

    def list_keys(self, under: str = "") -> Iterator[tuple[str, int]]:
        base = self.directory / under if under else self.directory
        if not self.directory.is_dir():
            raise BronzeError(f"The bronze directory {self.directory} does not exist.")
        for dirpath, _dirs, names in os.walk(base):
            for name in names:
                path = Path(dirpath) / name
                yield path.relative_to(self.directory).as_posix(), path.stat().st_size

    def read_head(self, key: str, max_bytes: int) -> bytes:
        try:
            with open(self.directory / key, "rb") as handle:
                return handle.read(max_bytes)
        except OSError as exc:
            raise BronzeError(f"The bronze file {self.directory / key} cannot be read: {exc.strerror}.") from None

    def spark_paths(self, files: Iterable[BronzeFile]) -> dict[str, str]:
        return {f.key: str((self.directory / f.key).resolve()) for f in files}

    def size(self, key: str) -> int | None:
        path = self.directory / key
        return path.stat().st_size if path.is_file() else None


@dataclass
class S3Bronze:
    client: S3Client
    bucket: str
    prefix: str = ""
    staging_dir: Path | None = None  # set for local Spark, which cannot read s3:// itself

    @classmethod
    def from_uri(cls, client: S3Client, uri: str, staging_dir: Path | None = None) -> S3Bronze:
        if not uri.startswith("s3://"):
            raise BronzeError(f"'{uri}' is not an s3:// URI.")
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        return cls(client=client, bucket=bucket, prefix=prefix.strip("/"), staging_dir=staging_dir)

    @property
    def root(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def _object_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def list_keys(self, under: str = "") -> Iterator[tuple[str, int]]:
        start = self._object_key(under).rstrip("/") + "/" if (self.prefix or under) else ""
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=start):
                for obj in page.get("Contents", []):
                    yield obj["Key"][len(self.prefix) :].lstrip("/"), obj["Size"]
        except self.client.exceptions.NoSuchBucket:
            raise BronzeError(f"The bronze bucket '{self.bucket}' does not exist.") from None

    def read_head(self, key: str, max_bytes: int) -> bytes:
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self._object_key(key), Range=f"bytes=0-{max_bytes - 1}"
            )
        except self.client.exceptions.NoSuchKey:
            raise BronzeError(f"The bronze object s3://{self.bucket}/{self._object_key(key)} does not exist.") from None
        except self.client.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return b""  # S3 refuses any range on an empty object
            raise
        return bytes(response["Body"].read())

    def spark_paths(self, files: Iterable[BronzeFile]) -> dict[str, str]:
        if self.staging_dir is None:
            return {f.key: f"s3://{self.bucket}/{self._object_key(f.key)}" for f in files}
        paths: dict[str, str] = {}
        for f in files:
            local = self.staging_dir / f.key
            if not local.exists() or local.stat().st_size != f.size:
                local.parent.mkdir(parents=True, exist_ok=True)
                self.client.download_file(self.bucket, self._object_key(f.key), str(local))
            paths[f.key] = str(local.resolve())
        return paths

    def size(self, key: str) -> int | None:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except self.client.exceptions.ClientError:
            return None
        return int(head["ContentLength"])


def open_store(uri: str, staging_dir: Path | None, s3_client: S3Client | None = None) -> BronzeStore:
    """A store for a local directory or an ``s3://`` prefix (the client is made here if not given)."""
    if uri.startswith("s3://"):
        if s3_client is None:
            import boto3

            s3_client = boto3.client("s3")
        return S3Bronze.from_uri(s3_client, uri, staging_dir)
    return LocalBronze(Path(uri))
