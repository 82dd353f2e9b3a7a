"""The source engine's ``SourceDialect`` for ``cdclake verify``, chosen by where the source is.

``--source`` / ``CDCLAKE_SOURCE`` as ``sources.catalog.connect.parse_source`` reads it: PostgreSQL
(a ``postgresql://`` URL, a libpq key=value string, or empty: the ``PG*`` variables) through
psycopg2, as capture reads it; MariaDB/MySQL (``mysql://``, ``mariadb://``) through PyMySQL and
SQL Server (``sqlserver://``, ``mssql://``) through python-tds, as ``init`` connects to them.
``open_dialect_at`` takes an address already resolved (a Secrets Manager secret's, on AWS).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cdclake.sources.catalog.connect import (
    CONNECT_TIMEOUT_SECONDS,
    SourceAddress,
    connect,
    is_conninfo,
    libpq_dsn,
    parse_source,
)
from cdclake.verify.dialect import SourceDialect


@contextmanager
def open_dialect(source: str) -> Iterator[SourceDialect[Any]]:
    """The dialect of the source database ``source`` names, on a connection closed at the end."""
    if not source or is_conninfo(source) or parse_source(source).engine == "postgres":
        with _postgres(libpq_dsn(source)) as dialect:
            yield dialect
    else:
        with open_dialect_at(parse_source(source)) as dialect:
            yield dialect


@contextmanager
def open_dialect_at(address: SourceAddress) -> Iterator[SourceDialect[Any]]:
    """The dialect of the source database at ``address``, on a connection closed at the end."""
    if address.engine == "postgres":
        with _postgres(conninfo(address)) as dialect:
            yield dialect
        return
    from cdclake.verify.mysql.dialect import MysqlDialect
    from cdclake.verify.sqlserver.dialect import SqlServerDialect

    conn = connect(address)
    try:
        yield MysqlDialect(conn) if address.engine == "mysql" else SqlServerDialect(conn)
    finally:
        conn.close()


@contextmanager
def _postgres(dsn: str) -> Iterator[SourceDialect[Any]]:
    from cdclake.sources.postgres.settings import connect as connect_pg
    from cdclake.verify.postgres.dialect import PostgresDialect

    conn = connect_pg(dsn)
    try:
        yield PostgresDialect(conn)
    finally:
        conn.close()


def conninfo(address: SourceAddress, timeout: float = CONNECT_TIMEOUT_SECONDS) -> str:
    """A PostgreSQL address as the libpq key=value string psycopg2 takes (every value quoted), with ``timeout``
    seconds to connect."""
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


def _quoted(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"
