"""The capture's first run: the replication slot, its exported snapshot, and the full load from it."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from cdclake.dms.writer import Value, csv_text, load_file_name
from cdclake.identifiers import IDENTIFIER, quote_pg
from cdclake.sources.postgres.catalog import (
    SourceTable,
    configuration_yaml,
    read_tables,
    value_text,
)
from cdclake.sources.postgres.pgoutput import (
    parse_lsn,
)
from cdclake.sources.postgres.settings import CaptureError, CaptureReport, CaptureSettings, connect
from cdclake.sources.postgres.state import CaptureState, change_sequence, state_path, timestamp_text, write_durably

log = logging.getLogger("cdclake.capture")

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


def publication_names(settings: CaptureSettings, tables: Sequence[SourceTable]) -> list[tuple[str, list[str], str]]:
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
        for name, members, publish in publication_names(settings, tables):
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
    write_durably(state_path(settings), state.to_json().encode("utf-8"))
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
