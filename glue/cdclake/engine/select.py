"""Select: which bronze files each table still needs, from one listing and the ledger (pure).

Nothing here reads or writes a table: the callers read each table's ledger and quarantine once
(``TableState``) and hand the state back after every commit (``TableState.after``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from cdclake.config import PipelineConfig, TableConfig
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind, parse_key
from cdclake.dms.store import BronzeStore
from cdclake.errors import BronzeError, ConfigError
from cdclake.report import RunReport


@dataclass(frozen=True)
class TableState:
    """What silver holds of one table: read once per run, then carried forward from each commit."""

    full_load_done: bool
    applied: frozenset[str]  # bronze keys in the ledger
    held: frozenset[str]  # bronze keys in quarantine (applied only by a replay)

    def pending(self, files: Iterable[BronzeFile], force: bool = False) -> list[BronzeFile]:
        """``files`` not applied and not held, in apply order (``force``: all of them)."""
        return sorted({f for f in files if force or (f.key not in self.applied and f.key not in self.held)})

    def after(self, applied: Iterable[str] = (), held: Iterable[str] = (), released: Iterable[str] = ()) -> TableState:
        """The state once a commit applied, quarantined or released these keys."""
        applied = frozenset(applied)
        return replace(
            self,
            applied=self.applied | applied,
            held=(self.held | frozenset(held)) - frozenset(released) - applied,
        )


def skip_reason(table: TableConfig) -> str | None:
    """Why a configured table cannot be mirrored (no key and not append-only), or None."""
    if table.is_keyed or table.append_only:
        return None
    return (
        f"{table.source} has no primary key: skipped (declare primary_key, or append_only: true "
        "to keep every change row)"
    )


def group_by_table(
    config: PipelineConfig, files: Iterable[BronzeFile], report: RunReport
) -> list[tuple[TableConfig, list[BronzeFile]]]:
    """CDC files per configured table in apply order; others are reported, never dropped silently."""
    grouped: dict[str, tuple[TableConfig, list[BronzeFile]]] = {}
    for file in sorted(files):
        if file.is_multi_table:
            # Which tables a transaction-ordered file holds is known only once it is read:
            # every configured table reads it and keeps its own rows.
            for reader in config.tables:
                if skip_reason(reader) is None:
                    grouped.setdefault(reader.source, (reader, []))[1].append(file)
            continue
        table = config.table_for_source(file.schema, file.table)
        if table is None:
            if file.source not in report.unconfigured:
                report.unconfigured.append(file.source)
            continue
        if reason := skip_reason(table):
            if reason not in report.skipped_tables:
                report.skipped_tables.append(reason)
            continue
        grouped.setdefault(table.source, (table, []))[1].append(file)
    return list(grouped.values())


def superseded_cdc_files(listing: BronzeListing, table: TableConfig, watermark: str | None) -> list[BronzeFile]:
    """CDC files a full load already contains: those written before its earliest row was read.

    A CDC file is named by the time DMS wrote it, after every change in it was committed; a file
    written before the load's timestamp (the transfer time, or the task start time with
    UseTaskStartTimeForFullLoadTimestamp) holds only changes the load already reflects. They are
    recorded as applied with the load, so a reload never replays older changes over newer rows.
    Without a timestamp column there is no watermark and no file is superseded.
    """
    if not watermark:
        return []
    digits = "".join(ch for ch in watermark if ch.isdigit())
    stamp = f"{digits[:8]}-{digits[8:18]}"  # the yyyyMMdd-HHmmssffff form of DMS CDC file names
    cdc = listing.for_table(table.source_schema, table.source_table, FileKind.CDC)
    return [f for f in cdc if f.sort_key[2] < stamp]


def files_from_keys(store: BronzeStore, keys: Iterable[str], transaction_path: str | None = None) -> list[BronzeFile]:
    """Turn keys or full URIs (``s3://bucket/prefix/...`` or paths under the store root) into files.

    Sizes come from the store itself (a missing object is an error), never from the caller.
    """
    files = []
    root = store.root.rstrip("/") + "/"
    for key in keys:
        relative = key[len(root) :] if key.startswith(root) else key.lstrip("/")
        size = store.size(relative)
        if size is None:
            raise BronzeError(f"The CDC file {key} is not in bronze ({store.root}).")
        files.append(parse_key(relative, size, transaction_path))
    return files


@dataclass(frozen=True)
class ReplaySelection:
    """Which CDC files a replay applies again: named keys, the quarantine, and/or a time range."""

    keys: frozenset[str] = frozenset()
    quarantined: bool = False
    since: str | None = None  # YYYY-MM-DDTHH:MM, compared with the DMS file-name timestamp
    until: str | None = None

    def choose(self, files: Sequence[BronzeFile], held: frozenset[str]) -> list[BronzeFile]:
        low, high = file_name_stamp(self.since), file_name_stamp(self.until)
        return [
            f
            for f in files
            if (not self.keys or f.key in self.keys)
            and (not self.quarantined or f.key in held)
            and (low is None or f.sort_key[2] >= low)
            and (high is None or f.sort_key[2] < high)
        ]


def file_name_stamp(moment: str | None) -> str | None:
    """``YYYY-MM-DDTHH:MM[:SS]`` -> the ``yyyyMMdd-HHmmss`` prefix DMS CDC file names start with."""
    if moment is None:
        return None
    try:
        parsed = datetime.fromisoformat(moment)
    except ValueError:
        raise ConfigError(f"'{moment}' is not a time like 2024-03-01T12:00.") from None
    return parsed.strftime("%Y%m%d-%H%M%S")


def batches(files: Sequence[BronzeFile], size: int) -> list[list[BronzeFile]]:
    """``files`` cut into consecutive batches of at most ``size``, in apply order."""
    return [list(files[start : start + size]) for start in range(0, len(files), size)]
