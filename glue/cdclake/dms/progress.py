"""A capture's progress record in bronze: "every change committed up to here is in these files".

``cdclake capture`` (``sources/postgres/change_stream.py``) writes it after every flush, when the files
of the flush are durable: the source log position (PostgreSQL's commit LSN) up to which every
captured change is in bronze, the commit time of the newest transaction at or below it, and for
every captured table — changed or not — the newest CDC file it has at that position, the position
its LOAD files were taken at, and whether capture holds it (an unlogged value) or is loading it
again. The engine reads it before it lists bronze (``engine.cut``): the files it names are then in
the listing, and a round applies no file past it.

The record is one JSON object at ``PROGRESS_KEY`` under the bronze root, replaced atomically
(a temporary name, fsync, rename). Keys under ``CDCLAKE_PREFIX`` are cdclake's own: a bronze
listing passes over them (``dms.files.classify``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdclake.dms.files import CDCLAKE_KEYS
from cdclake.errors import BronzeError

if TYPE_CHECKING:
    from cdclake.dms.store import BronzeStore

CDCLAKE_PREFIX = CDCLAKE_KEYS  # bronze keys of cdclake's own, never DMS files
PROGRESS_KEY = CDCLAKE_PREFIX + "capture-progress.json"
FORMAT = 1
MAX_RECORD_BYTES = 64 << 20  # far above a record of thousands of tables (about 200 bytes each)


@dataclass(frozen=True)
class TableProgress:
    """One captured table at the record's position."""

    newest_file: str | None  # bronze key of its newest CDC file at the position (None: none yet)
    loaded_at: int = 0  # the position its LOAD files were taken at (0: the first capture's snapshot)
    held: str | None = None  # why capture leaves its changes out (an unlogged value), None: not held
    reloading: bool = False  # ``capture --reload`` asked for, its LOAD files not written yet


@dataclass(frozen=True)
class CaptureProgress:
    """Every change of the captured tables committed at or below ``position`` is in bronze."""

    position: int  # the source log position (PostgreSQL: an LSN, as a number)
    position_text: str  # as the source prints it (``0/16B3748``)
    commit_ts: str | None  # commit time of the newest transaction at or below it (None: none seen yet)
    tables: Mapping[str, TableProgress] = field(default_factory=dict)  # by schema.table
    written_at: str = ""  # ISO 8601 UTC, for people

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "position": self.position,
                "position_text": self.position_text,
                "commit_ts": self.commit_ts,
                "written_at": self.written_at,
                "tables": {
                    name: {
                        "newest_file": t.newest_file,
                        "loaded_at": t.loaded_at,
                        "held": t.held,
                        "reloading": t.reloading,
                    }
                    for name, t in sorted(self.tables.items())
                },
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> CaptureProgress:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
        tables = {
            str(name): TableProgress(t.get("newest_file"), int(t.get("loaded_at") or 0), t.get("held"),
                                     bool(t.get("reloading")))
            for name, t in data["tables"].items()
        }  # fmt: skip
        return cls(int(data["position"]), str(data["position_text"]), data.get("commit_ts"), tables,
                   str(data.get("written_at") or ""))  # fmt: skip


def read_progress(store: BronzeStore) -> CaptureProgress | None:
    """The progress record in ``store`` (None: no capture writes one there, e.g. AWS DMS)."""
    if store.size(PROGRESS_KEY) is None:
        return None
    # Read whole, whatever its size now: capture may have replaced it (atomically) since it was sized.
    text = store.read_head(PROGRESS_KEY, MAX_RECORD_BYTES).decode("utf-8")
    try:
        return CaptureProgress.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise BronzeError(f"The capture progress record {PROGRESS_KEY} cannot be read: {exc}") from None
