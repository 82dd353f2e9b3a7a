"""Bronze storage at the edge: a local directory or an S3 prefix (through boto3).

Both list keys relative to the bronze root and hand Spark a path it can read. On AWS Glue Spark
reads ``s3://`` itself; local Spark has no S3 connector, so an ``S3Bronze`` with a staging
directory downloads the objects of a batch first (that is also how moto stands in for S3 in tests).

Faults: every S3 call goes through a client made with ``StoreSettings.client_config()`` (the
configuration's ``bronze.s3``), so botocore retries throttling (SlowDown, 503), 5xx answers,
connection resets and timeouts with backoff. What
botocore cannot retry — an object body that breaks while it streams — is resumed from the last
byte received (``s3_bronze.S3Bronze``). When the attempts run out, ``BronzeError`` names the object
or prefix; no key or byte is ever skipped.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cdclake.config import StoreSettings
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind, UnrecognisedKey, classify, parse_key, spark_path
from cdclake.dms.s3_bronze import MISSING_KEY_CODES, S3Bronze
from cdclake.errors import BronzeError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
else:
    S3Client = Any


class BronzeStore(Protocol):
    """Where DMS writes; keys are relative to ``root``."""

    @property
    def root(self) -> str: ...

    def list_keys(self, under: str = "", start_after: str | None = None) -> Iterator[tuple[str, int]]:
        """Every key under ``under`` with its size; with ``start_after`` (a key under ``under``) only
        the keys that sort after it, as S3's ListObjectsV2 ``StartAfter`` gives them."""
        ...

    def list_folders(self, under: str = "") -> Iterator[str]:
        """The names of the folders directly under ``under`` (S3: the common prefixes of a listing
        with the delimiter ``/``, a request per 1,000 folders, whatever the keys below them)."""
        ...

    def read_head(self, key: str, max_bytes: int) -> bytes: ...

    def spark_paths(self, files: Iterable[BronzeFile]) -> dict[str, str]: ...

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None when it does not exist."""
        ...

    def version(self, key: str) -> str | None:
        """What changes when the object is written again, even with the same size (None: unknown)."""
        ...

    def modified(self, key: str) -> datetime | None:
        """When the object was last written (UTC, naive), or None when it does not exist."""
        ...


def list_bronze(
    store: BronzeStore, under: str = "", transaction_path: str | None = None, start_after: str | None = None
) -> BronzeListing:
    """Classify everything under ``under`` (after ``start_after``) into DMS files and unrecognised
    keys; LOAD files carry their version (``BronzeFile.version``): a LOAD file written again in
    place is told by it."""
    listing = classify(store.list_keys(under, start_after=start_after), transaction_path)
    return BronzeListing(files=tuple(versioned(store, f) for f in listing.files), unrecognised=listing.unrecognised)


def versioned(store: BronzeStore, file: BronzeFile) -> BronzeFile:
    """``file`` with its version when it is a LOAD file (``BronzeFile.version``); others as they are."""
    return replace(file, version=store.version(file.key)) if file.kind is FileKind.FULL_LOAD else file


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

    def list_keys(self, under: str = "", start_after: str | None = None) -> Iterator[tuple[str, int]]:
        base = self.directory / under if under else self.directory
        if not self.directory.is_dir():
            raise BronzeError(f"The bronze directory {self.directory} does not exist.")

        def unreadable(exc: OSError) -> None:
            if exc.filename is not None and Path(exc.filename) == base and isinstance(exc, FileNotFoundError):
                return  # a table folder that does not exist (yet) holds no keys
            raise BronzeError(f"The bronze folder {exc.filename} cannot be listed: {exc.strerror}.")

        for dirpath, dirs, names in os.walk(base, onerror=unreadable):
            if start_after is not None:
                # As S3's StartAfter: a folder whose every key sorts before the start is not read.
                here = Path(dirpath).relative_to(self.directory).as_posix()
                dirs[:] = [d for d in dirs if not _all_before(f"{here}/{d}/" if here != "." else f"{d}/", start_after)]
            for name in names:
                path = Path(dirpath) / name
                key = path.relative_to(self.directory).as_posix()
                if start_after is not None and key <= start_after:
                    continue
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    if _is_data_file(key):  # a DMS file that vanished: said, never skipped
                        raise BronzeError(f"The bronze file {path} cannot be read: it vanished while listed.") from None
                    continue  # gone since its folder was read (capture's temporary progress file, renamed)
                except OSError as exc:
                    raise BronzeError(f"The bronze file {path} cannot be read: {exc.strerror}.") from None
                yield key, size

    def list_folders(self, under: str = "") -> Iterator[str]:
        base = self.directory / under if under else self.directory
        if not base.is_dir():
            return
        try:
            yield from sorted(entry.name for entry in os.scandir(base) if entry.is_dir())
        except OSError as exc:
            raise BronzeError(f"The bronze folder {base} cannot be listed: {exc.strerror}.") from None

    def read_head(self, key: str, max_bytes: int) -> bytes:
        try:
            with open(self.directory / key, "rb") as handle:
                return handle.read(max_bytes)
        except OSError as exc:
            raise BronzeError(f"The bronze file {self.directory / key} cannot be read: {exc.strerror}.") from None

    def spark_paths(self, files: Iterable[BronzeFile]) -> dict[str, str]:
        return {f.key: spark_path(str((self.directory / f.key).resolve())) for f in files}

    def size(self, key: str) -> int | None:
        path = self.directory / key
        return path.stat().st_size if path.is_file() else None

    def version(self, key: str) -> str | None:
        """The modification time in nanoseconds (a file rewritten in place gets a new one)."""
        try:
            return str((self.directory / key).stat().st_mtime_ns)
        except OSError:
            return None

    def modified(self, key: str) -> datetime | None:
        try:
            seconds = (self.directory / key).stat().st_mtime
        except OSError:
            return None
        return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def _all_before(folder: str, start_after: str) -> bool:
    """Whether every key under ``folder`` (ending in ``/``) sorts at or before ``start_after``."""
    return folder < start_after and not start_after.startswith(folder)


def open_store(
    uri: str, staging_dir: Path | None, s3_client: S3Client | None = None, settings: StoreSettings | None = None
) -> BronzeStore:
    """A store for a local directory or an ``s3://`` prefix (the client is made here if not given,
    with the retry and timeout settings of ``settings``)."""
    settings = settings or StoreSettings()
    if uri.startswith("s3://"):
        if s3_client is None:
            import boto3

            s3_client = boto3.client("s3", config=settings.client_config())
        return S3Bronze.from_uri(s3_client, uri, staging_dir, settings)
    return LocalBronze(Path(uri))


def read_text(uri: str, s3: Any | None = None) -> str | None:
    """A small text object (configuration, manifest, request) at an ``s3://`` URI or a local path;
    None when there is none (S3's error code says the key is missing, or no such file). Any other
    failure (access denied, a network fault) is raised. ``s3``: the client (made here if not given)."""
    if not uri.startswith("s3://"):
        path = Path(uri)
        return path.read_text(encoding="utf-8") if path.exists() else None
    from botocore.exceptions import ClientError

    if s3 is None:
        import boto3

        s3 = boto3.client("s3")
    bucket, _, key = uri[len("s3://") :].partition("/")
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in MISSING_KEY_CODES:
            return None
        raise
    return str(body.decode("utf-8"))


def _is_data_file(key: str) -> bool:
    """Whether ``key`` names a DMS data file (a file of a table folder), not a writer's own file."""
    try:
        parse_key(key)
    except UnrecognisedKey:
        return False
    return True
