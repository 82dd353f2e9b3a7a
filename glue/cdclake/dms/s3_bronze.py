"""Bronze in an S3 prefix, through boto3: listing, the streamed read resumed where a body breaks,
and the staging of a batch's objects for a local Spark that cannot read ``s3://``.

Every call goes through a client made with ``StoreSettings.client_config()``, so botocore retries
what it can; what it cannot (a body that breaks while it streams) is resumed here from the last byte
received. When the attempts run out, ``BronzeError`` names the object or prefix.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from cdclake.config import StoreSettings
from cdclake.dms.files import BronzeFile, spark_path
from cdclake.errors import BronzeError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import (
        GetObjectOutputTypeDef,
        HeadObjectOutputTypeDef,
        ListObjectsV2RequestPaginateTypeDef,
    )
else:
    S3Client = Any
    ListObjectsV2RequestPaginateTypeDef = dict

# the logger of the store module it was part of, so its lines keep their name
logger = logging.getLogger("cdclake.dms.store")


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

    @contextmanager
    def _listing(self, what: str) -> Iterator[None]:
        """A listing's faults as ``BronzeError``: a missing bucket said so, any other after botocore's retries."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                raise BronzeError(f"The bronze bucket '{self.bucket}' does not exist.") from None
            raise self._failed(what, exc) from None
        except BotoCoreError as exc:
            raise self._failed(what, exc) from None

    def list_keys(self, under: str = "", start_after: str | None = None) -> Iterator[tuple[str, int]]:
        """Every object under ``under`` with its size, page after page (1,000 keys a page); with
        ``start_after``, S3 starts the listing after that key: a request per 1,000 new keys."""
        start = self._object_key(under).rstrip("/") + "/" if (self.prefix or under) else ""
        paginator = self.client.get_paginator("list_objects_v2")
        with self._listing(f"Listing s3://{self.bucket}/{start}"):
            request: ListObjectsV2RequestPaginateTypeDef = {"Bucket": self.bucket, "Prefix": start}
            if start_after:
                request["StartAfter"] = self._object_key(start_after)
            for page in paginator.paginate(**request):
                for obj in page.get("Contents", []):
                    key = obj["Key"][len(self.prefix) :].lstrip("/")
                    if "ETag" in obj:
                        self._etags[key] = obj["ETag"]
                    yield key, obj["Size"]

    def list_folders(self, under: str = "") -> Iterator[str]:
        start = self._object_key(under).rstrip("/") + "/" if (self.prefix or under) else ""
        paginator = self.client.get_paginator("list_objects_v2")
        with self._listing(f"Listing the folders of s3://{self.bucket}/{start}"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=start, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    yield common["Prefix"][len(start) :].rstrip("/")

    def _stream(self, key: str, sink: BinaryIO, first: int = 0, last: int | None = None) -> int:
        """Copy the object's bytes ``first..last`` (inclusive; None: to its end) into ``sink``.

        botocore retries the request itself; a body that breaks mid-stream is asked for again from
        the next missing byte (pinned to the first answer's ETag, so a replaced object is an error,
        never a mix of two versions). Returns the number of bytes written.
        """
        uri = self._uri(key)
        etag: str | None = None
        position, expected_end = first, -1
        breaks = 0
        while True:
            response = self._get(key, first, position, last, etag)
            if response is None:
                return 0  # S3 refuses any range on an empty object
            if etag is None:  # the first answer fixes the version and the last byte to expect
                etag = response.get("ETag")
                expected_end = position + int(response["ContentLength"]) - 1
            position, fault = self._copy_body(response["Body"], sink, position)
            if fault is None and position > expected_end:
                return position - first
            breaks += 1
            if fault is not None:
                if breaks >= self.settings.body_attempts:
                    raise BronzeError(
                        f"Reading {uri} failed: the connection broke {breaks} time(s) mid-object, last at byte "
                        f"{position} ({_describe(fault)})."
                    )
                wait = min(20.0, self.settings.backoff_seconds * 2 ** (breaks - 1)) * (0.5 + random.random() / 2)
                logger.warning("bronze_read_resumed uri=%s byte=%d break=%d wait_s=%.2f", uri, position, breaks, wait)
                self.sleep(wait)
            elif breaks >= self.settings.body_attempts:  # the stream ended early without an error, too often
                raise BronzeError(
                    f"Reading {uri} failed: the object ended at byte {position} of {expected_end + 1}, "
                    f"{breaks} time(s)."
                )

    def _get(
        self, key: str, first: int, position: int, last: int | None, etag: str | None
    ) -> GetObjectOutputTypeDef | None:
        """The object's bytes from ``position`` (through ``last``), pinned to ``etag`` once known;
        None for the empty object S3 gives no range of (asked for from ``first``)."""
        from botocore.exceptions import BotoCoreError, ClientError

        uri = self._uri(key)
        arguments: dict[str, Any] = {"Bucket": self.bucket, "Key": self._object_key(key)}
        if position > first or last is not None:
            arguments["Range"] = f"bytes={position}-{'' if last is None else last}"
        if etag is not None:
            arguments["IfMatch"] = etag
        try:
            return self.client.get_object(**arguments)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                raise BronzeError(f"The bronze object {uri} does not exist.") from None
            if code == "InvalidRange" and position == first:
                return None
            if code == "PreconditionFailed":
                raise BronzeError(f"The bronze object {uri} was replaced while it was read.") from None
            raise self._failed(f"Reading {uri}", exc) from None
        except BotoCoreError as exc:
            raise self._failed(f"Reading {uri}", exc) from None

    def _copy_body(self, body: Any, sink: BinaryIO, position: int) -> tuple[int, Exception | None]:
        """Copy a response body into ``sink`` and close it: the position reached, and the fault that
        broke the stream (None: it ended)."""
        from botocore.exceptions import BotoCoreError

        try:
            while chunk := body.read(self.settings.chunk_bytes):
                sink.write(chunk)
                position += len(chunk)
        except (BotoCoreError, OSError) as exc:
            return position, exc
        finally:
            body.close()
        return position, None

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

    def _head(self, key: str, what: str) -> HeadObjectOutputTypeDef | None:
        """The object's metadata (None: no such key), ``what`` naming the read in a fault's sentence."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return self.client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in MISSING_KEY_CODES:
                return None
            raise self._failed(f"Reading {what} of {self._uri(key)}", exc) from None
        except BotoCoreError as exc:
            raise self._failed(f"Reading {what} of {self._uri(key)}", exc) from None

    def size(self, key: str) -> int | None:
        head = self._head(key, "the size")
        return None if head is None else int(head["ContentLength"])

    def version(self, key: str) -> str | None:
        """The object's ETag (a new one when the object is written again), as the listing saw it."""
        return self._etags.get(key)

    def modified(self, key: str) -> datetime | None:
        head = self._head(key, "the time")
        return None if head is None else head["LastModified"].astimezone(UTC).replace(tzinfo=None)


# Error codes S3 answers for a key that is not there.
MISSING_KEY_CODES = ("404", "NoSuchKey", "NotFound")
