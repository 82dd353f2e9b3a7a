"""SQL identifiers: the one rule names must follow, and the one way to quote them."""

from __future__ import annotations

import re

# Names of databases, tables and columns cdclake accepts unquoted in its configuration.
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")


def quote(identifier: str) -> str:
    """``name`` -> `` `name` `` for Spark SQL, with embedded backticks doubled."""
    return "`" + identifier.replace("`", "``") + "`"


def quote_pg(identifier: str) -> str:
    """``name`` -> ``"name"`` for PostgreSQL, with embedded double quotes doubled."""
    return '"' + identifier.replace('"', '""') + '"'
