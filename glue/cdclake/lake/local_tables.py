"""The Iceberg tables of a local warehouse read in this process, with no JVM: the layout of Iceberg's
Hadoop-type catalog on the local file system, as ``runtime.session.LocalCatalog`` writes it.

``<warehouse>/<database>/<table>/metadata/v<N>.metadata.json`` (or ``v<N>.gz.metadata.json``) are a
table's metadata versions; ``version-hint.text`` names the newest one as last committed, and a
newer ``v<N+1>`` found next to it wins (Iceberg's ``HadoopTableOperations`` reads them the same way).
A directory is a table when its ``metadata`` directory holds a metadata file.

Snapshots, summaries and properties are read from the metadata JSON itself; rows (journals, the
ledger archive, tombstone keys) by pyiceberg (``lake.counts``).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdclake.lake.counts import TableFiles
from cdclake.lake.iceberg import Snapshot

_VERSION = re.compile(r"^v(\d+)(\.gz)?\.metadata\.json$")


def _versions(metadata: Path) -> dict[int, Path]:
    found: dict[int, Path] = {}
    if metadata.is_dir():
        for path in metadata.iterdir():
            if match := _VERSION.match(path.name):
                found[int(match.group(1))] = path
    return found


def _current_file(metadata: Path) -> Path | None:
    """The table's current metadata file: the version hint, or the newest version where it is
    missing or a newer version lies beside it."""
    versions = _versions(metadata)
    if not versions:
        return None
    try:
        version = int((metadata / "version-hint.text").read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        version = max(versions)
    while version + 1 in versions:
        version += 1
    return versions.get(version) or versions[max(versions)]


def _snapshot(entry: dict[str, Any]) -> Snapshot:
    summary = {str(k): str(v) for k, v in (entry.get("summary") or {}).items() if k != "operation"}
    parent = entry.get("parent-snapshot-id")
    return Snapshot(
        snapshot_id=int(entry["snapshot-id"]),
        sequence_number=int(entry.get("sequence-number") or 0),
        parent_id=None if parent is None else int(parent),
        timestamp_millis=int(entry["timestamp-ms"]),
        summary=summary,
    )


@dataclass(frozen=True)
class LocalTable:
    """One table's current metadata, as its metadata file holds it."""

    metadata_location: str
    metadata: dict[str, Any]

    @classmethod
    def load(cls, directory: Path) -> LocalTable | None:
        """The table in ``directory`` (None: not a table)."""
        current = _current_file(directory / "metadata")
        if current is None:
            return None
        raw = current.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        return cls(str(current), json.loads(text))

    def snapshots(self) -> list[Snapshot]:
        """Every snapshot the metadata holds, oldest first (as the Java API lists them)."""
        return [_snapshot(s) for s in self.metadata.get("snapshots") or ()]

    @property
    def current_snapshot_id(self) -> int | None:
        current = self.metadata.get("current-snapshot-id")
        return None if current is None or int(current) == -1 else int(current)

    def current(self) -> Snapshot | None:
        wanted = self.current_snapshot_id
        return next((s for s in self.snapshots() if s.snapshot_id == wanted), None)

    def current_summary(self) -> dict[str, str] | None:
        """The current snapshot's summary (None: no snapshot)."""
        current = self.current()
        return None if current is None else dict(current.summary)

    def lineage(self) -> Iterator[Snapshot]:
        """The current snapshot and its ancestors, newest first, back to the first one expiry kept."""
        by_id = {s.snapshot_id: s for s in self.snapshots()}
        at = self.current_snapshot_id
        while at is not None and at in by_id:
            yield by_id[at]
            at = by_id[at].parent_id

    def table_property(self, name: str) -> str | None:
        value = (self.metadata.get("properties") or {}).get(name)
        return None if value is None else str(value)

    @property
    def first_column(self) -> str:
        schemas = self.metadata.get("schemas") or [self.metadata.get("schema")]
        wanted = self.metadata.get("current-schema-id")
        schema = next((s for s in schemas if s.get("schema-id") == wanted), schemas[-1])
        return str(schema["fields"][0]["name"])

    def exact_rows(self) -> int | None:
        """The rows when the current summary says them exactly (no delete file); 0 without a snapshot."""
        current = self.current()
        if current is None:
            return 0
        records, deletes = current.summary.get("total-records"), current.summary.get("total-delete-files")
        return int(records) if records is not None and deletes is not None and int(deletes) == 0 else None

    def files(self) -> TableFiles:
        current = self.current()
        equality = 0 if current is None else int(current.summary.get("total-equality-deletes") or 0)
        return TableFiles(self.metadata_location, self.first_column, equality == 0)

    def rows(self, columns: Sequence[str]) -> list[dict[str, Any]]:
        """The live rows of ``columns`` (pyiceberg applies the position deletes)."""
        from pyiceberg.table import StaticTable

        from cdclake.lake.counts import FILE_IO

        if self.current_snapshot_id is None:
            return []
        scan = StaticTable.from_metadata(self.metadata_location, FILE_IO).scan(selected_fields=tuple(columns))
        return list(scan.to_arrow().to_pylist())


@dataclass(frozen=True)
class LocalWarehouse:
    """A local Hadoop-type warehouse directory."""

    root: Path

    def table_names(self, database: str) -> frozenset[str]:
        """The tables of ``database`` (none when it does not exist)."""
        directory = self.root / database
        if not directory.is_dir():
            return frozenset()
        return frozenset(p.name for p in directory.iterdir() if p.is_dir() and _versions(p / "metadata"))

    def table(self, database: str, name: str) -> LocalTable | None:
        return LocalTable.load(self.root / database / name)
