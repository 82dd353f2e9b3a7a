"""Table references in a mart's SQL, found and substituted without touching strings or comments (pure).

A mart's SQL names silver tables as users know them (``airbnb.hosts_silver``, or catalog-qualified
``silver.airbnb.hosts_silver``, backquotes allowed). To evaluate it against pinned snapshots, or
against only the rows that changed, each reference (also as a column qualifier,
``airbnb.hosts_silver.id``) is replaced by the name of a temporary view.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from cdclake.identifiers import quote


class SqlSyntaxError(ValueError):
    """The text cannot be split into SQL tokens (an unclosed string, comment or quoted name)."""


@dataclass(frozen=True)
class _Token:
    kind: str  # "ident" (plain or backquoted), "dot", "other"
    text: str  # identifiers: the name without quotes
    start: int
    end: int


def _tokens(sql: str) -> Iterator[_Token]:
    """Identifiers, dots and everything else; strings, comments and whitespace are skipped."""
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                raise SqlSyntaxError("a /* comment is not closed")
            i = end + 2
        elif c in "'\"":
            j = i + 1
            while j < n and sql[j] != c:
                j += 2 if sql[j] == "\\" else 1
            if j >= n:
                raise SqlSyntaxError(f"a string starting with {c} is not closed")
            yield _Token("other", sql[i : j + 1], i, j + 1)
            i = j + 1
        elif c == "`":
            j, name = i + 1, []
            while True:
                if j >= n:
                    raise SqlSyntaxError("a `quoted` name is not closed")
                if sql[j] == "`":
                    if sql.startswith("``", j):
                        name.append("`")
                        j += 2
                        continue
                    break
                name.append(sql[j])
                j += 1
            yield _Token("ident", "".join(name), i, j + 1)
            i = j + 1
        elif c.isalnum() or c == "_":
            j = i
            while j < n and (sql[j].isalnum() or sql[j] == "_"):
                j += 1
            yield _Token("ident", sql[i:j], i, j)
            i = j
        elif c == ".":
            yield _Token("dot", ".", i, i + 1)
            i += 1
        else:
            yield _Token("other", c, i, i + 1)
            i += 1


def _chains(sql: str) -> Iterator[list[_Token]]:
    """Dotted name chains (``a.b.c``) as lists of identifier tokens."""
    chain: list[_Token] = []
    after_dot = False
    for token in _tokens(sql):
        if token.kind == "ident" and chain and after_dot:
            chain.append(token)
            after_dot = False
        elif token.kind == "dot" and chain and not after_dot:
            after_dot = True
        else:
            if chain:
                yield chain
            chain = [token] if token.kind == "ident" else []
            after_dot = False
    if chain:
        yield chain


def _match(chain: Sequence[_Token], known: Mapping[str, str], catalog: str) -> tuple[str, int] | None:
    """(table name as known, tokens it spans) if the chain starts with a known table."""
    parts = [t.text.lower() for t in chain]
    lowered = {name.lower(): name for name in known}
    if len(parts) >= 3 and parts[0] == catalog.lower() and f"{parts[1]}.{parts[2]}" in lowered:
        return lowered[f"{parts[1]}.{parts[2]}"], 3
    if len(parts) >= 2 and f"{parts[0]}.{parts[1]}" in lowered:
        return lowered[f"{parts[0]}.{parts[1]}"], 2
    return None


def referenced_tables(sql: str, known: Mapping[str, str], catalog: str = "silver") -> list[str]:
    """The ``known`` names (``database.table``) the SQL reads, in order of first mention."""
    found: list[str] = []
    for chain in _chains(sql):
        hit = _match(chain, known, catalog)
        if hit and hit[0] not in found:
            found.append(hit[0])
    return found


def substitute_tables(sql: str, views: Mapping[str, str], catalog: str = "silver") -> str:
    """The SQL with every reference to a table in ``views`` (``database.table`` -> view name) replaced."""
    pieces: list[str] = []
    last = 0
    for chain in _chains(sql):
        hit = _match(chain, views, catalog)
        if hit:
            name, span = hit
            pieces += [sql[last : chain[0].start], views[name]]
            last = chain[span - 1].end
    pieces.append(sql[last:])
    return "".join(pieces)


def definition_id(sql: str, keys: Sequence[str], partition_by: Sequence[str], consistent: bool) -> str:
    """A short digest of what a mart computes: a change means the next refresh recomputes it in full."""
    text = json.dumps([" ".join(sql.split()), list(keys), list(partition_by), consistent])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def null_safe_match(left: str, right: str, columns: Sequence[str], right_prefix: str = "") -> str:
    """``left.k <=> right.k AND ...``: group keys may be NULL and a NULL key is still one group."""
    return " AND ".join(f"{left}.{quote(c)} <=> {right}.{quote(right_prefix + c)}" for c in columns)


def group_merge_statement(target: str, source_view: str, columns: Sequence[str], keys: Sequence[str]) -> str:
    """One MERGE that replaces the recomputed groups of a mart.

    ``source_view`` holds one row per affected group: the keys as ``_cdc_key_<k>``, ``_cdc_present``
    (NULL when the group no longer exists) and the mart's columns (NULL for a vanished group).
    """
    assignments = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in columns)
    names = ", ".join(quote(c) for c in columns)
    values = ", ".join(f"s.{quote(c)}" for c in columns)
    return (
        f"MERGE INTO {target} t USING {source_view} s ON {null_safe_match('t', 's', keys, '_cdc_key_')} "
        "WHEN MATCHED AND s._cdc_present IS NULL THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {assignments} "
        f"WHEN NOT MATCHED AND s._cdc_present IS NOT NULL THEN INSERT ({names}) VALUES ({values})"
    )
