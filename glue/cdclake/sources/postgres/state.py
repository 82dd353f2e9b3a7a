"""Capture state and the bronze folders it writes: durable, crash-safe, one folder per table."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cdclake.dms.writer import cdc_file_name
from cdclake.sources.postgres.catalog import (
    SourceColumn,
    SourceTable,
)
from cdclake.sources.postgres.settings import CAPTURED_NAME, CaptureSettings

log = logging.getLogger("cdclake.capture")

# --------------------------------------------------------------------------- state and files


@dataclass
class CaptureState:
    slot: str
    tables: list[SourceTable]
    full_load_done: bool = False
    consistent_point: str = ""
    # table -> commit LSN of the transaction whose Relation message gave the table its current
    # columns (a re-read of an older transaction never reverts a newer layout)
    layout_lsns: dict[str, int] = field(default_factory=dict)
    # table -> consistent point of the snapshot a table added after the first capture was loaded
    # in: the slot's changes of it that commit before this are in its LOAD files already
    load_lsns: dict[str, int] = field(default_factory=dict)
    config: str = ""  # the configuration file this capture follows (absolute), "" when none
    # the publications the first capture created (changes are decoded through these names)
    publications: list[str] = field(default_factory=list)
    # table -> (commit LSN, reason): a table whose changes from that transaction on are not
    # captured (an unlogged TOAST value, ``change_stream.ChangeCapture._hold``) until it is reloaded
    held: dict[str, tuple[int, str]] = field(default_factory=dict)
    # tables being loaded again (``capture --reload``): their changes are not written until it is done
    reloads: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> CaptureState:
        data = json.loads(text)
        tables = [
            SourceTable(
                t["schema"],
                t["name"],
                tuple(SourceColumn(**c) for c in t["columns"]),
                tuple(t["primary_key"]),
                t["replica_identity"],
            )
            for t in data["tables"]
        ]
        held = {table: (int(lsn), str(reason)) for table, (lsn, reason) in data.get("held", {}).items()}
        return cls(
            data["slot"],
            tables,
            data["full_load_done"],
            data["consistent_point"],
            data.get("layout_lsns", {}),
            data.get("load_lsns", {}),
            data.get("config", ""),
            data.get("publications", []),
            held,
            data.get("reloads", []),
        )


def capture_holds(state_dir: Path, config_path: Path) -> dict[str, str]:
    """The tables capture holds (``schema.table`` -> capture's reason), from the capture states in
    ``state_dir`` that follow the configuration file ``config_path`` (or name none); a state that
    cannot be read is skipped: status then says what silver and bronze say, as without capture."""
    holds: dict[str, str] = {}
    config = str(config_path.resolve())
    for path in sorted(state_dir.glob("*.json")) if state_dir.is_dir() else []:
        try:
            state = CaptureState.from_json(path.read_text("utf-8"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("capture state %s not read: %s", path, exc)
            continue
        if state.config in ("", config):
            holds |= {table: reason for table, (_lsn, reason) in state.held.items()}
    return holds


def state_path(settings: CaptureSettings) -> Path:
    return settings.state_dir / f"{settings.slot}.json"


def column_signature(column: SourceColumn) -> tuple[str, str, int]:
    return (column.name, column.pg_type, column.type_modifier)


def change_sequence(commit_lsn: int, position: int) -> str:
    """The AR_H_CHANGE_SEQ value: commit LSN (20 digits) + position in the transaction (10 digits)."""
    return f"{commit_lsn:020d}{position:010d}"


def timestamp_text(stamp: datetime) -> str:
    return stamp.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


@dataclass
class TableFolder:
    """One table's bronze folder: the last CDC file name written and the commit LSN it reaches."""

    path: Path
    last_stamp: str = ""
    durable_lsn: int = 0

    @classmethod
    def scan(cls, path: Path) -> TableFolder:
        folder = cls(path)
        if path.is_dir():
            for leftover in path.glob(".*.tmp"):
                leftover.unlink()
            for name in sorted(p.name for p in path.iterdir()):
                if match := CAPTURED_NAME.match(name):
                    folder.last_stamp, folder.durable_lsn = match.group(1), int(match.group(2))
        return folder

    def next_name(self, commit_ts: str, commit_lsn: int) -> str:
        stamp = max(cdc_file_name(commit_ts)[: -len(".csv")], self.last_stamp)
        return f"{stamp}{commit_lsn:020d}.csv"
