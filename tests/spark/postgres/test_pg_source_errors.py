"""A new user's source mistakes, against a real PostgreSQL: each ends in one line that names the fix
(exit 2, no traceback), and nothing is created at the source before it.

Each case makes the mistake for real: a role created without the grant, a port nothing listens on,
a wrong password (``pg_hba.conf`` asks this role for one), a server with ``wal_level=replica``,
every replication slot taken. ``capture``, ``init`` and ``verify`` run as the user runs them (a
subprocess each; verify stops before Spark starts).
"""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from local_databases import PgServer, free_port, running_postgres

SourceDatabase = Any  # conftest.SourceDatabase
DOCS = '(see docs/capture.md, "What capture needs").'


def _cdclake(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cdclake.shells.cli", "-q", "--config", str(workdir / "shop.yaml"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=workdir)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command printed (exit 2, no traceback), without ``cdclake: ``."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cdclake: "), result.stderr
    return lines[0][len("cdclake: ") :]


def _statements(message: str) -> list[str]:
    """The SQL a refusal tells a superuser to run."""
    match = re.search(r"as a superuser, run: (.*) \(see docs/", message)
    assert match, message
    return match[1].split("; ")


def _role(server: PgServer, attributes: str) -> str:
    name = f"u_{uuid.uuid4().hex[:8]}"
    _as_superuser(server, "postgres", f"CREATE ROLE {name} {attributes}")
    return name


def _as_superuser(server: PgServer, database: str, *statements: str) -> list[tuple[object, ...]]:
    conn = psycopg2.connect(server.dsn(database))
    conn.autocommit = True
    rows: list[tuple[object, ...]] = []
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
            rows = cur.fetchall() if cur.description else []
    conn.close()
    return rows


def _source(server: PgServer, database: str, user: str = "postgres", password: str = "") -> str:
    return f"host=127.0.0.1 port={server.port} dbname={database} user={user}" + (
        f" password={password}" if password else ""
    )


def _publications(server: PgServer, database: str) -> int:
    return int(str(_as_superuser(server, database, "SELECT count(*) FROM pg_publication")[0][0]))


SHOP = (
    "CREATE SCHEMA app",
    "CREATE TABLE app.products (id int PRIMARY KEY, name text, price numeric(12,2))",
    "INSERT INTO app.products VALUES (1, 'tea', 3.50)",
    "CREATE TABLE app.orders (id int PRIMARY KEY, product int)",
    "INSERT INTO app.orders VALUES (10, 1)",
)


def test_missing_grants_are_named_at_once_and_capture_runs_once_they_are_given(
    pg_server: PgServer, source_db: SourceDatabase, tmp_path: Path
) -> None:
    # GIVEN a user that may log in and replicate, and nothing else; one table owned by an ordinary
    # role (its rights can be lent), one by the superuser (the table must change hands)
    db = source_db.name
    owner, user = _role(pg_server, "NOLOGIN"), _role(pg_server, "LOGIN REPLICATION")
    _as_superuser(pg_server, db, *SHOP, f"ALTER TABLE app.products OWNER TO {owner}")
    # WHEN capture runs as that user
    capture = ("capture", "--slot", f"s_{db}", "--schema", "app", "--source", _source(pg_server, db, user))
    refused = _cdclake(tmp_path, *capture)
    # THEN one line names every statement a superuser runs, and nothing was created at the source
    message = _one_line(refused)
    assert message.startswith(f"Database {db} is not ready for capture as user {user}: as a superuser, run: ")
    assert message.endswith(DOCS)
    assert _statements(message) == [
        f"GRANT CREATE ON DATABASE {db} TO {user}",
        f"GRANT USAGE ON SCHEMA app TO {user}",
        f"GRANT SELECT ON app.products TO {user}",
        f"GRANT {owner} TO {user}",
        f"ALTER TABLE app.orders OWNER TO {user}",
    ]
    assert _publications(pg_server, db) == 0
    # AND once a superuser ran them, the same command captures both tables
    _as_superuser(pg_server, db, *_statements(message))
    captured = _cdclake(tmp_path, *capture)
    _as_superuser(pg_server, "postgres", f"SELECT pg_drop_replication_slot('s_{db}')")
    assert captured.returncode == 0, captured.stderr
    assert "full load files=2 rows=2" in captured.stdout


def test_a_user_that_may_not_replicate_is_told_the_role_attribute(
    pg_server: PgServer, source_db: SourceDatabase, tmp_path: Path
) -> None:
    # GIVEN a user that owns the tables and may create publications, but lacks REPLICATION
    db = source_db.name
    user = _role(pg_server, "LOGIN")
    _as_superuser(pg_server, db, *SHOP, f"GRANT CREATE ON DATABASE {db} TO {user}")
    _as_superuser(pg_server, db, f"ALTER SCHEMA app OWNER TO {user}", f"ALTER TABLE app.products OWNER TO {user}")
    _as_superuser(pg_server, db, f"ALTER TABLE app.orders OWNER TO {user}")
    # WHEN capture runs as that user THEN the one statement it lacks, and nothing created
    message = _one_line(
        _cdclake(
            tmp_path, "capture", "--slot", f"s_{user}", "--schema", "app", "--source", _source(pg_server, db, user)
        )
    )
    assert _statements(message) == [f"ALTER ROLE {user} REPLICATION"]
    assert _publications(pg_server, db) == 0


def test_a_configured_table_the_source_lacks_is_named(source_db: SourceDatabase, tmp_path: Path) -> None:
    # GIVEN a configuration with a typo in a table's name
    db, server = source_db.name, source_db.server
    _as_superuser(server, db, *SHOP)
    (tmp_path / "shop.yaml").write_text(
        "bronze: {path: bronze, csv_header: true}\nsilver: {database: shop}\n"
        "tables:\n  app.prodcuts: {primary_key: [id]}\n"
    )
    # WHEN capture runs THEN one line names the table, and nothing was created at the source
    message = _one_line(_cdclake(tmp_path, "capture", "--source", _source(server, db)))
    assert message.startswith("The source database has no table app.prodcuts: check the name"), message
    assert _publications(server, db) == 0


def test_a_server_nothing_listens_on_is_named_with_the_fix(tmp_path: Path) -> None:
    # GIVEN a loopback port nothing listens on WHEN capture, verify and init are pointed at it
    port = free_port()
    source = f"postgresql://postgres@127.0.0.1:{port}/shop"
    (tmp_path / "shop.yaml").write_text(
        "bronze: {path: bronze, csv_header: true}\nsilver: {database: shop}\n"
        "tables:\n  app.products: {primary_key: [id]}\n"
    )
    messages = [_one_line(_cdclake(tmp_path, command, "--source", source)) for command in ("capture", "verify")]
    messages.append(_one_line(_cdclake(tmp_path, "--config", str(tmp_path / "new.yaml"), "init", "--source", source)))
    # THEN each says nothing listens there and what to do
    fix = "nothing listens there: start the server, or fix the host and port in --source."
    assert messages[:2] == [f"Cannot connect to PostgreSQL at 127.0.0.1:{port}: {fix}"] * 2
    assert messages[2] == f"Cannot connect to PostgreSQL at 127.0.0.1:{port} (database shop): {fix}"


@pytest.fixture
def password_role(pg_server: PgServer) -> Iterator[str]:
    """A role whose password the (otherwise trusting) test server checks: pg_hba.conf asks for it."""
    user = _role(pg_server, "LOGIN REPLICATION PASSWORD 'right'")
    hba = Path(str(_as_superuser(pg_server, "postgres", "SHOW hba_file")[0][0]))
    before = hba.read_text()
    hba.write_text(f"host all {user} 127.0.0.1/32 scram-sha-256\n" + before)  # the first line that matches wins
    _as_superuser(pg_server, "postgres", "SELECT pg_reload_conf()")
    try:
        yield user
    finally:
        hba.write_text(before)
        _as_superuser(pg_server, "postgres", "SELECT pg_reload_conf()")


def test_a_wrong_password_is_named_with_where_to_put_the_right_one(
    pg_server: PgServer, source_db: SourceDatabase, password_role: str, tmp_path: Path
) -> None:
    # GIVEN a user whose password the server checks, given the wrong one
    db = source_db.name
    _as_superuser(pg_server, db, *SHOP)
    source = _source(pg_server, db, password_role, "wrong")
    # WHEN capture and init use it THEN one line each: the password was refused, and where it goes
    messages = [
        _one_line(_cdclake(tmp_path, "capture", "--source", source)),
        _one_line(_cdclake(tmp_path, "--config", str(tmp_path / "new.yaml"), "init", "--source", source)),
    ]
    for message in messages:
        assert f"the server refused the password of user {password_role}: give the right one in --source" in message
        assert "wrong" not in message
    # AND the right password gets in (the server does check it): this user lacks grants, which is said next
    right = _one_line(
        _cdclake(tmp_path, "capture", "--schema", "app", "--source", _source(pg_server, db, password_role, "right"))
    )
    assert right.startswith(f"Database {db} is not ready for capture as user {password_role}: "), right
    assert not (tmp_path / "new.yaml").exists()


def test_all_replication_slots_in_use_is_named_with_the_fix(
    pg_server: PgServer, source_db: SourceDatabase, tmp_path: Path
) -> None:
    # GIVEN a server whose every replication slot is taken (physical slots: they hold no WAL)
    db = source_db.name
    _as_superuser(pg_server, db, *SHOP)
    free = _as_superuser(
        pg_server,
        "postgres",
        "SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)",
    )[0][0]
    taken = [f"full_{uuid.uuid4().hex[:8]}" for _ in range(int(str(free)))]
    try:
        for slot in taken:
            _as_superuser(pg_server, "postgres", f"SELECT pg_create_physical_replication_slot('{slot}')")
        # WHEN capture runs THEN one line: the slots are in use, which to drop or what to raise; nothing created
        message = _one_line(
            _cdclake(tmp_path, "capture", "--slot", f"s_{db}", "--schema", "app", "--source", _source(pg_server, db))
        )
    finally:
        for slot in taken:
            _as_superuser(pg_server, "postgres", f"SELECT pg_drop_replication_slot('{slot}')")
    assert re.search(r"all \d+ replication slots are in use \(.*full_", message), message
    assert "SELECT pg_drop_replication_slot('name')) or raise max_replication_slots" in message
    assert _publications(pg_server, db) == 0


@pytest.fixture(scope="module")
def replica_server() -> Iterator[PgServer]:
    """A server with ``wal_level=replica``: what a new server has by default."""
    with running_postgres("wal_level=replica") as server:
        yield server


def test_wal_level_not_logical_is_named_with_the_setting(replica_server: PgServer, tmp_path: Path) -> None:
    # GIVEN a database on a server whose wal_level is replica (PostgreSQL's default)
    db = replica_server.create_database()
    _as_superuser(replica_server, db, *SHOP)
    # WHEN capture runs THEN one line: the setting, how to set it, and nothing created
    message = _one_line(_cdclake(tmp_path, "capture", "--schema", "app", "--source", _source(replica_server, db)))
    assert message == (
        f"Database {db} is not ready for capture as user postgres: its wal_level is replica: set wal_level = "
        "logical (ALTER SYSTEM SET wal_level = logical, then restart the server; on Amazon RDS and Aurora: "
        f"rds.logical_replication = 1 in the parameter group) {DOCS}"
    )
    assert _publications(replica_server, db) == 0


def test_verify_names_the_grants_its_user_lacks_before_spark_starts(
    pg_server: PgServer, source_db: SourceDatabase, tmp_path: Path
) -> None:
    # GIVEN a captured database and a user that may log in but not read the tables
    db = source_db.name
    _as_superuser(pg_server, db, *SHOP)
    slot = f"s_{db}"
    captured = _cdclake(tmp_path, "capture", "--slot", slot, "--schema", "app", "--source", _source(pg_server, db))
    assert captured.returncode == 0, captured.stderr
    reader = _role(pg_server, "LOGIN")
    try:
        # WHEN verify runs as that user
        refused = _cdclake(tmp_path, "verify", "--source", _source(pg_server, db, reader))
    finally:
        _as_superuser(pg_server, "postgres", f"SELECT pg_drop_replication_slot('{slot}')")
    # THEN one line with the grants (verify needs no replication and no publication)
    message = _one_line(refused)
    assert message.startswith(f"Database {db} is not ready for verify as user {reader}: ")
    assert _statements(message) == [
        f"GRANT USAGE ON SCHEMA app TO {reader}",
        f"GRANT SELECT ON app.orders, app.products TO {reader}",
    ]
