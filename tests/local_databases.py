"""The real database servers tests run against, one definition each: PostgreSQL 15 (``wal_level=logical``,
for capture) and MariaDB, each started on a free loopback port by its script (``scripts/postgres-local.sh``,
``scripts/mariadb-local.sh``) and stopped when the block ends.

The session fixtures ``pg_server`` and ``mariadb_server`` (tests/spark/conftest.py) start each once per
session; each test then makes a database of its own with ``create_database``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _database_name() -> str:
    return f"src_{uuid.uuid4().hex[:10]}"


@dataclass(frozen=True)
class PgServer:
    port: int

    def dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"

    def create_database(self) -> str:
        import psycopg2

        name = _database_name()
        conn = psycopg2.connect(self.dsn())
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        conn.close()
        return name


@dataclass(frozen=True)
class MariaServer:
    port: int

    def url(self, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str | None = None) -> Any:
        """A connection whose session reads and writes TIMESTAMP values in UTC."""
        import pymysql

        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            database=database,
            autocommit=True,
            charset="utf8mb4",
            init_command="SET time_zone = '+00:00'",
        )

    def create_database(self) -> str:
        name = _database_name()
        conn = self.connect()
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
        conn.close()
        return name


@contextmanager
def _served(script: str, prefix: str, port: int, *options: str) -> Iterator[None]:
    """Run ``scripts/<script> start`` (with the server ``options``) on a fresh data directory and
    ``stop`` when the block ends."""
    # Not under pytest's tmp_path: that is private to this user, and as root the server runs as its own user.
    home = Path(tempfile.mkdtemp(prefix=prefix))
    home.chmod(0o755)
    data = home / "data"
    subprocess.run([REPO / "scripts" / script, "start", data, str(port), *options], check=True)
    try:
        yield
    finally:
        subprocess.run([REPO / "scripts" / script, "stop", data], check=False)
        shutil.rmtree(home, ignore_errors=True)


@contextmanager
def running_postgres(*settings: str) -> Iterator[PgServer]:
    """A PostgreSQL 15 server with ``wal_level=logical`` for the block (a test failure if not
    installed); ``settings`` (``name=value``) change the script's."""
    if not (PG_BIN / "postgres").exists():
        pytest.fail("PostgreSQL 15 is not installed: run `make setup` (scripts/install-system-deps.sh installs it)")
    server = PgServer(free_port())
    options = [part for setting in settings for part in ("-c", setting)]
    with _served("postgres-local.sh", "cdclake-pg-", server.port, *options):
        yield server


@contextmanager
def running_mariadb() -> Iterator[MariaServer]:
    """A MariaDB server for the block (a test failure if not installed)."""
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.fail("MariaDB is not installed: run `make setup` (scripts/install-system-deps.sh installs it)")
    server = MariaServer(free_port())
    with _served("mariadb-local.sh", "cdclake-mariadb-", server.port):
        yield server
