"""SQL identifiers: the one rule names must follow, and the one way to quote them."""

from __future__ import annotations

import re

# Names of databases, tables and columns cdclake accepts unquoted in its configuration.
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


def quote(identifier: str) -> str:
    """``name`` -> `` `name` `` for Spark SQL, with embedded backticks doubled."""
    return "`" + identifier.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal: in single quotes, with quotes and backslashes escaped."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def procedure_table(database: str, table: str) -> str:
    """The ``table =>`` argument of an Iceberg procedure (``CALL catalog.system.rewrite_data_files``):
    a string Iceberg parses as a multipart identifier, so each part is backtick-quoted inside it
    (Iceberg's procedures accept ``'`db.with-special`.`table.with-special`'``, apache/iceberg#5112)."""
    return sql_string(f"{quote(database)}.{quote(table)}")


def quote_pg(identifier: str) -> str:
    """``name`` -> ``"name"`` for PostgreSQL, with embedded double quotes doubled."""
    return '"' + identifier.replace('"', '""') + '"'


# Characters no schema, table or column name may hold: "." separates the parts of a name,
# "/", "\" and ":" would break the bronze and warehouse paths named after it (Hadoop reads ":" in
# a path as a URI scheme). Everything else DMS writes (hyphens, spaces, "$", "#", non-ASCII
# letters) is quoted with backticks wherever cdclake names it in Spark SQL.
_NOT_ALLOWED = "./\\:"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a schema, table or column, naming the character (None: it can)."""
    if not name:
        return "a name cannot be empty"
    if name != name.strip():
        return "a name cannot start or end with a space"
    for position, character in enumerate(name, start=1):
        if character in _NOT_ALLOWED:
            return f"the character '{character}' (position {position}) is not allowed in a name"
        if not character.isprintable():
            return f"the character U+{ord(character):04X} (position {position}) is not allowed in a name"
    return None
