"""Select: which bronze files each table still needs, from one listing and the ledger (pure).

Nothing here reads or writes a table: the callers read each table's ledger and quarantine once
(``TableState``) and hand the state back after every commit (``TableState.after``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from cdclake.config import PipelineConfig, TableConfig
from cdclake.dms.files import BronzeFile, BronzeListing, FileKind, parse_key
from cdclake.dms.index import folder_of, in_time_order
from cdclake.dms.store import BronzeStore
from cdclake.errors import BronzeError, ConfigError, LoadFilesConflictError
from cdclake.lake.ledger_record import AppliedKeys, LedgerCheckpoint, LoadedFile
from cdclake.report import RunReport


@dataclass(frozen=True)
class TableState:
    """What silver holds of one table: read once per run, then carried forward from each commit."""

    full_load_done: bool
    applied: AppliedKeys  # bronze keys in the ledger (compacted: ``lake.ledger_record.AppliedKeys``)
    held: frozenset[str]  # bronze keys in quarantine (applied only by a replay)
    # what the last full load recorded, by key: its LOAD files (with their sizes and versions
    # where the ledger has them) and the CDC files it superseded
    loaded: Mapping[str, LoadedFile] = field(default_factory=dict)
    # the silver snapshot this state describes (None: no table yet): a batch planned from it
    # commits only while the table is still there, so a commit by another writer in between
    # (another loop, a Glue run) is a conflict, and the state is read again (``engine.cdc``)
    snapshot_id: int | None = None
    # CDC files were applied since the last full load (None: whatever ``applied`` names beyond ``loaded``)
    cdc_since_load: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "applied", AppliedKeys.of(self.applied))

    @classmethod
    def after_load(
        cls, loaded: Iterable[BronzeFile], held: frozenset[str], snapshot_id: int | None = None
    ) -> TableState:
        """The state once a full load committed ``loaded`` (its LOAD files and the CDC files it
        superseded) in ``snapshot_id`` (its record), with ``held`` still in quarantine."""
        recorded = loaded_files(loaded)
        keys = AppliedKeys(frozenset(f.key for f in recorded))
        return cls(True, keys, held, {f.key: f for f in recorded}, snapshot_id, cdc_since_load=False)

    @property
    def cdc_applied(self) -> bool:
        """Whether CDC files were applied since the last full load."""
        if self.cdc_since_load is not None:
            return self.cdc_since_load
        return bool(self.applied.keys - self.loaded.keys())

    def checkpoint(self) -> LedgerCheckpoint:
        """The ledger as this state knows it, compacted, to store with the next commit: its LOAD
        files by name (the CDC files a load superseded are keys like the others)."""
        loads = {k: f for k, f in self.loaded.items() if k.rsplit("/", 1)[-1].startswith("LOAD")}
        return LedgerCheckpoint(self.applied, self.full_load_done, self.cdc_applied, loads)

    def compacted(self, listed: Iterable[BronzeFile], below: str) -> TableState:
        """This state with its applied keys compacted over ``listed`` (``compact_applied``)."""
        return replace(self, applied=compact_applied(self.applied, self.held, listed, below))

    def reopened(self, keys: Iterable[str]) -> TableState:
        """These keys pending again although a watermark covers them (a file that landed in bronze
        after the watermark passed its name: never listed, so never applied)."""
        applied = self.applied
        covered = frozenset(k for k in keys if applied.covered(k) and k not in applied.keys)
        return replace(self, applied=replace(applied, exceptions=applied.exceptions | covered))

    def pending(self, files: Iterable[BronzeFile], force: bool = False) -> list[BronzeFile]:
        """``files`` not applied and not held, in apply order (``force``: all of them)."""
        return sorted({f for f in files if force or (f.key not in self.applied and f.key not in self.held)})

    def after(
        self,
        applied: Iterable[str] = (),
        held: Iterable[str] = (),
        released: Iterable[str] = (),
        snapshot_id: int | None = None,
    ) -> TableState:
        """The state once a commit applied, quarantined or released these keys (``snapshot_id``:
        the silver snapshot that commit made; None: it made none)."""
        applied = frozenset(applied)
        return replace(
            self,
            applied=self.applied | applied,
            held=(self.held | frozenset(held)) - frozenset(released) - applied,
            snapshot_id=self.snapshot_id if snapshot_id is None else snapshot_id,
            cdc_since_load=True if applied else self.cdc_since_load,
        )


def compact_applied(
    applied: AppliedKeys, held: frozenset[str], listed: Iterable[BronzeFile], below: str
) -> AppliedKeys:
    """``applied`` with each listed folder's watermark advanced over its contiguous applied prefix.

    ``listed``: the table's CDC files as listed from its watermarks (every key after them that
    bronze holds). In each folder whose listed files are in time order (key order is write order:
    no ``DDMMYYYY`` date folders), the keys after the watermark — listed or named applied — are
    walked in key order: the watermark moves over each applied key, and over each held one (kept
    as an exception: not applied), and stops at the first other one (pending) or at a file named
    ``below`` or later (a CDC stamp, ``yyyyMMdd-HHmmss``: the look-back, within which a file may
    still land late with an older name). The applied keys it passed are no longer named.
    """
    by_folder: dict[str, list[BronzeFile]] = {}
    for file in listed:
        if file.kind is FileKind.CDC:
            by_folder.setdefault(folder_of(file), []).append(file)
    watermarks = dict(applied.watermarks)
    exceptions = set(applied.exceptions)
    for folder, files in by_folder.items():
        if not all(in_time_order(f, folder) for f in files):
            continue
        prefix = folder + "/"
        stamps = {f.key: f.sort_key[2] for f in files}
        for key in applied.keys:
            if key.startswith(prefix) and key not in stamps and (stamp := _cdc_stamp(key)) is not None:
                stamps[key] = stamp
        mark = watermarks.get(folder)
        for key in sorted(stamps):
            if mark is not None and key <= mark:
                continue
            if stamps[key] >= below:
                break
            if key in applied.keys:
                mark = key
            elif key in held:
                mark = key
                exceptions.add(key)
            else:
                break
        if mark is not None:
            watermarks[folder] = mark
    compacted = AppliedKeys(applied.keys, watermarks, frozenset(exceptions))
    named = frozenset(k for k in applied.keys if not compacted.covered(k))
    return AppliedKeys(named, watermarks, compacted.exceptions, len(applied))


def _cdc_stamp(key: str) -> str | None:
    """The write-time stamp of a CDC key (``BronzeFile.sort_key``'s), None for another key."""
    try:
        file = parse_key(key)
    except ValueError:
        return None
    return file.sort_key[2] if file.kind is FileKind.CDC else None


def look_back_stamp(now: datetime, look_back_seconds: float) -> str:
    """The CDC stamp (``yyyyMMdd-HHmmss``, UTC) a watermark stays below: ``now`` less the look-back."""
    return (now - timedelta(seconds=look_back_seconds)).strftime("%Y%m%d-%H%M%S")


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


def unloaded_load_files(state: TableState, loads: Iterable[BronzeFile]) -> list[BronzeFile]:
    """The LOAD files of a loaded table that its last full load does not hold: not recorded, or
    recorded with another size (DMS wrote the name again: a reload restarts the counter) or another
    version (written again in place with the same size: a modification time or ETag of its own).

    Where the ledger or the listing has no version (ledgers from before versions were kept), a
    file written again with the very same size is not told apart; ``cdclake full-load --reload``
    loads it. Before a full load, nothing is "unloaded": the whole load is pending.
    """
    if not state.full_load_done:
        return []
    return sorted(f for f in loads if f.key not in state.loaded or not state.loaded[f.key].holds(f.size, f.version))


def loaded_files(files: Iterable[BronzeFile]) -> tuple[LoadedFile, ...]:
    """What a full load records of ``files``: each LOAD file with its size and version (which tell
    it from the same name written again), each CDC file it superseded by its key alone."""
    return tuple(
        LoadedFile(f.key, f.size, f.version) if f.kind is FileKind.FULL_LOAD else LoadedFile(f.key) for f in files
    )


def load_due(table: TableConfig, state: TableState, loads: Sequence[BronzeFile]) -> str | None:
    """Why the table needs a (re)load from ``loads`` (its LOAD files in bronze) before its CDC, or
    None: never loaded and LOAD files present, or loaded and ``load_again`` says so. (A table
    never loaded without LOAD files needs no scan: it is created empty or by its first CDC batch.)"""
    if state.full_load_done:
        return load_again(table, state, loads)
    if loads:
        return f"not loaded yet: {len(loads)} LOAD file(s) in bronze"
    return None


def load_again(table: TableConfig, state: TableState, loads: Sequence[BronzeFile]) -> str | None:
    """Why a loaded table must be loaded again from ``loads`` (its LOAD files in bronze), or None.

    - No CDC applied since the last full load: the new LOAD files complete it (a load that was
      still being written, or a table that had none): all of ``loads`` are loaded, in one replace.
    - CDC applied and none of the loaded files left as they were: a DMS reload ("Reload table
      data" writes the table's LOAD files again from LOAD00000001): the table is replaced by
      them; CDC files written before the reload's rows were read are superseded by it, later
      ones are applied after it as usual.
    - CDC applied and new LOAD files beside unchanged loaded ones: that is a late part of the old
      load or a reload next to stale files, which cannot be told apart: LoadFilesConflictError
      (nothing applied) naming the files and the command to run.
    """
    new = unloaded_load_files(state, loads)
    if not new:
        return None
    names = ", ".join(f.name for f in new)
    if not state.cdc_applied:
        return f"LOAD files new since the full load, loaded with the others: {names}"
    kept = [f for f in loads if f not in new]
    if not kept:
        return f"a reload: LOAD files written again since the full load replace the table: {names}"
    raise LoadFilesConflictError(
        f"Table {table.source}: bronze holds LOAD files its full load did not ({names}) beside ones it loaded "
        f"({', '.join(f.name for f in kept)}), and CDC files were applied since, so they are either a late part "
        "of the old load or a reload beside stale files; nothing was applied: if the LOAD files in bronze are "
        f"the table's whole content now, run `cdclake full-load --table {table.source} --reload`, else remove "
        "the stray ones."
    )


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


def batches(files: Sequence[BronzeFile], size: int, max_bytes: int | None = None) -> list[list[BronzeFile]]:
    """``files`` cut into consecutive batches of at most ``size`` files and ``max_bytes`` bytes, in
    apply order; a file larger than ``max_bytes`` is a batch of its own."""
    cut: list[list[BronzeFile]] = []
    total = 0
    for file in files:
        if not cut or len(cut[-1]) >= size or (max_bytes is not None and total + file.size > max_bytes):
            cut.append([])
            total = 0
        cut[-1].append(file)
        total += file.size
    return cut
