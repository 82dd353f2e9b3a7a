"""The CDC batch manifest: which bronze objects one CDC job run applies, in FIFO order.

Written by the state machine's dequeue step, read by the CDC job. JSON:
``{"files": [{"key": "s3://bucket/prefix/schema/table/20240101-1200000000.csv", "size": 123}]}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from cdclake.errors import BadInputError


@dataclass(frozen=True)
class ManifestEntry:
    key: str
    size: int = 0


def _key(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"a file key must be a non-empty string, not {value!r}")
    return value


def read_manifest(text: str, source: str = "manifest") -> list[ManifestEntry]:
    """Parse a manifest; a malformed one is a clear error naming ``source``."""
    try:
        document = json.loads(text)
        entries = [ManifestEntry(key=_key(f["key"]), size=int(f.get("size", 0))) for f in document["files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInputError(
            f'The manifest {source} is not valid ({exc!r}); expected {{"files": [{{"key": ...}}]}}.'
        ) from None
    return entries


def write_manifest(entries: list[ManifestEntry]) -> str:
    return json.dumps({"files": [{"key": e.key, "size": e.size} for e in entries]}, indent=1)
