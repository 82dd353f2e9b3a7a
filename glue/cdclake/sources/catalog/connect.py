"""Where the source database is (a URL, a Glue JDBC URL, a Secrets Manager secret) and opening it.

Drivers are small pure-Python ones, imported only when used: pg8000 (PostgreSQL), PyMySQL (MySQL,
MariaDB), python-tds (SQL Server). Every failure to reach or log in becomes one sentence
(``SourceCatalogError``), never a driver traceback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from cdclake.config import BronzeFormat
from cdclake.sources.catalog.model import ENGINES, CatalogTable, DatabaseEngine, SourceCatalogError

_SCHEMES: dict[str, DatabaseEngine] = {
    "postgres": "postgres",
    "postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlserver": "sqlserver",
    "mssql": "sqlserver",
}
_DEFAULT_PORTS: dict[DatabaseEngine, int] = {"postgres": 5432, "mysql": 3306, "sqlserver": 1433}
# Secrets Manager's database secret "engine" values (RDS's format) -> ours.
_SECRET_ENGINES: dict[str, DatabaseEngine] = {
    **_SCHEMES,
    "aurora-postgresql": "postgres",
    "aurora-mysql": "mysql",
    "aurora": "mysql",
    "sqlserver-se": "sqlserver",
    "sqlserver-ee": "sqlserver",
    "sqlserver-ex": "sqlserver",
    "sqlserver-web": "sqlserver",
}
CONNECT_TIMEOUT_SECONDS = 15.0


@dataclass(frozen=True)
class SourceAddress:
    engine: DatabaseEngine
    host: str
    port: int
    database: str
    user: str = ""
    password: str = field(default="", repr=False)
    options: tuple[tuple[str, str], ...] = ()  # URL query parameters, e.g. sslmode=require

    def describe(self) -> str:
        """For messages: never the password."""
        return f"{self.engine} at {self.host}:{self.port} (database {self.database or 'default'})"


def parse_source_url(url: str) -> SourceAddress:
    """``postgresql://user:password@host:5432/db``, ``mysql://...`` (or ``mariadb://``),
    ``sqlserver://...`` (or ``mssql://``); ``jdbc:`` URLs of those engines are accepted too."""
    if not url:
        raise SourceCatalogError(
            "No source database given: pass --source postgresql://user@host:5432/db (or mysql://, sqlserver://, "
            "or a libpq string: host=... dbname=...), or set CDCLAKE_SOURCE."
        )
    text = url[len("jdbc:") :] if url.startswith("jdbc:") else url
    # SQL Server's JDBC form puts properties after semicolons: sqlserver://host:1433;databaseName=db
    text, *properties = text.split(";")
    settings = dict(p.split("=", 1) for p in properties if "=" in p)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise SourceCatalogError(f"The source URL is not valid: {exc}.") from None
    engine = _SCHEMES.get(parts.scheme.lower())
    if engine is None or not parts.hostname:
        raise SourceCatalogError(
            f"The source URL must look like postgresql://user@host:5432/db, mysql://... or sqlserver://...; "
            f"got '{_without_password(url)}'."
        )
    database = unquote(parts.path.lstrip("/"))
    options = tuple(parse_qsl(parts.query))
    database = settings.get("databaseName", settings.get("database", database))
    return SourceAddress(
        engine=engine,
        host=parts.hostname,
        port=port or _DEFAULT_PORTS[engine],
        database=database,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        options=options,
    )


# libpq's key=value connection string: ``host=db port=5432 dbname=shop user=reader password='a b'``.
_CONNINFO_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)")


def is_conninfo(text: str) -> bool:
    """A libpq key=value string rather than a URL."""
    return "://" not in text and "=" in text


def parse_source(text: str) -> SourceAddress:
    """Where the source is, in either form ``init``, ``capture`` and ``verify`` accept: a URL (see
    ``parse_source_url``) or a libpq key=value connection string (PostgreSQL; a missing host is
    ``localhost``, a host that starts with ``/`` is a Unix-socket directory)."""
    if not is_conninfo(text):
        return parse_source_url(text)
    pairs: dict[str, str] = {}
    position = 0
    while position < len(text.rstrip()):
        match = _CONNINFO_PAIR.match(text, position)
        if match is None:
            # Nothing of the text is quoted back: it may hold a password.
            raise SourceCatalogError(
                f"The connection string is not valid after its first {position} characters: write key=value "
                "pairs (host=db port=5432 dbname=shop user=reader; a quoted value ends with a quote)."
            )
        value = match.group(2)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs[match.group(1).lower()] = value
        position = match.end()
    try:
        port = int(pairs.pop("port", "") or _DEFAULT_PORTS["postgres"])
    except ValueError:
        raise SourceCatalogError("The connection string's port is not a number.") from None
    host = pairs.pop("host", "") or pairs.pop("hostaddr", "") or "localhost"
    return SourceAddress(
        engine="postgres",
        host=host,
        port=port,
        database=pairs.pop("dbname", ""),
        user=pairs.pop("user", ""),
        password=pairs.pop("password", ""),
        options=tuple(sorted(pairs.items())),
    )


def libpq_dsn(text: str) -> str:
    """The source as libpq (psycopg2, for ``capture`` and PostgreSQL's ``verify``) takes it: empty (the PG*
    environment variables), a key=value string, or a ``postgresql://`` URL (a ``jdbc:`` prefix is
    dropped). Another engine's URL is refused with one sentence."""
    if not text or is_conninfo(text):
        return text
    url = text[len("jdbc:") :] if text.startswith("jdbc:") else text
    engine = _SCHEMES.get(urlsplit(url).scheme.lower())
    if engine is None:
        parse_source_url(text)  # raises its sentence on what a source URL looks like
    if engine != "postgres":
        raise SourceCatalogError(f"capture reads PostgreSQL only; the source is {engine} ({_without_password(text)}).")
    return url  # libpq reads the URL itself: postgresql:///db (a Unix socket) is fine there


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def address_from_secret(
    secret: Mapping[str, Any], engine: str | None = None, database: str | None = None, jdbc_url: str | None = None
) -> SourceAddress:
    """A Secrets Manager database secret (``username``, ``password``, and ``host``/``port``/``dbname``/
    ``engine`` as RDS writes them). A Glue connection's JDBC URL, the stack's ``SourceEngine`` and
    ``SourceDatabaseName`` fill in what the secret leaves out (the URL's host wins: it is the one the
    job's network reaches)."""
    base = parse_source_url(jdbc_url) if jdbc_url else None
    engine_name = str(secret.get("engine") or engine or (base.engine if base else "")).lower()
    resolved = _SECRET_ENGINES.get(engine_name) or (base.engine if base else None)
    if resolved is None:
        raise SourceCatalogError(
            f"The source engine '{engine_name or 'unset'}' is not one of {', '.join(ENGINES)} "
            "(set the secret's 'engine' or the stack's SourceEngine)."
        )
    host = base.host if base else str(secret.get("host") or "")
    if not host:
        raise SourceCatalogError("The source secret has no 'host' and no Glue connection gives one.")
    port = base.port if base else int(secret.get("port") or _DEFAULT_PORTS[resolved])
    return SourceAddress(
        engine=resolved,
        host=host,
        port=port,
        database=database or (base.database if base and base.database else str(secret.get("dbname") or "")),
        user=str(secret.get("username") or (base.user if base else "")),
        password=str(secret.get("password") or (base.password if base else "")),
    )


def connect(address: SourceAddress, timeout: float = CONNECT_TIMEOUT_SECONDS) -> Any:
    """An open DB-API connection (autocommit, read only in practice: only catalog SELECTs run);
    ``timeout`` seconds to connect and log in."""
    try:
        if address.engine == "postgres":
            return _connect_postgres(address, timeout)
        if address.engine == "mysql":
            return _connect_mysql(address, timeout)
        return _connect_sqlserver(address, timeout)
    except ImportError as exc:
        raise SourceCatalogError(
            f"The driver for {address.engine} is not installed ({exc.name}): pip install 'cdclake[sources]'."
        ) from None
    except OSError as exc:  # refused, unreachable, timed out, unknown host
        reason = f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError) else _reason(exc)
        if address.engine == "postgres":
            raise SourceCatalogError(_postgres_problem(reason, address)) from None
        raise SourceCatalogError(f"Cannot reach {address.describe()}: {reason}.") from None
    except Exception as exc:  # each driver's own error classes: bad login, unknown database, TLS
        if address.engine == "postgres":
            # pg8000 wraps the socket's error ("Can't create a connection to host ..."): its cause says why
            cause = exc.__cause__
            reason = _reason(cause) if isinstance(cause, OSError) else _reason(exc)
            raise SourceCatalogError(_postgres_problem(reason, address)) from None
        raise SourceCatalogError(f"Cannot connect to {address.describe()}: {_reason(exc)}.") from None


def _connect_postgres(address: SourceAddress, timeout: float) -> Any:
    """pg8000, over TLS as ``sslmode`` asks (``require``: unverified), or through the Unix socket of
    a host that is a directory."""
    import pg8000.dbapi

    options = dict(address.options)
    ssl_context: Any = None
    if options.get("sslmode") in ("require", "verify-ca", "verify-full"):
        import ssl

        ssl_context = ssl.create_default_context()
        if options["sslmode"] == "require":
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
    socket_dir = address.host if address.host.startswith("/") else None
    conn = pg8000.dbapi.connect(
        user=address.user or "postgres",
        password=address.password or None,
        host=address.host if socket_dir is None else "localhost",
        unix_sock=f"{socket_dir}/.s.PGSQL.{address.port}" if socket_dir else None,
        port=address.port,
        database=address.database or None,
        timeout=timeout,
        ssl_context=ssl_context,
    )
    conn.autocommit = True
    return conn


def _connect_mysql(address: SourceAddress, timeout: float) -> Any:
    """PyMySQL (MySQL and MariaDB), in utf8mb4."""
    import pymysql

    return pymysql.connect(
        host=address.host,
        port=address.port,
        user=address.user or "root",
        password=address.password,
        database=address.database or None,
        connect_timeout=max(1, round(timeout)),
        autocommit=True,
        charset="utf8mb4",
    )


def _connect_sqlserver(address: SourceAddress, timeout: float) -> Any:
    """python-tds (SQL Server)."""
    import pytds

    return pytds.connect(
        dsn=address.host,
        port=address.port,
        database=address.database or None,
        user=address.user,
        password=address.password,
        login_timeout=max(1, round(timeout)),
        autocommit=True,
    )


def _postgres_problem(reason: str, address: SourceAddress) -> str:
    """The sentence capture and verify give for the same failure (libpq's and pg8000's server
    messages are the same), with its fix."""
    from cdclake.sources.postgres.problems import connection_problem

    if "timed out" in reason or reason.startswith("no answer"):
        reason = "timeout expired"
    return connection_problem(reason, f"{address.host}:{address.port} (database {address.database or 'default'})")


def _reason(exc: BaseException) -> str:
    """A driver error as one short phrase (pg8000 passes a dict of the server's fields)."""
    if exc.args and isinstance(exc.args[0], dict):
        return str(exc.args[0].get("M", exc.args[0]))
    if len(exc.args) >= 2 and isinstance(exc.args[0], int):  # PyMySQL: (code, message)
        return str(exc.args[1])
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text.rstrip(".")


def read_catalog(
    address: SourceAddress, bronze_format: BronzeFormat = "csv", timeout: float = CONNECT_TIMEOUT_SECONDS
) -> list[CatalogTable]:
    """Connect, read every table's columns and key, close."""
    from cdclake.sources.catalog.readers import read_mysql, read_postgres, read_sqlserver

    conn = connect(address, timeout)
    try:
        if address.engine == "postgres":
            return read_postgres(conn, bronze_format)
        if address.engine == "mysql":
            return read_mysql(conn, bronze_format)
        return read_sqlserver(conn, bronze_format)
    except SourceCatalogError:
        raise
    except Exception as exc:  # a permission the user lacks on a catalog view, a lost connection
        raise SourceCatalogError(f"Cannot read the catalog of {address.describe()}: {_reason(exc)}.") from None
    finally:
        conn.close()
