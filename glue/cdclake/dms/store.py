"""Bronze storage at the edge: a local directory or an S3 prefix (through boto3).

Both list keys relative to the bronze root and hand Spark a path it can read. On AWS Glue Spark
reads ``s3://`` itself; local Spark has no S3 connector, so an ``S3Bronze`` with a staging
directory downloads the objects of a batch first (that is also how moto stands in for S3 in tests).

Faults: every S3 call goes through a client made with ``StoreSettings.client_config()`` (the
configuration's ``bronze.s3``), so botocore retries throttling (SlowDown, 503), 5xx answers,
connection resets and timeouts with backoff. What
botocore cannot retry — an object body that breaks while it streams — is resumed here from the last
byte received. When the attempts run out, ``BronzeError`` names the object or prefix; no key or
byte is ever skipped.
"""

from __future__ import annotations

import logging
import os
import random
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

from cdclake.config import StoreSettings
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind, UnrecognisedKey, classify, parse_key
from cdclake.errors import BronzeError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ListObjectsV2RequestPaginateTypeDef
else:
    S3Client = Any
    ListObjectsV2RequestPaginateTypeDef = dict

logger = logging.getLogger(__name__)

# Characters Hadoop reads as a glob in a path handed to Spark; escaped so a folder named
# "orders [old]" is read as itself (DataFrameReader globs every path that holds one of them).
_GLOB_CHARACTERS = frozenset("{}[]*?\\")


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


def spark_path(path: str) -> str:
    """``path`` as Spark's reader takes it literally: glob characters escaped, nothing else quoted.

    Spaces and non-ASCII characters need no quoting (Hadoop encodes them itself); percent-encoding
    here would make Spark look for a file literally named ``%20``.
    """
    return "".join(f"\\{ch}" if ch in _GLOB_CHARACTERS else ch for ch in path)


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


def _describe(exc: BaseException) -> str:
    """One line for an S3 failure: the error code and message, or botocore's own sentence."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error", {})
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code, message = error.get("Code", "?"), error.get("Message") or ""
        return f"{code} (HTTP {status}{': ' + message if message else ''})"
    return str(exc) or type(exc).__name__


def _retry_attempts(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        attempts = response.get("ResponseMetadata", {}).get("RetryAttempts")
        return int(attempts) + 1 if attempts is not None else None
    return None


@dataclass
class S3Bronze:
    client: S3Client
    bucket: str
    prefix: str = ""
    staging_dir: Path | None = None  # set for local Spark, which cannot read s3:// itself
    settings: StoreSettings = field(default_factory=StoreSettings)
    sleep: Callable[[float], None] = time.sleep  # waits between resumed body reads
    # ETags seen by the last listing (key -> ETag): versions without a request per object
    _etags: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_uri(
        cls, client: S3Client, uri: str, staging_dir: Path | None = None, settings: StoreSettings | None = None
    ) -> S3Bronze:
        if not uri.startswith("s3://"):
            raise BronzeError(f"'{uri}' is not an s3:// URI.")
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        return cls(
            client=client,
            bucket=bucket,
            prefix=prefix.strip("/"),
            staging_dir=staging_dir,
            settings=settings or StoreSettings(),
        )

    @property
    def root(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def _object_key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._object_key(key)}"

    def _failed(self, what: str, exc: BaseException) -> BronzeError:
        attempts = _retry_attempts(exc)
        tries = f" after {attempts} attempt(s)" if attempts else ""
        return BronzeError(f"{what} failed{tries}: {_describe(exc)}.")

    def list_keys(self, under: str = "", start_after: str | None = None) -> Iterator[tuple[str, int]]:
        """Every object under ``under`` with its size, page after page (1,000 keys a page); with
        ``start_after``, S3 starts the listing after that key: a request per 1,000 new keys."""
        from botocore.exceptions import BotoCoreError, ClientError

        start = self._object_key(under).rstrip("/") + "/" if (self.prefix or under) else ""
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            request: ListObjectsV2RequestPaginateTypeDef = {"Bucket": self.bucket, "Prefix": start}
            if start_after:
                request["StartAfter"] = self._object_key(start_after)
            for page in paginator.paginate(**request):
                for obj in page.get("Contents", []):
                    key = obj["Key"][len(self.prefix) :].lstrip("/")
                    if "ETag" in obj:
                        self._etags[key] = obj["ETag"]
                    yield key, obj["Size"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                raise BronzeError(f"The bronze bucket '{self.bucket}' does not exist.") from None
            raise self._failed(f"Listing s3://{self.bucket}/{start}", exc) from None
        except BotoCoreError as exc:
            raise self._failed(f"Listing s3://{self.bucket}/{start}", exc) from None

    def list_folders(self, under: str = "") -> Iterator[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        start = self._object_key(under).rstrip("/") + "/" if (self.prefix or under) else ""
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=start, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    yield common["Prefix"][len(start) :].rstrip("/")
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                raise BronzeError(f"The bronze bucket '{self.bucket}' does not exist.") from None
            raise self._failed(f"Listing the folders of s3://{self.bucket}/{start}", exc) from None
        except BotoCoreError as exc:
            raise self._failed(f"Listing the folders of s3://{self.bucket}/{start}", exc) from None

    def _stream(self, key: str, sink: BinaryIO, first: int = 0, last: int | None = None) -> int:
        """Copy the object's bytes ``first..last`` (inclusive; None: to its end) into ``sink``.

        botocore retries the request itself; a body that breaks mid-stream is asked for again from
        the next missing byte (pinned to the first answer's ETag, so a replaced object is an error,
        never a mix of two versions). Returns the number of bytes written.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        uri = self._uri(key)
        etag: str | None = None
        position, expected_end = first, -1
        breaks = 0
        while True:
            arguments: dict[str, Any] = {"Bucket": self.bucket, "Key": self._object_key(key)}
            if position > first or last is not None:
                arguments["Range"] = f"bytes={position}-{'' if last is None else last}"
            if etag is not None:
                arguments["IfMatch"] = etag
            try:
                response = self.client.get_object(**arguments)
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code in ("NoSuchKey", "404"):
                    raise BronzeError(f"The bronze object {uri} does not exist.") from None
                if code == "InvalidRange" and position == first:
                    return 0  # S3 refuses any range on an empty object
                if code == "PreconditionFailed":
                    raise BronzeError(f"The bronze object {uri} was replaced while it was read.") from None
                raise self._failed(f"Reading {uri}", exc) from None
            except BotoCoreError as exc:
                raise self._failed(f"Reading {uri}", exc) from None
            if etag is None:  # the first answer fixes the version and the last byte to expect
                etag = response.get("ETag")
                expected_end = position + int(response["ContentLength"]) - 1
            body = response["Body"]
            try:
                while chunk := body.read(self.settings.chunk_bytes):
                    sink.write(chunk)
                    position += len(chunk)
                if position > expected_end:
                    return position - first
            except (BotoCoreError, OSError) as exc:
                breaks += 1
                if breaks >= self.settings.body_attempts:
                    raise BronzeError(
                        f"Reading {uri} failed: the connection broke {breaks} time(s) mid-object, last at byte "
                        f"{position} ({_describe(exc)})."
                    ) from None
                wait = min(20.0, self.settings.backoff_seconds * 2 ** (breaks - 1)) * (0.5 + random.random() / 2)
                logger.warning("bronze_read_resumed uri=%s byte=%d break=%d wait_s=%.2f", uri, position, breaks, wait)
                self.sleep(wait)
                continue
            finally:
                body.close()
            if position <= expected_end:  # the stream ended early without an error: ask for the rest
                breaks += 1
                if breaks >= self.settings.body_attempts:
                    raise BronzeError(
                        f"Reading {uri} failed: the object ended at byte {position} of {expected_end + 1}, "
                        f"{breaks} time(s)."
                    )

    def read_head(self, key: str, max_bytes: int) -> bytes:
        import io

        buffer = io.BytesIO()
        self._stream(key, buffer, 0, max_bytes - 1)
        return buffer.getvalue()

    def spark_paths(self, files: Iterable[BronzeFile]) -> dict[str, str]:
        if self.staging_dir is None:
            return {f.key: spark_path(self._uri(f.key)) for f in files}
        paths: dict[str, str] = {}
        for f in files:
            local = self.staging_dir / f.key
            # The staged copy's ETag beside it: an object written again with the same size (a LOAD
            # file rewritten in place) is staged again, never read stale.
            version = local.with_name(local.name + ".etag")
            stale = f.version is not None and (not version.is_file() or version.read_text("utf-8") != f.version)
            if not local.is_file() or local.stat().st_size != f.size or stale:
                self._stage(f, local)
                if f.version is not None:
                    version.write_text(f.version, "utf-8")
            paths[f.key] = spark_path(str(local.resolve()))
        return paths

    def _stage(self, file: BronzeFile, local: Path) -> None:
        """Download one object next to ``local``, then rename: an interrupted run leaves no partial file
        that a later run could take for the whole object."""
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(local.name + ".part")
        try:
            with open(partial, "wb") as sink:
                written = self._stream(file.key, sink)
            if written != file.size:
                raise BronzeError(
                    f"The bronze object {self._uri(file.key)} holds {written} bytes, not the {file.size} it was "
                    "listed with: it changed since the listing."
                )
            os.replace(partial, local)
        except OSError as exc:
            raise BronzeError(f"{self._uri(file.key)} cannot be staged in {local}: {exc.strerror}.") from None
        finally:
            partial.unlink(missing_ok=True)

    def size(self, key: str) -> int | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in MISSING_KEY_CODES:
                return None
            raise self._failed(f"Reading the size of {self._uri(key)}", exc) from None
        except BotoCoreError as exc:
            raise self._failed(f"Reading the size of {self._uri(key)}", exc) from None
        return int(head["ContentLength"])

    def version(self, key: str) -> str | None:
        """The object's ETag (a new one when the object is written again), as the listing saw it."""
        return self._etags.get(key)

    def modified(self, key: str) -> datetime | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in MISSING_KEY_CODES:
                return None
            raise self._failed(f"Reading the time of {self._uri(key)}", exc) from None
        except BotoCoreError as exc:
            raise self._failed(f"Reading the time of {self._uri(key)}", exc) from None
        return head["LastModified"].astimezone(UTC).replace(tzinfo=None)


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


# Error codes S3 answers for a key that is not there.
MISSING_KEY_CODES = ("404", "NoSuchKey", "NotFound")


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
