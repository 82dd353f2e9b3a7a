"""The source engine's ``SourceDialect`` for ``cdclake verify``, chosen by where the source is.

``--source`` / ``CDCLAKE_SOURCE`` as ``sources.catalog.connect.parse_source`` reads it: PostgreSQL
(a ``postgresql://`` URL, a libpq key=value string, or empty: the ``PG*`` variables) through
psycopg2, as capture reads it; MariaDB/MySQL (``mysql://``, ``mariadb://``) through PyMySQL and
SQL Server (``sqlserver://``, ``mssql://``) through python-tds, as ``init`` connects to them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cdclake.sources.catalog.connect import connect, is_conninfo, libpq_dsn, parse_source
from cdclake.sources.verify import SourceDialect


@contextmanager
def open_dialect(source: str) -> Iterator[SourceDialect[Any]]:
    """The dialect of the source database ``source`` names, on a connection closed at the end."""
    engine = "postgres" if not source or is_conninfo(source) else parse_source(source).engine
    if engine == "postgres":
        from cdclake.sources.postgres.settings import connect as connect_pg
        from cdclake.sources.postgres.verify import PostgresDialect

        conn = connect_pg(libpq_dsn(source))
        dialect: SourceDialect[Any] = PostgresDialect(conn)
    elif engine == "mysql":
        from cdclake.sources.mysql.verify import MysqlDialect

        conn = connect(parse_source(source))
        dialect = MysqlDialect(conn)
    else:
        from cdclake.sources.sqlserver.verify import SqlServerDialect

        conn = connect(parse_source(source))
        dialect = SqlServerDialect(conn)
    try:
        yield dialect
    finally:
        conn.close()
