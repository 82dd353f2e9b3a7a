"""The change stream of ``cdclake capture``: pgoutput messages -> per-table CDC files in the bronze
layout, and the slot advanced once they are durable (``ChangeCapture``).

``capture`` (the command's run: the initial load, tables added, removed or reloaded) hands it a
connection whose slot is ready; docs/capture.md explains the design.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cdclake.config import parse_config
from cdclake.dms.cut_request import read_request
from cdclake.dms.layout import DMS_OP_COLUMN
from cdclake.dms.progress import PROGRESS_KEY, CaptureProgress, TableProgress
from cdclake.dms.store import LocalBronze
from cdclake.dms.writer import Value, csv_text, write_durably
from cdclake.sources.postgres.catalog import SourceColumn, SourceTable, column_of_type, declare_columns, value_text
from cdclake.sources.postgres.pgoutput import (
    UNCHANGED_TOAST,
    Begin,
    ColumnValue,
    Commit,
    Relation,
    RowChange,
    Truncate,
    decode,
    format_lsn,
    parse_lsn,
)
from cdclake.sources.postgres.problems import CaptureError
from cdclake.sources.postgres.settings import CaptureReport, CaptureSettings
from cdclake.sources.postgres.snapshot import decoded_publications
from cdclake.sources.postgres.state import (
    CaptureState,
    TableFolder,
    change_sequence,
    column_signature,
    state_path,
    timestamp_text,
)

log = logging.getLogger("cdclake.capture")


Layout = tuple[str, ...]  # the source columns of a change, in its Relation message's order


class _UnloggedValue(Exception):
    """An update's new row lacks a value PostgreSQL did not log (unchanged TOAST, no full identity)."""

    def __init__(self, column: str) -> None:
        super().__init__(column)
        self.column = column


@dataclass
class _Transaction:
    commit_lsn: int
    commit_ts: str
    records: dict[str, list[tuple[Layout, list[Value]]]] = field(default_factory=dict)  # table -> CDC records
    position: int = 0


def file_columns(layouts: Sequence[Layout]) -> Layout:
    """The columns of a file holding records of ``layouts``: their union, in order of appearance.

    One layout unless a transaction changed the table's columns between two of its changes (a
    file is never cut inside a transaction); a record lacking a column then has NULL there.
    """
    return tuple(dict.fromkeys(name for layout in layouts for name in layout))


def render_records(columns: Layout, records: Sequence[tuple[Layout, list[Value]]]) -> str:
    """CDC records (``Op``, timestamp, the values of their layout, sequence) as CSV rows of ``columns``."""
    rows = []
    for layout, record in records:
        if layout == columns:
            rows.append(record)
            continue
        values = dict(zip(layout, record[2:-1], strict=True))
        rows.append([*record[:2], *(values.get(c) for c in columns), record[-1]])
    return csv_text(rows)


class ChangeCapture:
    """Turns pgoutput messages into per-table CDC files and advances the slot once they are durable.

    Files have a header row (DMS's AddColumnName): ``Op``, the timestamp column, the table's
    columns as the Relation messages of their changes give them, the change-sequence column. A
    table's buffer is written out before a transaction with other columns is added to it, so
    every file has one header and a schema change starts a new file. When a Relation message shows
    new columns or types, capture first writes what it buffered with the old columns, then
    declares the new types in the table configuration (the engine casts CSV values to declared
    types), then records the layout in its state.
    """

    def __init__(self, settings: CaptureSettings, state: CaptureState, conn: Any) -> None:
        self.settings = settings
        self.conn = conn
        self.state = state
        self.tables = {t.qualified: t for t in state.tables}
        self.folders = {name: TableFolder.scan(settings.bronze / t.schema / t.name) for name, t in self.tables.items()}
        self.relations: dict[int, tuple[SourceTable, tuple[SourceColumn, ...]]] = {}
        self.types: dict[tuple[str, int, int], SourceColumn] = {}
        self.buffers: dict[str, list[str]] = {}
        self.buffer_columns: dict[str, Layout] = {}  # table -> the header of its buffered file
        self.buffer_bytes: dict[str, int] = {}
        self.buffer_last: dict[str, tuple[str, int]] = {}  # table -> (commit ts, commit LSN) of its last change
        self.buffered_since: float | None = None
        self.through_lsn = 0  # end of the last commit seen (buffered or nothing to buffer)
        self.confirmed_lsn = self._confirmed_lsn()
        self.report = CaptureReport()
        self.transaction: _Transaction | None = None
        self.new_commits = 0
        # the progress record last written (``dms.progress``): its commit time never goes back
        progress_file = settings.bronze / PROGRESS_KEY
        self.progress = CaptureProgress.from_json(progress_file.read_text("utf-8")) if progress_file.exists() else None
        self.last_commit_ts = self.progress.commit_ts if self.progress else None

    def _confirmed_lsn(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (self.settings.slot,)
            )
            row = cur.fetchone()
        if row is None:
            raise CaptureError(
                f"The replication slot {self.settings.slot} is gone, so changes since the last capture are lost. "
                f"Start over: delete {state_path(self.settings)} and the bronze folders, then capture again."
            )
        return parse_lsn(row[0])

    # ----------------------------------------------------------------- decoding

    def _column(self, name: str, type_oid: int, type_modifier: int) -> SourceColumn:
        key = (name, type_oid, type_modifier)
        if key not in self.types:
            with self.conn.cursor() as cur:
                self.types[key] = column_of_type(cur, name, type_oid, type_modifier)
        return self.types[key]

    def _relation(self, message: Relation) -> None:
        table = self.tables.get(f"{message.schema}.{message.table}")
        if table is None:
            return
        columns = tuple(self._column(c.name, c.type_oid, c.type_modifier) for c in message.columns)
        self.relations[message.relation_id] = (table, columns)
        txn = self.transaction
        if txn is None:
            return  # a transaction this run has handled already (peek re-reads unconfirmed changes)
        if [column_signature(c) for c in columns] == [column_signature(c) for c in table.columns]:
            return
        if txn.commit_lsn < self.state.layout_lsns.get(table.qualified, 0):
            return  # re-read history: the table has had newer columns since
        self._schema_change(table, columns, txn.commit_lsn)

    def _schema_change(self, table: SourceTable, columns: tuple[SourceColumn, ...], commit_lsn: int) -> None:
        before = {c.name: c for c in table.columns}
        added = [c for c in columns if c.name not in before]
        retyped = [c for c in columns if c.name in before and column_signature(c) != column_signature(before[c.name])]
        dropped = [name for name in before if name not in {c.name for c in columns}]
        log.warning(
            "schema change table=%s added=%s type changed=%s dropped=%s",
            table.qualified,
            [f"{c.name} {c.spark_type}" for c in added],
            [f"{c.name} {before[c.name].spark_type}->{c.spark_type}" for c in retyped],
            dropped,
        )
        if table.qualified in self.buffers:
            self._write_table(table.qualified)  # changes with the old columns go out first
        declare = {c.name: c.spark_type for c in (*added, *retyped)}
        if declare:
            self._declare(table, declare)
        updated = replace(table, columns=columns)
        self.tables[table.qualified] = updated
        self.state.tables = [updated if t.qualified == table.qualified else t for t in self.state.tables]
        self.state.layout_lsns[table.qualified] = commit_lsn
        write_durably(state_path(self.settings), self.state.to_json().encode("utf-8"))

    def _declare(self, table: SourceTable, types: dict[str, str]) -> None:
        """Declare ``types`` for ``table`` in the table configuration, before any file holds them."""
        path = self.settings.config_path
        if path is None or not path.exists():
            log.warning(
                "table %s: no configuration to declare %s in: CSV values are read as strings", table.qualified, types
            )
            return
        text = path.read_text("utf-8")
        updated = declare_columns(text, table.qualified, types)
        if updated is None:
            log.warning(
                "table %s: %s has no columns mapping to declare %s in: CSV values are read as strings",
                table.qualified, path, types,
            )  # fmt: skip
            return
        if updated != text:
            parse_config(updated, str(path))  # never write a configuration the engine cannot read
            write_durably(path, updated.encode("utf-8"))
            log.warning("table %s: declared %s in %s", table.qualified, types, path)

    def _row(
        self,
        table: SourceTable,
        columns: tuple[SourceColumn, ...],
        values: tuple[ColumnValue, ...] | None,
        fallback: tuple[ColumnValue, ...] | None,
    ) -> list[Value]:
        row: list[Value] = []
        for position, column in enumerate(columns):
            value = None if values is None else values[position]
            if value is UNCHANGED_TOAST:
                value = fallback[position] if fallback is not None else UNCHANGED_TOAST
                if value is UNCHANGED_TOAST:
                    raise _UnloggedValue(column.name)
            row.append(None if value is None else value_text(column.pg_type)(str(value)))
        return row

    def _change(self, message: RowChange) -> None:
        txn = self.transaction
        mapped = self.relations.get(message.relation_id)
        if txn is None or mapped is None:
            return
        table, columns = mapped
        if txn.commit_lsn <= self.folders[table.qualified].durable_lsn:
            self.report.skipped_changes += 1
            return
        if txn.commit_lsn >= self.state.held.get(table.qualified, (1 << 64, ""))[0]:
            self.report.held_changes += 1
            return
        if table.qualified in self.state.reloads:
            return  # loaded again (capture --reload): its snapshot will hold this change
        if txn.commit_lsn < self.state.load_lsns.get(table.qualified, 0):
            return  # committed before the snapshot a table added later was loaded from: in its LOAD files
        try:
            self._records(txn, table, columns, message)
        except _UnloggedValue as unlogged:
            self._hold(txn, table, unlogged.column)

    def _hold(self, txn: _Transaction, table: SourceTable, column: str) -> None:
        """Stop capturing ``table`` from this transaction on (its earlier changes in it are dropped
        too: silver stays at a whole transaction), durably; the other tables go on."""
        reason = (
            f"an update (commit LSN {format_lsn(txn.commit_lsn)}) left the large (TOASTed) value of column {column} "
            "unchanged, and PostgreSQL logs no such value without REPLICA IDENTITY FULL: this table's changes from "
            f"then on are not captured. Fix: ALTER TABLE {table.qualified} REPLICA IDENTITY FULL, then "
            f"`cdclake capture --reload {table.qualified}` and `cdclake run` (the table is loaded again)"
        )
        self.report.held_changes += len(txn.records.pop(table.qualified, [])) + 1
        self.state.held[table.qualified] = (txn.commit_lsn, reason)
        write_durably(state_path(self.settings), self.state.to_json().encode("utf-8"))
        log.error("table %s held: %s", table.qualified, reason)

    def _records(
        self, txn: _Transaction, table: SourceTable, columns: tuple[SourceColumn, ...], message: RowChange
    ) -> None:
        """Add the CDC records of one row change to the transaction (an update of the key: D + I)."""
        layout = tuple(c.name for c in columns)
        full_old = message.old if message.old is not None and not message.old_is_key else None
        if message.op == "D":
            rows = [("D", self._row(table, columns, message.old, None))]
        else:
            new = self._row(table, columns, message.new, full_old)
            rows = [(message.op, new)]
            if message.op == "U" and message.old is not None and table.primary_key:
                old = self._row(table, columns, message.old, None)
                key = [i for i, name in enumerate(layout) if name in table.primary_key]
                if any(old[i] != new[i] for i in key):
                    if message.old_is_key:  # only the key was logged: the rest of the old row is unknown
                        old = [v if i in key else None for i, v in enumerate(old)]
                    rows = [("D", old), ("I", new)]
        for op, row in rows:
            txn.position += 1
            record: list[Value] = [op, txn.commit_ts, *row, change_sequence(txn.commit_lsn, txn.position)]
            txn.records.setdefault(table.qualified, []).append((layout, record))

    def _commit(self, message: Commit) -> None:
        txn, self.transaction = self.transaction, None
        if txn is None:
            return
        self.new_commits += 1
        for table, records in txn.records.items():
            columns = file_columns([layout for layout, _ in records])
            if table in self.buffers and self.buffer_columns[table] != columns:
                self._write_table(table)  # one header per file: other columns start a new file
            text = render_records(columns, records)
            self.buffers.setdefault(table, []).append(text)
            self.buffer_columns[table] = columns
            self.buffer_bytes[table] = self.buffer_bytes.get(table, 0) + len(text.encode("utf-8"))
            self.buffer_last[table] = (txn.commit_ts, txn.commit_lsn)
            self.report.changes += len(records)
        if txn.records:
            self.report.transactions += 1
            if self.buffered_since is None:
                self.buffered_since = time.monotonic()
        self.through_lsn = message.end_lsn
        self.last_commit_ts = max(filter(None, (self.last_commit_ts, txn.commit_ts)))
        if any(size >= self.settings.min_file_size for size in self.buffer_bytes.values()):
            self.flush()

    def handle(self, payload: bytes) -> None:
        message = decode(payload)
        if isinstance(message, Begin):
            if message.final_lsn < max(self.through_lsn, self.confirmed_lsn):
                self.transaction = None  # buffered already in this run (peek re-reads unconfirmed changes)
                return
            self.transaction = _Transaction(message.final_lsn, timestamp_text(message.commit_ts))
        elif isinstance(message, Relation):
            self._relation(message)
        elif isinstance(message, RowChange):
            self._change(message)
        elif isinstance(message, Commit):
            self._commit(message)
        elif isinstance(message, Truncate):
            log.warning("a TRUNCATE is not captured (relation ids %s): silver keeps the rows", message.relation_ids)

    # ----------------------------------------------------------------- writing

    def due(self) -> bool:
        return (
            self.buffered_since is not None
            and time.monotonic() - self.buffered_since >= self.settings.max_batch_interval
        )

    def _write_table(self, table: str) -> None:
        """Write ``table``'s buffered changes as one CDC file (header row first)."""
        texts = self.buffers.pop(table)
        columns = self.buffer_columns.pop(table)
        size = self.buffer_bytes.pop(table)
        commit_ts, commit_lsn = self.buffer_last.pop(table)
        folder = self.folders[table]
        name = folder.next_name(commit_ts, commit_lsn)
        settings = self.settings
        header = csv_text([[DMS_OP_COLUMN, settings.timestamp_column, *columns, settings.change_sequence_column]])
        write_durably(folder.path / name, (header + "".join(texts)).encode("utf-8"))
        folder.last_stamp, folder.durable_lsn = name[: -len(".csv")][:-20], commit_lsn
        self.report.cdc_files += 1
        self.report.files.append(str((folder.path / name).relative_to(settings.bronze)))
        log.info("cdc file table=%s file=%s bytes=%d", table, name, size)

    def flush(self) -> None:
        """Write every buffered table as one CDC file, then confirm the slot up to the last commit."""
        for table in sorted(self.buffers):
            self._write_table(table)
        self.buffered_since = None
        self.write_progress()
        self.confirm(self.through_lsn)

    # ----------------------------------------------------------------- progress (``dms.progress``)

    def write_progress(self) -> None:
        """Record in bronze that every change committed up to ``through_lsn`` is there, with every
        captured table's newest file (changed or not). Called only with nothing buffered, after the
        files are durable; written only when it says something new."""
        if self.buffers:
            return
        bronze = self.settings.bronze
        tables = {}
        for name in self.tables:
            folder = self.folders[name]
            newest = (
                str((folder.path / f"{folder.last_stamp}{folder.durable_lsn:020d}.csv").relative_to(bronze))
                if folder.last_stamp
                else None
            )
            held = self.state.held.get(name)
            tables[name] = TableProgress(
                newest, self.state.load_lsns.get(name, 0), held[1] if held else None, name in self.state.reloads
            )
        lsn = max(self.through_lsn, self.progress.position if self.progress else 0)
        record = CaptureProgress(lsn, format_lsn(lsn), self.last_commit_ts, tables)
        if self.progress is not None and replace(self.progress, written_at="") == record:
            return
        stamped = replace(record, written_at=datetime.now(UTC).isoformat())
        write_durably(bronze / PROGRESS_KEY, stamped.to_json().encode("utf-8"))
        self.progress = record

    def confirm(self, lsn: int) -> None:
        """Move the slot to ``lsn`` (everything committed before it is durable in bronze)."""
        if lsn <= self.confirmed_lsn or self.buffers:
            return
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.settings.slot, format_lsn(lsn)))
        self.confirmed_lsn = lsn

    def poll(self) -> int:
        """Decode everything committed up to now (or up to a position ``verify --cut`` asked capture to stop
        at, ``dms.cut_request``); return the number of transactions not seen before."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_flush_lsn()")  # decoding reads flushed WAL only
            wal_end = parse_lsn(cur.fetchone()[0])
        stop = self._stop_at(wal_end)
        if stop is not None and self.progress is not None and stop == self.progress.position and not self.buffers:
            return 0  # held at the position asked for, until the request is withdrawn or expires
        upto = wal_end if stop is None else stop
        publications = ",".join(decoded_publications(self.settings, self.state))
        seen = self.new_commits
        self.conn.autocommit = False  # a named (server-side) cursor streams rows inside a transaction
        with self.conn.cursor(name="cdclake_peek") as cur:
            cur.itersize = 2000
            cur.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
                "'proto_version', '1', 'publication_names', %s)",
                (self.settings.slot, format_lsn(upto), publications),
            )
            for (data,) in cur:
                self.handle(bytes(data))
        self.conn.commit()
        self.conn.autocommit = True
        if stop is not None:
            # Every commit before the position has been seen: write every buffered table and the progress
            # record there, whatever the batch interval, so the next round's cut is at it.
            self.through_lsn = max(self.through_lsn, stop)
            self.flush()
            log.info("capture stopped at LSN %s, as verify --cut asked; it holds there", format_lsn(stop))
        else:
            # Every commit up to wal_end has been seen (buffered, or nothing to buffer): the next flush's
            # progress record stands there, past a table loaded again just before this poll.
            self.through_lsn = max(self.through_lsn, wal_end)
            if not self.buffers:
                self.write_progress()
                self.confirm(self.through_lsn)
        return self.new_commits - seen

    def _stop_at(self, wal_end: int) -> int | None:
        """The position a standing ``verify --cut`` request asks capture to stop at (None: none, expired, or
        one capture has already passed and cannot stop at)."""
        request = read_request(LocalBronze(self.settings.bronze))
        if request is None or not request.active():
            return None
        reached = max(self.through_lsn, self.confirmed_lsn, self.progress.position if self.progress else 0)
        if request.position < reached or request.position > wal_end:
            return None  # passed already (verify asks again), or not yet in the log that decoding reads
        return request.position
