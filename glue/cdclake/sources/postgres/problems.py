"""What a PostgreSQL source lacks for capture or verify, as one sentence that names the fix.

A user meets these first: a server that does not answer, a wrong password, a user without the grants
capture needs, ``wal_level`` not ``logical``, no replication slot to spare. Each is said in one line
with the SQL (or the setting) that fixes it, never as a driver traceback:

* ``connection_problem``: libpq's reason a connection failed (psycopg2 and pg8000 give the same server
  messages), with the fix.
* ``capture_problems`` / ``read_problems``: asked of the server before capture or verify starts, so
  every missing grant is named at once and nothing is half done; ``source_problem`` turns an error
  met later (a grant revoked while capture runs) into the same kind of sentence.

docs/capture.md ("What capture needs") lists the same grants; the messages point there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cdclake.errors import CdclakeError
from cdclake.identifiers import quote_pg

DOCS = 'docs/capture.md, "What capture needs"'


class CaptureError(CdclakeError):
    """Capture cannot go on without losing or corrupting changes (the message says what to do)."""


class SourceAccessError(CaptureError):
    """The source database refuses what capture or verify needs (the message has the fix)."""


def sql_name(name: str) -> str:
    """``name`` as it is written in SQL: bare when PostgreSQL reads it back unchanged, else quoted."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else quote_pg(name)


def qualified_sql(qualified: str) -> str:
    schema, _, table = qualified.partition(".")
    return f"{sql_name(schema)}.{sql_name(table)}"


# --------------------------------------------------------------------------- connecting

_SERVER = re.compile(
    r'connection to server (?:at "(?P<host>[^"]*)"(?: \([^)]*\))?, port (?P<port>\d+)|on socket "(?P<socket>[^"]*)")'
    r" failed: "
)
_QUOTED = r'"([^"]*)"'


def connection_problem(message: str, where: str = "") -> str:
    """libpq's (or pg8000's) reason a connection failed -> one sentence with the fix. ``where``
    says where the server was looked for when the message does not (pg8000's do not)."""
    text = " ".join(message.replace("FATAL:", " ").split())
    if (server := _SERVER.search(text)) is not None:
        where = f"the socket {server['socket']}" if server["socket"] else f"{server['host']}:{server['port']}"
        text = text[server.end() :]
    reason = text.split(" Is the server running")[0].strip().rstrip(".")
    at = f"PostgreSQL at {where}" if where else "PostgreSQL"
    lowered = reason.lower()
    if "connection refused" in lowered or (where.startswith("the socket") and "no such file" in lowered):
        fix = "nothing listens there: start the server, or fix the host and port in --source"
    elif "could not translate host name" in lowered or "name or service not known" in lowered:
        fix = f"{reason}: fix the host in --source"
    elif "timeout expired" in lowered or "timed out" in lowered:
        fix = "no answer: check the host and port in --source, and that no firewall is in the way"
    elif match := re.search(r"password authentication failed for user " + _QUOTED, reason):
        fix = (
            f"the server refused the password of user {match[1]}: give the right one in --source "
            f"(postgresql://{match[1]}:PASSWORD@host/db or password=...), PGPASSWORD or ~/.pgpass"
        )
    elif "no password supplied" in lowered:
        fix = (
            "the server asks for a password and none was given: put it in --source "
            "(postgresql://user:PASSWORD@host/db or password=...), PGPASSWORD or ~/.pgpass"
        )
    elif match := re.search(r"role " + _QUOTED + " does not exist", reason):
        fix = (
            f"there is no user {match[1]}: create it (CREATE ROLE {sql_name(match[1])} LOGIN REPLICATION "
            f"PASSWORD '...'; {DOCS}) or fix the user in --source"
        )
    elif match := re.search(r"database " + _QUOTED + " does not exist", reason):
        fix = f"there is no database {match[1]}: fix the database name in --source"
    elif "must be superuser or replication role to start walsender" in lowered:
        fix = "the user may not replicate: ALTER ROLE <user> REPLICATION"
    elif match := re.search(r"no pg_hba\.conf entry for (replication connection from )?host " + _QUOTED, reason):
        user = re.search(r"user " + _QUOTED, reason)
        database = "replication" if match[1] else "all"
        fix = (
            f"its pg_hba.conf lets {f'user {user[1]}' if user else 'this user'} make no "
            f"{'replication ' if match[1] else ''}connection from {match[2]}: add the line "
            f"`host {database} {user[1] if user else 'all'} {match[2]}/32 scram-sha-256` to pg_hba.conf, "
            "then SELECT pg_reload_conf()"
        )
    elif "remaining connection slots are reserved" in lowered or "too many clients" in lowered:
        fix = "it has no connection to spare (max_connections): close idle sessions or raise max_connections"
    elif "max_wal_senders" in lowered:
        fix = f"{reason}: raise max_wal_senders (then restart the server) or end other replication connections"
    else:
        fix = reason or "no reason given"
    return f"Cannot connect to {at}: {fix}."


# --------------------------------------------------------------------------- statements


def source_problem(exc: BaseException, user: str, database: str) -> str:
    """An error PostgreSQL raised on a statement of capture or verify (a psycopg2 error) -> one
    sentence with the fix, for ``user`` on ``database``."""
    diag = getattr(exc, "diag", None)
    message = getattr(diag, "message_primary", None) or str(exc)
    reason = (message.strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
    role = sql_name(user)
    if match := re.fullmatch(r"permission denied for database (.+)", reason):
        fix = f"user {user} may not create publications there: GRANT CREATE ON DATABASE {sql_name(match[1])} TO {role}"
    elif match := re.fullmatch(r"must be owner of table (.+)", reason):
        fix = (
            f"publishing a table takes its owner's rights: GRANT <the owner of {match[1]}> TO {role}, "
            f"or ALTER TABLE {match[1]} OWNER TO {role}"
        )
    elif match := re.fullmatch(r"permission denied for schema (.+)", reason):
        fix = f"GRANT USAGE ON SCHEMA {sql_name(match[1])} TO {role}"
    elif match := re.fullmatch(r"permission denied for table (.+)", reason):
        fix = f"GRANT SELECT ON {match[1]} TO {role} (name it with its schema)"
    elif "must be superuser or replication role" in reason:
        fix = f"user {user} may not replicate: ALTER ROLE {role} REPLICATION"
    elif "wal_level" in reason:
        fix = WAL_LEVEL_FIX
    elif "replication slots are in use" in reason:
        fix = f"{reason}: {SLOTS_FIX}"
    elif match := re.fullmatch(r"must be owner of publication (.+)", reason):
        fix = (
            f"the publication {match[1]} belongs to another user: ALTER PUBLICATION {sql_name(match[1])} "
            f"OWNER TO {role} (or drop it as its owner)"
        )
    else:
        fix = f"see {DOCS}"
    return f"PostgreSQL refused ({database}, user {user}): {reason}; {fix}."


WAL_LEVEL_FIX = (
    "set wal_level = logical (ALTER SYSTEM SET wal_level = logical, then restart the server; on Amazon RDS and "
    "Aurora: rds.logical_replication = 1 in the parameter group)"
)
SLOTS_FIX = (
    "drop one no capture uses (SELECT pg_drop_replication_slot('name')) or raise max_replication_slots "
    "(then restart the server)"
)


# --------------------------------------------------------------------------- asked before starting


@dataclass(frozen=True)
class _Role:
    user: str
    database: str
    superuser: bool
    replication: bool
    create_in_database: bool
    wal_level: str
    free_slots: int
    max_slots: int
    slots: tuple[str, ...]


_ROLE_SQL = """
SELECT current_user, current_database(), r.rolsuper,
       r.rolsuper OR r.rolreplication OR EXISTS (
           SELECT 1 FROM pg_roles m WHERE m.rolname = 'rds_replication' AND pg_has_role(current_user, m.oid, 'MEMBER')),
       has_database_privilege(current_database(), 'CREATE'),
       current_setting('wal_level'),
       current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots),
       current_setting('max_replication_slots')::int,
       ARRAY(SELECT slot_name::text FROM pg_replication_slots ORDER BY slot_name)
FROM pg_roles r WHERE r.rolname = current_user
"""

_TABLES_SQL = """
SELECT n.nspname || '.' || c.relname, n.nspname, pg_get_userbyid(c.relowner),
       (SELECT rolsuper FROM pg_roles WHERE oid = c.relowner),
       has_schema_privilege(n.oid, 'USAGE'), has_table_privilege(c.oid, 'SELECT'),
       pg_has_role(c.relowner, 'USAGE')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname || '.' || c.relname = ANY(%(tables)s) AND c.relkind IN ('r', 'p')
ORDER BY 1
"""


def _role(cur: Any) -> _Role:
    cur.execute(_ROLE_SQL)
    row = cur.fetchone()
    return _Role(
        user=str(row[0]),
        database=str(row[1]),
        superuser=bool(row[2]),
        replication=bool(row[3]),
        create_in_database=bool(row[4]),
        wal_level=str(row[5]),
        free_slots=int(row[6]),
        max_slots=int(row[7]),
        slots=tuple(row[8]),
    )


def _table_grants(cur: Any, role: _Role, tables: Sequence[str], publish: Sequence[str]) -> list[str]:
    """The statements that give ``role`` read access to ``tables`` and owner's rights over ``publish``."""
    cur.execute(_TABLES_SQL, {"tables": sorted({*tables, *publish})})
    user = sql_name(role.user)
    schemas: list[str] = []
    selects: list[str] = []
    owners: dict[str, list[str]] = {}
    new_owner: list[str] = []
    for qualified, schema, owner, owner_is_superuser, usage, select, owns in cur.fetchall():
        if not usage and schema not in schemas:
            schemas.append(schema)
        if qualified in publish and not owns:
            if owner_is_superuser:
                new_owner.append(qualified)  # a superuser's rights are not for lending: the table changes hands
                continue
            owners.setdefault(owner, []).append(qualified)
        if not select and not (qualified in publish and not owns and owner_is_superuser):
            selects.append(qualified)
    statements = [f"GRANT USAGE ON SCHEMA {sql_name(s)} TO {user}" for s in schemas]
    if selects:
        statements.append(f"GRANT SELECT ON {', '.join(map(qualified_sql, selects))} TO {user}")
    statements += [f"GRANT {sql_name(owner)} TO {user}" for owner in owners]
    statements += [f"ALTER TABLE {qualified_sql(t)} OWNER TO {user}" for t in new_owner]
    return statements


def capture_problems(conn: Any, tables: Sequence[str], publish: Sequence[str], new_slot: bool) -> str | None:
    """What keeps the user of ``conn`` from capturing: reading ``tables`` (``schema.table``),
    publishing ``publish`` (they need their owner's rights and a database where publications may be
    created), replicating, and, when ``new_slot``, a replication slot to spare. None: nothing."""
    with conn.cursor() as cur:
        role = _role(cur)
        grants = [] if role.superuser else _table_grants(cur, role, tables, publish)
    user = sql_name(role.user)
    settings = _replication_problems(role, grants, new_slot)
    if publish and not role.create_in_database and not role.superuser:
        grants.insert(0, f"GRANT CREATE ON DATABASE {sql_name(role.database)} TO {user}")
    return _sentence(role, "capture", settings, grants)


def _replication_problems(role: _Role, grants: list[str], new_slot: bool) -> list[str]:
    """The settings that keep ``role`` from decoding changes (``new_slot``: in a slot it creates); the grant it
    lacks goes first into ``grants``."""
    settings: list[str] = []
    if role.wal_level != "logical":
        settings.append(f"its wal_level is {role.wal_level}: {WAL_LEVEL_FIX}")
    if new_slot and role.free_slots < 1:
        in_use = ", ".join(role.slots) or "none listed"
        settings.append(f"all {role.max_slots} replication slots are in use ({in_use}): {SLOTS_FIX}")
    if not role.replication:
        grants.insert(0, f"ALTER ROLE {sql_name(role.user)} REPLICATION")
    return settings


def read_problems(conn: Any, tables: Sequence[str], at_cut: bool = False) -> str | None:
    """What keeps the user of ``conn`` from reading ``tables`` (for verify; ``at_cut``: for ``verify --cut``,
    which also makes a temporary logical slot). None: nothing."""
    with conn.cursor() as cur:
        role = _role(cur)
        grants = [] if role.superuser else _table_grants(cur, role, tables, ())
    if conn.status != 1:  # not autocommit: end the transaction the queries opened
        conn.rollback()
    settings = _replication_problems(role, grants, new_slot=True) if at_cut else []
    return _sentence(role, "verify --cut" if at_cut else "verify", settings, grants)


def _sentence(role: _Role, purpose: str, settings: list[str], grants: list[str]) -> str | None:
    """One sentence: the settings to change, then the statements a superuser runs (None: neither)."""
    if not settings and not grants:
        return None
    parts = [*settings, *([f"as a superuser, run: {'; '.join(grants)}"] if grants else [])]
    return f"Database {role.database} is not ready for {purpose} as user {role.user}: {'; '.join(parts)} (see {DOCS})."
