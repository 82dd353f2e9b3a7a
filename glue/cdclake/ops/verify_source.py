"""The verify job's reach to the source: the stack's secret (and Glue connection) give the address, the verify
engine compares each table, and each comparison keeps when it started and ended.

This module is the one place the AWS side imports the verify engine from (``compare_tables`` below). The engine
reads PostgreSQL through psycopg2 (typed values, a server-side cursor), so the job does too: the Glue jobs'
zip of wheels bundles psycopg2-binary (docs/deploy.md). When the engine reads other engines, the lines to change
are that import, ``_connect`` (the connection it is handed) and the engine check in ``verify_tables``.

Any failure to reach the source makes every table "skipped" with the reason, never a job failure: the run still
records its rows and publishes TablesSkipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.ops.source_catalog import SourceSettings, source_address
from cdclake.sources.catalog.connect import CONNECT_TIMEOUT_SECONDS, SourceAddress
from cdclake.sources.catalog.model import SourceCatalogError
from cdclake.sources.postgres.verify import ChecksumSettings, TableComparison
from cdclake.sources.postgres.verify import verify as compare_tables

if TYPE_CHECKING:
    from cdclake.config import TableConfig
    from cdclake.context import Engine

log = logging.getLogger("cdclake.verify")

__all__ = ["TableComparison", "TableVerified", "conninfo", "verify_tables"]


@dataclass(frozen=True)
class TableVerified:
    """One table's comparison, when it ran (UTC), and where the source's WAL stood when it started (None: not
    known)."""

    comparison: TableComparison
    started: datetime
    finished: datetime
    position: str | None = None


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def conninfo(address: SourceAddress, timeout: float = CONNECT_TIMEOUT_SECONDS) -> str:
    """The address as a libpq key=value string (what psycopg2 connects with), every value quoted."""
    pairs = [
        ("host", address.host),
        ("port", str(address.port)),
        ("dbname", address.database),
        ("user", address.user),
        ("password", address.password),
        *address.options,  # sslmode=require and the like, from the JDBC URL's query
        ("connect_timeout", str(max(1, round(timeout)))),
    ]
    return " ".join(f"{key}={_quoted(value)}" for key, value in pairs if value)


def _skipped(tables: Sequence[TableConfig], problem: str, now: Callable[[], datetime]) -> list[TableVerified]:
    log.error("verify: every table skipped: %s", problem)
    at = now()
    return [TableVerified(TableComparison(table=t.source, problem=problem), at, at) for t in tables]


# Where the source stands: its WAL position (on a standby, the position it has replayed), the point a live
# source's comparison is made at. PostgreSQL's SQL, here until the verify engine notes positions itself.
_POSITION_QUERY = (
    "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text"
)


def source_position(conn: Any) -> str | None:
    """The source's WAL position now, as PostgreSQL prints an LSN (``0/16B3748``); None when it cannot say."""
    try:
        with conn.cursor() as cur:
            cur.execute(_POSITION_QUERY)
            row = cur.fetchone()
    except Exception as exc:  # a server or role that refuses the functions: the column stays NULL
        log.warning("verify: the source's WAL position is not known: %s", exc)
        return None
    return str(row[0]) if row and row[0] is not None else None


def _compare(engine: Engine, conn: Any, table: TableConfig) -> TableComparison:
    """One table's comparison; a failure outside the engine's own per-table guard (the source's catalog read,
    a lost connection) becomes the table's problem, so the other tables are still compared and recorded."""
    try:
        [comparison] = compare_tables(engine, conn, [table], ChecksumSettings())
    except Exception as exc:
        log.error("verify table=%s failed: %s", table.source, exc)
        return TableComparison(table=table.source, problem=f"could not be compared: {type(exc).__name__}: {exc}")
    return comparison


def _connect(address: SourceAddress) -> Any:
    from cdclake.sources.postgres.settings import connect

    return connect(conninfo(address))


def verify_tables(
    engine: Engine,
    settings: SourceSettings,
    tables: Sequence[TableConfig],
    clients: tuple[Any, Any],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[TableVerified]:
    """Compare each of ``tables`` with the source behind ``settings`` (``clients``: Secrets Manager and Glue),
    by key-range checksums, one table at a time; a source that cannot be reached skips them all."""
    secrets, glue = clients
    try:
        address = source_address(settings, secrets, glue)
    except SourceCatalogError as exc:
        return _skipped(tables, str(exc), now)
    if address.engine != "postgres":
        return _skipped(tables, f"verify compares PostgreSQL sources only; the source is {address.engine}", now)
    try:
        conn = _connect(address)
    except Exception as exc:  # CaptureError's one sentence (the password never in it)
        return _skipped(tables, str(exc), now)
    verified = []
    try:
        for table in tables:
            started, position = now(), source_position(conn)
            comparison = _compare(engine, conn, table)
            verified.append(TableVerified(comparison, started, now(), position))
    finally:
        conn.close()
    return verified
