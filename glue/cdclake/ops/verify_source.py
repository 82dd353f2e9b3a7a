"""The verify job's reach to the source: the stack's secret (and Glue connection) give the address, the verify
engine compares each table, and each comparison keeps when it started and ended.

This module is the one place the AWS side imports the verify engine from (``compare_tables`` below). The engine
reads PostgreSQL through psycopg2 (typed values, a server-side cursor), so the job does too: the Glue jobs'
zip of wheels bundles psycopg2-binary (docs/deploy.md). Any failure to reach the source makes every table
"skipped" with the reason, never a job failure: the run still records its rows and publishes TablesSkipped.
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
    """One table's comparison and when it ran (UTC)."""

    comparison: TableComparison
    started: datetime
    finished: datetime


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
            started = now()
            [comparison] = compare_tables(engine, conn, [table], ChecksumSettings())
            verified.append(TableVerified(comparison, started, now()))
    finally:
        conn.close()
    return verified
