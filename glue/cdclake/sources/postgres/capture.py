"""``cdclake capture``: PostgreSQL logical decoding -> DMS-format files in the bronze layout.

What stands in for AWS DMS on one machine. The design, and why:

* **Plugin: pgoutput.** It ships with the server (nothing to install next to PostgreSQL), its
  message format is specified in PostgreSQL's documentation, values arrive as each type's text
  output (the same text ``COPY ... TO STDOUT`` gives the full load, so one conversion serves both),
  numerics stay exact, and updates that change the key carry the old key. A publication chooses
  the tables: keyed tables publish insert, update and delete; tables without a primary key go to
  a second publication that publishes inserts only (publishing their updates would make UPDATE
  fail at the source, which has no replica identity for them), and become ``append_only: true``.
* **Reading: ``pg_logical_slot_peek_binary_changes``, then ``pg_replication_slot_advance``.** Peek
  never consumes; the slot moves only after the files holding the changes are durable (written to
  a temporary name, fsynced, renamed, directory fsynced). A stop or crash at any point re-reads
  from the slot's confirmed position.
* **No duplicates in effect.** A CDC file is named ``<yyyyMMdd-HHmmssSSSS><commit LSN, 20 digits>``
  after its last change, so each table's folder records the newest commit LSN that is durable for
  it; changes at or below it are skipped when re-read. Names are fixed width and strictly
  increase per table (the time part never goes backwards), so they sort in write order.
* **Snapshot handoff.** ``CREATE_REPLICATION_SLOT ... LOGICAL pgoutput EXPORT_SNAPSHOT`` on a
  replication connection returns the slot's consistent point and a snapshot of exactly the data
  committed before it; the full load reads every table in that snapshot (``SET TRANSACTION
  SNAPSHOT``), and decoding returns exactly the transactions that commit after it.
* **Change sequence** (the ``AR_H_CHANGE_SEQ`` column): the commit LSN (20 decimal digits) and the
  change's position in its transaction (10 digits): fixed width, unique, increasing in commit order.
* **Key changes.** An update that changes the primary key is written as a ``D`` of the old key and
  an ``I`` of the new row (same commit time, consecutive sequence numbers): silver tables are keyed,
  so an ``U`` would leave the old key behind.
* **Unchanged TOAST values.** PostgreSQL does not log a large value an update left unchanged; with
  ``REPLICA IDENTITY FULL`` it is taken from the old row, otherwise capture stops and says so
  (writing NULL would silently corrupt silver).
* **Batching** like DMS: all buffered changes are written when one table's buffer reaches
  ``min_file_size`` or the oldest buffered change is ``max_batch_interval`` seconds old (and at the
  end of a ``--once`` run). Files are only ever cut between transactions.
* **Schema changes** follow the Relation messages pgoutput sends before a table's first change
  after each DDL (and at the start of every decoding session): every file has a header row
  (DMS's AddColumnName) naming the columns of its changes, a new column layout starts a new file,
  and the types of added or re-typed columns are declared in the table configuration before the
  first file that holds them (CSV values are text; the engine casts them to declared types).

Not captured: TRUNCATE (not published; ``cdclake verify`` shows the difference), and the values
an ``ADD COLUMN ... DEFAULT`` gives existing rows (PostgreSQL logs no change for them).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from cdclake.config import parse_config
from cdclake.dms.layout import DMS_OP_COLUMN
from cdclake.dms.writer import Value, cdc_file_name, csv_text, load_file_name
from cdclake.errors import CdclakeError
from cdclake.identifiers import IDENTIFIER, quote_pg
from cdclake.sources.postgres.catalog import (
    SESSION_SETTINGS,
    SourceColumn,
    SourceTable,
    column_of_type,
    configuration_yaml,
    declare_columns,
    read_tables,
    value_text,
)
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

log = logging.getLogger("cdclake.sources.postgres.capture")

_CAPTURED_NAME = re.compile(r"^(\d{8}-\d{10})(\d{20})\.csv$")


class CaptureError(CdclakeError):
    """Capture cannot go on without losing or corrupting changes (the message says what to do)."""


@dataclass(frozen=True)
class CaptureSettings:
    """Everything ``capture`` needs; every knob has a default."""

    dsn: str  # libpq connection string; empty: the PG* environment variables
    bronze: Path  # the bronze root: files go to <bronze>/<schema>/<table>/
    state_dir: Path  # where the capture keeps its slot name, tables and full-load status
    slot: str = "cdclake"
    publication: str = "cdclake"  # keyless tables use "<publication>_inserts"
    schemas: tuple[str, ...] = ("public",)  # tables of these schemas, unless `tables` names them
    tables: tuple[str, ...] = ()  # schema.table
    follow: bool = False  # keep capturing until stopped (else: capture what is pending, then exit)
    max_batch_interval: float = 60.0  # seconds (DMS CdcMaxBatchInterval)
    min_file_size: int = 32_000 * 1024  # bytes (DMS CdcMinFileSize, which is in KB)
    poll_interval: float = 1.0  # seconds between polls when nothing is pending (--follow)
    rows_per_load_file: int = 500_000
    timestamp_column: str = "dms_commit_ts"
    change_sequence_column: str = "AR_H_CHANGE_SEQ"
    config_path: Path | None = None  # write the table configuration here at the first capture
    silver_database: str | None = None  # default: the source database's name


@dataclass
class CaptureReport:
    load_files: int = 0
    load_rows: int = 0
    cdc_files: int = 0
    changes: int = 0
    transactions: int = 0
    skipped_changes: int = 0  # already durable in bronze (re-read after a stop or crash)
    confirmed_lsn: str = ""
    files: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- connections


def connect(dsn: str, replication: bool = False) -> Any:
    """A psycopg2 connection with the output settings values are read with."""
    import psycopg2
    import psycopg2.extras

    options = " ".join(f"-c {k}={v.replace(' ', '')}" for k, v in SESSION_SETTINGS.items())
    try:
        if replication:
            return psycopg2.connect(
                dsn, options=options, connection_factory=psycopg2.extras.LogicalReplicationConnection
            )
        conn = psycopg2.connect(dsn, options=options)
        conn.autocommit = True  # transactions are opened explicitly where they matter
    except psycopg2.OperationalError as exc:
        raise CaptureError(f"Cannot connect to PostgreSQL ({dsn or 'PG* environment'}): {exc}".strip()) from None
    conn.set_client_encoding("UTF8")
    return conn


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
        return cls(data["slot"], tables, data["full_load_done"], data["consistent_point"], data.get("layout_lsns", {}))


def write_durably(path: Path, data: bytes) -> None:
    """Write ``path`` atomically: a temporary name, fsync, rename, fsync of the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def _state_path(settings: CaptureSettings) -> Path:
    return settings.state_dir / f"{settings.slot}.json"


def _signature(column: SourceColumn) -> tuple[str, str, int]:
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
                if match := _CAPTURED_NAME.match(name):
                    folder.last_stamp, folder.durable_lsn = match.group(1), int(match.group(2))
        return folder

    def next_name(self, commit_ts: str, commit_lsn: int) -> str:
        stamp = max(cdc_file_name(commit_ts)[: -len(".csv")], self.last_stamp)
        return f"{stamp}{commit_lsn:020d}.csv"


# --------------------------------------------------------------------------- full load


class _CopyRows:
    """A file-like sink for ``COPY ... TO STDOUT`` (text format) that yields parsed rows."""

    _ESCAPES: ClassVar[dict[str, str]] = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
    _ESCAPE = re.compile(r"\\(.)")

    def __init__(self) -> None:
        self.pending = b""
        self.rows: list[list[str | None]] = []

    def write(self, data: bytes | str) -> int:
        chunk = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        lines = (self.pending + chunk).split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            self.rows.append([self._field(f) for f in line.decode("utf-8").split("\t")])
        return len(data)

    def _field(self, text: str) -> str | None:
        if text == "\\N":
            return None
        if "\\" not in text:
            return text
        return self._ESCAPE.sub(lambda m: self._ESCAPES.get(m.group(1), m.group(1)), text)


def _full_load(
    settings: CaptureSettings,
    conn: Any,
    snapshot: str,
    tables: Sequence[SourceTable],
    consistent_lsn: int,
    loaded_at: str,
) -> CaptureReport:
    """Copy every table in the exported snapshot into LOAD files (one folder per non-empty table).

    ``loaded_at`` (the timestamp column) is the server's clock read before the slot was created,
    so every change decoded from the slot commits at or after it and orders after the full load.
    """
    report = CaptureReport()
    sequence = change_sequence(consistent_lsn, 0)
    with conn.cursor() as cur:
        cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot,))
        for table in tables:
            converters = [value_text(c.pg_type) for c in table.columns]
            columns = ", ".join(quote_pg(c.name) for c in table.columns)
            sink = _CopyRows()
            cur.copy_expert(
                f"COPY (SELECT {columns} FROM {quote_pg(table.schema)}.{quote_pg(table.name)}) TO STDOUT", sink
            )
            records: list[list[Value]] = [
                [loaded_at, *[None if v is None else f(v) for f, v in zip(converters, row, strict=True)], sequence]
                for row in sink.rows
            ]
            folder = settings.bronze / table.schema / table.name
            header = csv_text(
                [[settings.timestamp_column, *(c.name for c in table.columns), settings.change_sequence_column]]
            )
            for number, start in enumerate(range(0, len(records), settings.rows_per_load_file), start=1):
                path = folder / load_file_name(number)
                text = header + csv_text(records[start : start + settings.rows_per_load_file])
                write_durably(path, text.encode("utf-8"))
                report.load_files += 1
                report.files.append(str(path.relative_to(settings.bronze)))
            report.load_rows += len(records)
            log.info("full load table=%s rows=%d", table.qualified, len(records))
        cur.execute("COMMIT")
    return report


def _selected_tables(settings: CaptureSettings, conn: Any) -> list[SourceTable]:
    with conn.cursor() as cur:
        tables = read_tables(cur, settings.schemas, settings.tables)
    usable = []
    for table in tables:
        bad = [n for n in (table.schema, table.name, *(c.name for c in table.columns)) if not IDENTIFIER.match(n)]
        if bad:
            log.warning("table %s skipped: names cdclake cannot configure: %s", table.qualified, ", ".join(bad))
        elif table.primary_key and table.replica_identity not in ("d", "f"):
            raise CaptureError(
                f"Table {table.qualified} has REPLICA IDENTITY {table.replica_identity!r}: deletes would not carry "
                f"its primary key. Run ALTER TABLE {table.qualified} REPLICA IDENTITY DEFAULT (or FULL)."
            )
        elif {settings.timestamp_column, settings.change_sequence_column} & {c.name for c in table.columns}:
            raise CaptureError(f"Table {table.qualified} has a column named like capture's own columns.")
        else:
            usable.append(table)
    if not usable:
        raise CaptureError(f"No tables to capture in schema(s) {', '.join(settings.schemas)}.")
    return usable


def _slot_exists(conn: Any, slot: str) -> bool:
    """Whether ``slot`` exists; a slot of another database (slots are per server) is an error."""
    with conn.cursor() as cur:
        cur.execute("SELECT database, current_database() FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
    if row is not None and row[0] != row[1]:
        raise CaptureError(f"The replication slot {slot} belongs to database {row[0]}: choose another --slot.")
    return row is not None


def _publications(settings: CaptureSettings, tables: Sequence[SourceTable]) -> list[tuple[str, list[str], str]]:
    keyed = [t.qualified for t in tables if t.primary_key]
    keyless = [t.qualified for t in tables if not t.primary_key]
    result = []
    if keyed:
        result.append((settings.publication, keyed, "insert, update, delete"))
    if keyless:
        result.append((f"{settings.publication}_inserts", keyless, "insert"))
    return result


def initialise(settings: CaptureSettings, conn: Any) -> tuple[CaptureState, CaptureReport]:
    """Publications, the slot with its exported snapshot, and the full load taken in that snapshot.

    A slot left by an interrupted initialisation is dropped and the partial LOAD files removed,
    so the full load is always complete and consistent with the slot.
    """
    tables = _selected_tables(settings, conn)
    with conn.cursor() as cur:
        if _slot_exists(conn, settings.slot):
            log.warning("dropping slot %s left by an interrupted first capture", settings.slot)
            cur.execute("SELECT pg_drop_replication_slot(%s)", (settings.slot,))
        for table in tables:
            folder = settings.bronze / table.schema / table.name
            for stale in [*folder.glob("LOAD*"), *folder.glob(".*.tmp")] if folder.is_dir() else []:
                stale.unlink()
        for name, members, publish in _publications(settings, tables):
            cur.execute(f"DROP PUBLICATION IF EXISTS {quote_pg(name)}")
            listed = ", ".join(".".join(quote_pg(p) for p in m.split(".")) for m in members)
            cur.execute(f"CREATE PUBLICATION {quote_pg(name)} FOR TABLE {listed} WITH (publish = %s)", (publish,))
    with conn.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        loaded_at = timestamp_text(cur.fetchone()[0])
    replication = connect(settings.dsn, replication=True)
    try:
        with replication.cursor() as rcur:
            rcur.execute(f"CREATE_REPLICATION_SLOT {quote_pg(settings.slot)} LOGICAL pgoutput EXPORT_SNAPSHOT")
            _slot, consistent_point, snapshot, _plugin = rcur.fetchone()
            # The snapshot lives as long as this connection stays idle: load everything now.
            report = _full_load(settings, conn, snapshot, tables, parse_lsn(consistent_point), loaded_at)
    finally:
        replication.close()
    state = CaptureState(settings.slot, tables, full_load_done=True, consistent_point=consistent_point)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    write_durably(_state_path(settings), state.to_json().encode("utf-8"))
    log.info("slot %s created at %s; full load of %d tables done", settings.slot, consistent_point, len(tables))
    if settings.config_path is not None:
        _write_configuration(settings, conn, tables)
    return state, report


def _write_configuration(settings: CaptureSettings, conn: Any, tables: Sequence[SourceTable]) -> None:
    path = settings.config_path
    assert path is not None
    if path.exists():
        log.info("configuration %s exists: left as it is", path)
        return
    database = settings.silver_database
    if database is None:
        with conn.cursor() as cur:
            cur.execute("SELECT current_database()")
            name = str(cur.fetchone()[0])
        database = name if IDENTIFIER.match(name) else "cdclake"
    bronze = os.path.relpath(settings.bronze.resolve(), path.resolve().parent)
    text = configuration_yaml(tables, bronze, database, settings.timestamp_column, settings.change_sequence_column)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_durably(path, text.encode("utf-8"))
    log.info("table configuration written to %s", path)


# --------------------------------------------------------------------------- change stream


Layout = tuple[str, ...]  # the source columns of a change, in its Relation message's order


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

    def _confirmed_lsn(self) -> int:
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", (self.settings.slot,)
            )
            row = cur.fetchone()
        if row is None:
            raise CaptureError(
                f"The replication slot {self.settings.slot} is gone, so changes since the last capture are lost. "
                f"Start over: delete {_state_path(self.settings)} and the bronze folders, then capture again."
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
        if [_signature(c) for c in columns] == [_signature(c) for c in table.columns]:
            return
        if txn.commit_lsn < self.state.layout_lsns.get(table.qualified, 0):
            return  # re-read history: the table has had newer columns since
        self._schema_change(table, columns, txn.commit_lsn)

    def _schema_change(self, table: SourceTable, columns: tuple[SourceColumn, ...], commit_lsn: int) -> None:
        before = {c.name: c for c in table.columns}
        added = [c for c in columns if c.name not in before]
        retyped = [c for c in columns if c.name in before and _signature(c) != _signature(before[c.name])]
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
        write_durably(_state_path(self.settings), self.state.to_json().encode("utf-8"))

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
                    raise CaptureError(
                        f"Table {table.qualified}: an update left the large value of column {column.name} unchanged "
                        f"and PostgreSQL did not log it. Run ALTER TABLE {table.qualified} REPLICA IDENTITY FULL, "
                        "then start the capture again from scratch (new slot, empty bronze)."
                    )
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
        self.confirm(self.through_lsn)

    def confirm(self, lsn: int) -> None:
        """Move the slot to ``lsn`` (everything committed before it is durable in bronze)."""
        if lsn <= self.confirmed_lsn or self.buffers:
            return
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.settings.slot, format_lsn(lsn)))
        self.confirmed_lsn = lsn

    def poll(self) -> int:
        """Decode everything committed up to now; return the number of transactions not seen before."""
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_current_wal_flush_lsn()")  # decoding reads flushed WAL only
            wal_end = parse_lsn(cur.fetchone()[0])
        publications = ",".join(name for name, _, _ in _publications(self.settings, list(self.tables.values())))
        seen = self.new_commits
        self.conn.autocommit = False  # a named (server-side) cursor streams rows inside a transaction
        with self.conn.cursor(name="cdclake_peek") as cur:
            cur.itersize = 2000
            cur.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
                "'proto_version', '1', 'publication_names', %s)",
                (self.settings.slot, format_lsn(wal_end), publications),
            )
            for (data,) in cur:
                self.handle(bytes(data))
        self.conn.commit()
        self.conn.autocommit = True
        if not self.buffers:
            # Every commit up to wal_end has been seen and nothing is waiting to be written.
            self.through_lsn = max(self.through_lsn, wal_end)
            self.confirm(self.through_lsn)
        return self.new_commits - seen


def capture(settings: CaptureSettings) -> CaptureReport:
    """Initialise if needed (slot + full load), then capture changes once or until stopped."""
    conn = connect(settings.dsn)
    try:
        state_file = _state_path(settings)
        state = CaptureState.from_json(state_file.read_text("utf-8")) if state_file.exists() else None
        load_report = CaptureReport()
        if state is None or not state.full_load_done:
            state, load_report = initialise(settings, conn)
        stream = ChangeCapture(settings, state, conn)
        stream.report.load_files, stream.report.load_rows = load_report.load_files, load_report.load_rows
        stream.report.files.extend(load_report.files)
        try:
            while True:
                new = stream.poll()
                if not settings.follow:
                    break
                if stream.due():
                    stream.flush()
                if new == 0:
                    time.sleep(settings.poll_interval)
        except KeyboardInterrupt:
            log.info(
                "capture stopped; %d buffered changes will be read again next time",
                sum(map(len, stream.buffers.values())),
            )
            raise
        if stream.buffers:
            stream.flush()
        stream.report.confirmed_lsn = format_lsn(stream.confirmed_lsn)
        return stream.report
    finally:
        conn.close()
