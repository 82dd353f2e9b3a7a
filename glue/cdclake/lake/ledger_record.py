"""The ledger's record in a snapshot summary: what one commit applied, written and read back.

A commit that applies bronze files carries them in its snapshot summary (``cdclake.kind``,
``cdclake.files``, and for a full load its LOAD files' sizes and versions); a CDC commit may carry
the compacted ledger as it stood before it (``LedgerCheckpoint``, whose applied keys are an
``AppliedKeys``). Pure: the summaries come in as mappings, the properties go out as strings;
reading a table's lineage and writing commits stay in ``ledger``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdclake.lake.iceberg import Snapshot


KIND_PROPERTY = "cdclake.kind"


FILES_PROPERTY = "cdclake.files"


LATEST_COMMIT_TS_PROPERTY = "cdclake.latest-commit-ts"


# The sizes of a full load's LOAD files ({key: bytes}): a LOAD file DMS writes again under the same
# name (a reload restarts the counter) is told from the one loaded by its size.
LOAD_SIZES_PROPERTY = "cdclake.load-sizes"


# The versions of a full load's LOAD files ({key: modification time or ETag}): a LOAD file written
# again in place with the very same size (the "start from scratch" recovery) is told by its version.
LOAD_VERSIONS_PROPERTY = "cdclake.load-versions"


KIND_FULL_LOAD = "full-load"


# A full load's data commit, before the checks and steps that follow it (its layout, history, the
# old load's archived ledger and tombstones forgotten): the lineage says "not loaded" until the
# full-load commit after them, so a crash in between makes the next run load again.
KIND_FULL_LOAD_STAGED = "full-load-staged"


KIND_CDC = "cdc"


# A gold mart's refresh commit records the snapshots it read ({"database.table": snapshot id}):
# its next incremental refresh reads the changes since them, so maintenance keeps them.
MART_SOURCES_PROPERTY = "cdclake.gold.sources"


# A CDC batch's compacted ledger as it stood before the batch (``LedgerCheckpoint``): a reader stops
# at the newest snapshot that has one, so a ledger read costs the commits since, not the table's age.
CHECKPOINT_PROPERTY = "cdclake.ledger-checkpoint"


# A checkpoint naming more keys than this is not written (a ledger read the old way, not compacted
# yet): the snapshot summary stays small, and the reader walks back further.
CHECKPOINT_MAX_KEYS = 4096


@dataclass(frozen=True)
class AppliedKeys:
    """The bronze keys a table's ledger holds, compacted: per folder a watermark (a key), at or below
    which (in key order) every key is applied except the ``exceptions``, and the applied keys above
    their folder's watermark (or in a folder without one), each by name.

    The watermark is set only over a contiguous applied prefix of a listing of a time-ordered folder
    (``engine.select.compact_applied``), so a key at or below it that is not an exception was listed
    and applied. LOAD files (``LOAD…``) sort after every CDC name (a timestamp, digits first), so
    a watermark never covers one: they stay named. Its size is O(keys since the watermark)."""

    keys: frozenset[str] = frozenset()
    watermarks: Mapping[str, str] = field(default_factory=dict)  # folder -> the newest key covered
    exceptions: frozenset[str] = frozenset()  # keys at or below a watermark that are not applied
    count: int | None = None  # how many keys are applied in all (None: ``keys``, none covered)

    @classmethod
    def of(cls, keys: Iterable[str] | AppliedKeys) -> AppliedKeys:
        return keys if isinstance(keys, AppliedKeys) else cls(frozenset(keys))

    def __len__(self) -> int:
        return len(self.keys) if self.count is None else self.count

    def __eq__(self, other: object) -> bool:
        """Equal to another's keys, watermarks and exceptions; to a set when it names every key."""
        if isinstance(other, (set, frozenset)):
            return not self.watermarks and not self.exceptions and self.keys == other
        if isinstance(other, AppliedKeys):
            return (self.keys, dict(self.watermarks), self.exceptions, len(self)) == (
                other.keys, dict(other.watermarks), other.exceptions, len(other)
            )  # fmt: skip
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def watermark_of(self, key: str) -> str | None:
        """The watermark of ``key``'s folder (None: none)."""
        for folder, mark in self.watermarks.items():
            if key.startswith(folder + "/"):
                return mark
        return None

    def covered(self, key: str) -> bool:
        """Whether ``key`` is at or below its folder's watermark (applied unless an exception)."""
        mark = self.watermark_of(key)
        return mark is not None and key <= mark

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self.keys:
            return True
        return key not in self.exceptions and self.covered(key)

    def __or__(self, keys: Iterable[str]) -> AppliedKeys:
        """These keys applied too: a covered one leaves the exceptions, another is named."""
        added = frozenset(keys)
        if not added:
            return self
        covered = frozenset(k for k in added if self.covered(k))
        count = len(self) + sum(1 for k in added if k not in self)
        return AppliedKeys(self.keys | (added - covered), self.watermarks, self.exceptions - covered, count)

    def __bool__(self) -> bool:
        return bool(self.keys or self.watermarks)

    @property
    def size(self) -> int:
        """What it holds: named keys, exceptions and watermarks (the state a driver keeps)."""
        return len(self.keys) + len(self.exceptions) + len(self.watermarks)


@dataclass(frozen=True)
class LedgerCheckpoint:
    """A table's ledger compacted, as stored in a CDC commit's summary (``CHECKPOINT_PROPERTY``):
    what the ledger said before that commit's own files."""

    applied: AppliedKeys
    full_load_done: bool
    cdc_applied: bool  # CDC files applied since the last full load
    loaded: Mapping[str, LoadedFile]  # the last full load's LOAD files (what tells a reload)

    def properties(self) -> dict[str, str]:
        """The summary property, or none when it would name more than ``CHECKPOINT_MAX_KEYS`` keys."""
        applied = self.applied
        if len(applied.keys) + len(applied.exceptions) + len(self.loaded) > CHECKPOINT_MAX_KEYS:
            return {}
        value = {
            "v": 1,
            "watermarks": dict(sorted(applied.watermarks.items())),
            "exceptions": sorted(applied.exceptions),
            "keys": sorted(applied.keys),
            "count": len(applied),
            "full_load_done": self.full_load_done,
            "cdc_applied": self.cdc_applied,
            "loaded": {k: [f.size, f.version] for k, f in sorted(self.loaded.items())},
        }
        return {CHECKPOINT_PROPERTY: _compact(value)}

    @classmethod
    def from_summary(cls, text: str | None) -> LedgerCheckpoint | None:
        if not text:
            return None
        value = json.loads(text)
        applied = AppliedKeys(
            frozenset(value["keys"]), dict(value["watermarks"]), frozenset(value["exceptions"]), int(value["count"])
        )
        loaded = {k: LoadedFile(k, size, version) for k, (size, version) in value["loaded"].items()}
        return cls(applied, bool(value["full_load_done"]), bool(value["cdc_applied"]), loaded)


@dataclass(frozen=True)
class LoadedFile:
    """One bronze file a full load recorded: a LOAD file with what tells its content from the same
    name written again, or a CDC file the load superseded (its key alone)."""

    key: str
    # the LOAD file's size (DMS writes a name again when a reload restarts the counter); None for
    # a CDC file, or a ledger from before sizes were kept
    size: int | None = None
    # the LOAD file's version (modification time or ETag: written again in place with the same
    # size); None for a CDC file, or where the store or the ledger had none
    version: str | None = None

    def holds(self, size: int, version: str | None) -> bool:
        """Whether a file of ``size`` and ``version`` under this key is the content recorded: what
        the ledger does not know (no size, no version) does not tell them apart."""
        return self.size in (None, size) and (self.version is None or version is None or self.version == version)


FULL_LOAD_KINDS = frozenset({KIND_FULL_LOAD, KIND_FULL_LOAD_STAGED})


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def newest_commit_ts(snapshots: Iterable[Snapshot]) -> str | None:
    """The newest source commit time the ledger recorded over ``snapshots`` (read with
    LATEST_COMMIT_TS_PROPERTY in their summaries); None: none recorded."""
    stamps = (s.summary.get(LATEST_COMMIT_TS_PROPERTY) for s in snapshots)
    return max((stamp for stamp in stamps if stamp is not None), default=None)


@dataclass(frozen=True)
class LedgerRecord:
    """One commit's ledger entry: what it applied, as the snapshot summary holds it.

    ``kind`` is a CDC batch or a full load (staged or done); ``files`` are the bronze files it
    applied, in order, each with the size and version a full load keeps of its LOAD files (a CDC
    file has neither); ``latest_commit_ts`` is the newest source commit time of a CDC batch.
    """

    kind: str
    files: tuple[LoadedFile, ...]
    latest_commit_ts: str | None = None

    @classmethod
    def batch(cls, files: Iterable[str], latest_commit_ts: str | None = None) -> LedgerRecord:
        """The record of a CDC batch of the bronze files ``files``."""
        return cls(KIND_CDC, tuple(LoadedFile(key) for key in files), latest_commit_ts)

    @property
    def keys(self) -> tuple[str, ...]:
        """The bronze keys applied, in order."""
        return tuple(f.key for f in self.files)

    def properties(self) -> dict[str, str]:
        """The snapshot-summary properties holding this record, as ledgers always have: a full load
        keeps its LOAD files' sizes (always) and versions (where known), a CDC batch neither."""
        properties = {KIND_PROPERTY: self.kind, FILES_PROPERTY: _compact(list(self.keys))}
        if self.latest_commit_ts:
            properties[LATEST_COMMIT_TS_PROPERTY] = self.latest_commit_ts
        if self.kind in FULL_LOAD_KINDS:
            properties[LOAD_SIZES_PROPERTY] = _compact({f.key: f.size for f in self.files if f.size is not None})
            if versions := {f.key: f.version for f in self.files if f.version is not None}:
                properties[LOAD_VERSIONS_PROPERTY] = _compact(versions)
        return properties

    @classmethod
    def from_summary(cls, summary: Mapping[str, str]) -> LedgerRecord | None:
        """The record a snapshot summary holds; None for a commit that recorded none (maintenance,
        a foreign writer). Other properties are ignored; what an older ledger did not keep (sizes,
        versions, the commit time) reads as unknown."""
        kind = summary.get(KIND_PROPERTY)
        if not kind:
            return None
        files = _loaded_files(summary.get(FILES_PROPERTY), summary.get(LOAD_SIZES_PROPERTY),
                              summary.get(LOAD_VERSIONS_PROPERTY))  # fmt: skip
        return cls(kind, tuple(files), summary.get(LATEST_COMMIT_TS_PROPERTY) or None)


def _loaded_files(files: str | None, sizes: str | None, versions: str | None) -> list[LoadedFile]:
    """The files a stored ledger entry records, each with its size and version where it has them:
    the one reader of the stored format."""
    size_of = json.loads(sizes) if sizes else {}
    version_of = json.loads(versions) if versions else {}
    return [LoadedFile(key, size_of.get(key), version_of.get(key)) for key in (json.loads(files) if files else [])]


@dataclass(frozen=True)
class LineageEntry:
    """One snapshot of a table's current lineage, with the ledger record its commit carries."""

    snapshot: SnapshotRef
    committed_at: datetime  # UTC, naive
    record: LedgerRecord | None  # None: a commit that recorded none (maintenance, another writer)
    total_records: int  # the rows the table held at it
    checkpoint: str | None = None  # the compacted ledger before it (``CHECKPOINT_PROPERTY``)

    @property
    def kind(self) -> str | None:
        return None if self.record is None else self.record.kind

    @property
    def files(self) -> tuple[LoadedFile, ...]:
        """The files it records (a full load's LOAD files with their sizes and versions; a CDC
        batch's files with neither)."""
        return () if self.record is None else self.record.files


@dataclass(frozen=True)
class SnapshotRef:
    """One snapshot of a table: its id, and its sequence number (which grows with every commit
    in the table's lineage, so it orders snapshots even after some of them have expired)."""

    snapshot_id: int
    sequence_number: int


def lineage_entries(snapshots: Iterable[Snapshot]) -> Iterator[LineageEntry]:
    """A lineage's snapshots (newest first) with their ledger records, read from their summaries."""
    for snapshot in snapshots:
        yield LineageEntry(
            SnapshotRef(snapshot.snapshot_id, snapshot.sequence_number),
            snapshot.committed_at,
            LedgerRecord.from_summary(snapshot.summary),
            int(snapshot.summary.get("total-records") or 0),
            snapshot.summary.get(CHECKPOINT_PROPERTY),
        )
