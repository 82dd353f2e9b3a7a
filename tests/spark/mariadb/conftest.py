"""A real MariaDB server (Debian's mariadb-server) for the ``cdclake init`` tests: started once per
session on a free loopback port by ``scripts/mariadb-local.sh``, stopped at the end. Each test gets
its own database."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class MariaServer:
    port: int

    def url(self, database: str) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str | None = None) -> Any:
        """A connection whose session reads and writes TIMESTAMP values in UTC."""
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
        name = f"src_{uuid.uuid4().hex[:10]}"
        conn = self.connect()
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
        conn.close()
        return name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaServer]:
    if shutil.which("mariadbd") is None and not Path("/usr/sbin/mariadbd").exists():
        pytest.fail("MariaDB is not installed: run `make setup` (scripts/install-system-deps.sh installs it)")
    # Not under pytest's tmp_path: that is private to this user, and as root the server runs as `mysql`.
    home = Path(tempfile.mkdtemp(prefix="cdclake-mariadb-"))
    home.chmod(0o755)
    data = home / "data"
    server = MariaServer(_free_port())
    subprocess.run([REPO / "scripts" / "mariadb-local.sh", "start", data, str(server.port)], check=True)
    try:
        yield server
    finally:
        subprocess.run([REPO / "scripts" / "mariadb-local.sh", "stop", data], check=False)
        shutil.rmtree(home, ignore_errors=True)
