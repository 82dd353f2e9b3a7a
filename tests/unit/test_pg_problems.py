"""sources/postgres/problems: PostgreSQL's refusals as one sentence with the fix (the server's own
messages, as libpq and the server word them; tests/spark/postgres/test_pg_source_errors.py meets
them for real)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cdclake.sources.postgres.problems import connection_problem, source_problem


@dataclass
class _Diag:
    message_primary: str


class _ServerError(Exception):
    """What psycopg2 raises for a refused statement: the server's message in ``diag``."""

    def __init__(self, message: str) -> None:
        super().__init__(message + "\nLINE 1: ...\n")
        self.diag = _Diag(message)


@pytest.mark.parametrize(
    ("message", "fix"),
    [
        ("permission denied for database shop", "GRANT CREATE ON DATABASE shop TO cap"),
        ("must be owner of table products", "GRANT <the owner of products> TO cap, or ALTER TABLE products OWNER"),
        ("permission denied for schema App", 'GRANT USAGE ON SCHEMA "App" TO cap'),
        ("permission denied for table products", "GRANT SELECT ON products TO cap (name it with its schema)"),
        ("must be superuser or replication role to use replication slots", "ALTER ROLE cap REPLICATION"),
        ("logical decoding requires wal_level >= logical", "ALTER SYSTEM SET wal_level = logical, then restart"),
        ("all replication slots are in use", "or raise max_replication_slots (then restart the server)"),
        ("must be owner of publication cdclake", "ALTER PUBLICATION cdclake OWNER TO cap"),
    ],
)
def test_a_refused_statement_names_its_fix(message: str, fix: str) -> None:
    # GIVEN the server's refusal of one of capture's statements WHEN it is said to the user
    sentence = source_problem(_ServerError(message), "cap", "shop")
    # THEN one line: the database, the user, the server's reason and the fix
    assert sentence.startswith(f"PostgreSQL refused (shop, user cap): {message}; ")
    assert fix in sentence and "\n" not in sentence


def test_an_unforeseen_refusal_keeps_the_servers_reason_and_points_to_the_docs() -> None:
    sentence = source_problem(_ServerError("cannot execute CREATE PUBLICATION in a read-only transaction"), "u", "d")
    assert sentence == (
        "PostgreSQL refused (d, user u): cannot execute CREATE PUBLICATION in a read-only transaction; "
        'see docs/capture.md, "What capture needs".'
    )


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            'connection to server at "10.1.2.3", port 5432 failed: FATAL:  no pg_hba.conf entry for replication '
            'connection from host "10.9.9.9", user "cap", no encryption\n',
            "Cannot connect to PostgreSQL at 10.1.2.3:5432: its pg_hba.conf lets user cap make no replication "
            "connection from 10.9.9.9: add the line `host replication cap 10.9.9.9/32 scram-sha-256` to "
            "pg_hba.conf, then SELECT pg_reload_conf().",
        ),
        (
            'connection to server on socket "/run/postgresql/.s.PGSQL.5432" failed: No such file or directory\n'
            "\tIs the server running locally and accepting connections on that socket?\n",
            "Cannot connect to PostgreSQL at the socket /run/postgresql/.s.PGSQL.5432: nothing listens there: "
            "start the server, or fix the host and port in --source.",
        ),
        (
            'connection to server at "db" (10.0.0.5), port 5432 failed: FATAL:  must be superuser or replication '
            "role to start walsender\n",
            "Cannot connect to PostgreSQL at db:5432: the user may not replicate: ALTER ROLE <user> REPLICATION.",
        ),
        (
            'connection to server at "db" (10.0.0.5), port 5432 failed: fe_sendauth: no password supplied\n',
            "Cannot connect to PostgreSQL at db:5432: the server asks for a password and none was given: put it "
            "in --source (postgresql://user:PASSWORD@host/db or password=...), PGPASSWORD or ~/.pgpass.",
        ),
    ],
)
def test_a_refused_connection_names_its_fix(message: str, expected: str) -> None:
    assert connection_problem(message) == expected
