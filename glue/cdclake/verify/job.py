"""The verify job's reach to the source: the stack's secret (and Glue connection) give the address, the verify
engine (``verify.run``, through the address's dialect: PostgreSQL, MariaDB/MySQL or SQL Server) compares the
tables, waiting for a differing table to catch up with a live source (``verify.live``), and each comparison
keeps when it ran and where the source stood.

PostgreSQL is read through psycopg2 (typed values, a server-side cursor), as ``cdclake verify`` reads it: the
Glue jobs' zip of wheels bundles psycopg2-binary (docs/deploy.md).

Any failure to reach the source makes every table "skipped" with the reason, never a job failure: the run still
records its rows and publishes TablesSkipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from cdclake.errors import first_line
from cdclake.ops.source_catalog import SourceSettings, source_address
from cdclake.sources.catalog.model import SourceCatalogError
from cdclake.verify.applied import silver_position
from cdclake.verify.compare import DEFAULT_CHECKSUMS
from cdclake.verify.dialects import open_dialect_at
from cdclake.verify.live import LiveSettings
from cdclake.verify.result import TableComparison
from cdclake.verify.run import LiveCheck, verify

if TYPE_CHECKING:
    from cdclake.config import TableConfig
    from cdclake.context import Engine
    from cdclake.report import RunReport

log = logging.getLogger("cdclake.verify")


@dataclass(frozen=True)
class TableVerified:
    """One table's comparison, when it ran (UTC), and where the source stood when verify started: its log
    position (PostgreSQL's LSN) where it has one, and its clock (None: not known, the source unreachable)."""

    comparison: TableComparison
    started: datetime
    finished: datetime
    position: str | None = None
    source_clock: datetime | None = None

    @classmethod
    def of(cls, comparison: TableComparison, at: datetime) -> TableVerified:
        """``comparison`` with the times it carries (``at`` for those it lacks: a table skipped at once)."""
        source = comparison.source_at
        return cls(
            comparison,
            comparison.started or at,
            comparison.finished or at,
            (source.log_position or source.clock.isoformat(sep=" ")) if source else None,
            source.clock if source else None,
        )


def _skipped(tables: Sequence[TableConfig], problem: str, now: Callable[[], datetime]) -> list[TableVerified]:
    log.error("verify: every table skipped: %s", problem)
    at = now()
    return [TableVerified(TableComparison(table=t.source, problem=problem), at, at) for t in tables]


def verify_tables(
    engine: Engine,
    settings: SourceSettings,
    tables: Sequence[TableConfig],
    clients: tuple[Any, Any],
    live: LiveSettings | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[TableVerified]:
    """Compare each of ``tables`` with the source behind ``settings`` (``clients``: Secrets Manager and Glue),
    by key-range checksums; with ``live``, a differing table is read again once silver has caught up with the
    source (else it is lagging). A source that cannot be reached or read skips them all."""
    secrets, glue = clients
    try:
        address = source_address(settings, secrets, glue)
    except SourceCatalogError as exc:
        return _skipped(tables, str(exc), now)
    check = None if live is None else LiveCheck(live, partial(silver_position, engine))
    try:
        with open_dialect_at(address) as dialect:
            comparisons = verify(engine, dialect, tables, DEFAULT_CHECKSUMS, check)
    except Exception as exc:  # unreachable, refused, its catalog unreadable: one sentence, never the password
        log.debug("verify: the source could not be read", exc_info=True)
        return _skipped(tables, f"could not be compared: {type(exc).__name__}: {first_line(exc)}", now)
    at = now()
    return [TableVerified.of(c, at) for c in comparisons]


def start_verify_after_reload(glue: Any, job_name: str, report: RunReport) -> str | None:
    """Start the verify job for the tables a reload (a full-load run given --tables) loaded; its run id, None when
    it loaded none. The run is queued behind a verify run already active (Glue's job run queuing) instead of being
    refused; a start Glue refuses all the same raises, for the caller to report."""
    failed = {failure.table for failure in report.failures}
    loaded = sorted({t.table for t in report.tables if t.loaded and t.table not in failed})
    if not loaded:
        return None
    answer = glue.start_job_run(JobName=job_name, Arguments={"--tables": ",".join(loaded)}, JobRunQueuingEnabled=True)
    log.info("verify started after the reload of %s: job %s run %s", ", ".join(loaded), job_name, answer["JobRunId"])
    return str(answer["JobRunId"])
