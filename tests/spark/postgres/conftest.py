"""The capture tests' source databases on the session's PostgreSQL server (``pg_server``, from
tests/local_databases.py through tests/spark/conftest.py).

Each test gets its own database, bronze folder and capture state, and builds its engine on the
shared Spark session (``make_engine`` from ``tests/spark/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.engine.run import run
from cdclake.report import RunReport
from cdclake.sources.postgres.capture import capture
from cdclake.sources.postgres.settings import CaptureReport, CaptureSettings
from cdclake.verify.postgres.dialect import verify
from cdclake.verify.result import TableComparison
from local_databases import PgServer


@dataclass
class SourceDatabase:
    """One test's source database, bronze folder, capture settings and SQL helper."""

    server: PgServer
    name: str
    workdir: Path
    last_run: RunReport | None = None  # the report of the last `run` of apply_and_verify

    @property
    def dsn(self) -> str:
        return self.server.dsn(self.name)

    @property
    def bronze(self) -> Path:
        return self.workdir / "bronze"

    @property
    def config_path(self) -> Path:
        return self.workdir / "cdclake.yaml"

    def settings(self, **overrides: Any) -> CaptureSettings:
        base: dict[str, Any] = {
            "dsn": self.dsn,
            "bronze": self.bronze,
            "state_dir": self.workdir / "capture-state",
            "config_path": self.config_path,
            "slot": f"cdclake_{self.name}",  # slots are per server, not per database
        }
        return CaptureSettings(**(base | overrides))

    def execute(self, *statements: str) -> None:
        """Run statements, each in its own transaction (autocommit)."""
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.close()

    def transaction(self, *statements: str) -> None:
        """Run statements as one transaction."""
        conn = psycopg2.connect(self.dsn)
        with conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.close()

    def capture(self, **overrides: Any) -> CaptureReport:
        return capture(self.settings(**overrides))

    def connect(self) -> Any:
        from cdclake.sources.postgres.settings import connect

        return connect(self.dsn)


def loaded_engine(source_db: SourceDatabase, make_engine: Callable[..., Engine], schema: str) -> Engine:
    """An engine on the shared Spark session whose silver holds ``schema``'s tables, captured and applied."""
    source_db.execute(schema)
    source_db.capture()
    text = source_db.config_path.read_text("utf-8")
    engine = make_engine(text)
    config = parse_config(text, str(source_db.config_path))
    engine = replace(engine, config=replace(config, database=engine.config.database, bronze=engine.config.bronze))
    run(engine).checked()
    return engine


@pytest.fixture
def source_db(pg_server: PgServer, tmp_path: Path) -> SourceDatabase:
    return SourceDatabase(pg_server, pg_server.create_database(), tmp_path)


@pytest.fixture
def apply_and_verify(make_engine: Callable[..., Engine]) -> Callable[[SourceDatabase], list[TableComparison]]:
    """Apply the captured files with ``run`` (one silver database per test), then verify against the
    source. The configuration is read again every time, as each ``cdclake run`` does: capture
    declares the types of columns added at the source in it. The run's report is kept in
    ``db.last_run``."""
    engines: dict[str, Engine] = {}

    def go(db: SourceDatabase) -> list[TableComparison]:
        text = db.config_path.read_text("utf-8")
        if db.name not in engines:
            engines[db.name] = make_engine(text)
        first = engines[db.name]
        config = parse_config(text, str(db.config_path))
        config = replace(config, database=first.config.database, bronze=first.config.bronze)
        engine = engines[db.name] = replace(first, config=config)
        db.last_run = run(engine).checked()
        conn = db.connect()
        try:
            return verify(engine, conn)
        finally:
            conn.close()

    return go
