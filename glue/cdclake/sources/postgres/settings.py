"""What ``cdclake capture`` is given and reports, and its connection to PostgreSQL."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdclake.sources.postgres.catalog import (
    SESSION_SETTINGS,
)

log = logging.getLogger("cdclake.capture")

CAPTURED_NAME = re.compile(r"^(\d{8}-\d{10})(\d{20})\.csv$")


@dataclass(frozen=True)
class CaptureSettings:
    """Everything ``capture`` needs; every knob has a default."""

    dsn: str  # libpq key=value string or postgresql:// URL; empty: the PG* environment variables
    bronze: Path  # the bronze root: files go to <bronze>/<schema>/<table>/
    state_dir: Path  # where the capture keeps its slot name, tables and full-load status
    slot: str = "cdclake"
    publication: str = "cdclake"  # keyless tables use "<publication>_inserts"
    schemas: tuple[str, ...] = ("public",)  # tables of these schemas, unless `tables` names them
    tables: tuple[str, ...] = ()  # schema.table
    # every table of the configuration file (empty: no file): a captured table not among them was
    # taken out of it, and is no longer captured
    configured: tuple[str, ...] = ()
    reload: tuple[str, ...] = ()  # schema.table of captured tables to load again (capture --reload)
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
    loaded_tables: list[str] = field(default_factory=list)  # schema.table of the tables given LOAD files
    held: dict[str, str] = field(default_factory=dict)  # table -> why its changes are not captured, and the fix
    held_changes: int = 0  # changes of held tables left out by this run
    removed_tables: list[str] = field(default_factory=list)  # no longer in the configuration: no longer captured


# --------------------------------------------------------------------------- connections


def connect(dsn: str, replication: bool = False) -> Any:
    """A psycopg2 connection with the output settings values are read with. ``dsn``: what libpq
    reads, a key=value string or a ``postgresql://`` URL, or empty for the PG* variables."""
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
        from cdclake.sources.postgres.problems import SourceAccessError, connection_problem

        raise SourceAccessError(connection_problem(str(exc), server_of(dsn))) from None
    conn.set_client_encoding("UTF8")
    return conn


def server_of(dsn: str) -> str:
    """For messages: ``host:port`` of a libpq connection string or URL (libpq's defaults where it
    names none; the PG* variables when it is empty)."""
    from psycopg2.extensions import parse_dsn

    if not dsn:
        return "the server the PG* variables name"
    try:
        parts = parse_dsn(dsn)
    except Exception:  # libpq will say what is wrong with it
        return without_password(dsn)
    return f"{parts.get('host') or 'localhost'}:{parts.get('port') or 5432}"


def without_password(dsn: str) -> str:
    """For messages: the connection string with its password (key=value or URL form) as ***."""
    if not dsn:
        return "PG* environment"
    dsn = re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)", r"\1***", dsn)
    return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", dsn)
