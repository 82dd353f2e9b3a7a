"""``cdclake init`` as pure functions: which tables, the configuration text, and adding new tables
to a file. No I/O here (the drift check is ``cdclake.ops.drift``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

import yaml
from yaml.nodes import MappingNode, ScalarNode

from cdclake.errors import ConfigError
from cdclake.identifiers import IDENTIFIER, name_problem
from cdclake.sources.catalog.model import CatalogTable

RESERVED_PREFIX = "_cdc_"


@dataclass(frozen=True)
class BronzeDefaults:
    """The bronze settings written: those of the DMS S3 target endpoint the stack creates
    (template.yaml, ``DmsTargetEndpoint``: DataFormat=csv, AddColumnName=true, TimestampColumnName,
    IncludeOpForFullLoad=false) plus the task's AR_H_CHANGE_SEQ transformation (docs/deploy.md)."""

    path: str = "bronze"
    timestamp_column: str = "dms_commit_ts"
    change_sequence_column: str = "AR_H_CHANGE_SEQ"


@dataclass(frozen=True)
class Selection:
    tables: list[CatalogTable]
    skipped: list[str] = field(default_factory=list)  # one sentence per table left out, and why


def select_tables(tables: Sequence[CatalogTable], include: Sequence[str], exclude: Sequence[str]) -> Selection:
    """Tables whose ``schema.table`` matches an ``include`` glob (all when none) and no ``exclude``
    glob (``fnmatch`` rules, case-sensitive). Tables whose names the configuration cannot hold are
    left out with the reason."""
    chosen: list[CatalogTable] = []
    skipped: list[str] = []
    for table in tables:
        name = table.qualified
        if include and not any(fnmatchcase(name, p) for p in include):
            continue
        if any(fnmatchcase(name, p) for p in exclude):
            continue
        problems = [
            f"'{n}': {problem}"
            for n in (table.schema, table.name, *(c.name for c in table.columns))
            if (problem := name_problem(n))
        ]
        if problems:
            skipped.append(f"{name}: {'; '.join(problems)}")
            continue
        reserved = [c.name for c in table.columns if c.name.lower().startswith(RESERVED_PREFIX)]
        if reserved:
            skipped.append(f"{name}: column(s) {', '.join(reserved)} use cdclake's reserved prefix {RESERVED_PREFIX}")
            continue
        chosen.append(table)
    return Selection(chosen, skipped)


# --------------------------------------------------------------------------- writing

_HEADER = re.compile(r"^# cdclake init \(([a-z]+)\): sha256 ([0-9a-f]{64})\b.*\n")


def _quoted(value: str) -> str:
    return yaml.safe_dump(value, default_style='"', width=1 << 20).strip()


def _name(value: str) -> str:
    """A schema, table or column name as YAML reads it back: plain when it is an identifier."""
    return value if IDENTIFIER.match(value) else _quoted(value)


def silver_targets(tables: Sequence[CatalogTable], taken: Sequence[str] = ()) -> dict[str, str]:
    """``schema.table`` -> silver table name for the tables whose own name another table has too
    (among ``tables`` and the silver names already ``taken``): ``<schema>_<table>`` (``hr_t01``),
    with ``_2``, ``_3``... should that be taken as well. Silver has one database, so two schemas'
    ``t01`` cannot both be ``t01``; names compare case-insensitively, as Spark's catalog does."""
    used = {name.casefold() for name in taken}
    counts: dict[str, int] = {}
    for table in tables:
        counts[table.name.casefold()] = counts.get(table.name.casefold(), 0) + 1
    shared = {name for name, count in counts.items() if count > 1 or name in used}
    used |= {table.name.casefold() for table in tables if table.name.casefold() not in shared}
    targets: dict[str, str] = {}
    for table in tables:
        if table.name.casefold() not in shared:
            continue
        target, number = f"{table.schema}_{table.name}", 1
        while target.casefold() in used:
            number += 1
            target = f"{table.schema}_{table.name}_{number}"
        used.add(target.casefold())
        targets[table.qualified] = target
    return targets


def table_block(table: CatalogTable, indent: int = 2, target: str | None = None) -> list[str]:
    """The lines of one table's entry under ``tables:`` (``target``: a silver name other than the table's)."""
    pad, inner = " " * indent, " " * (indent + 2)
    lines = [f"{pad}{_name(table.qualified)}:"]
    if target is not None:
        lines.append(f"{inner}target: {_name(target)}  # another schema has a table named {_name(table.name)} too")
    key = f"{inner}primary_key: [{', '.join(_name(k) for k in table.key)}]"
    if table.key_source == "primary key":
        lines.append(key)
    elif table.key_source == "unique index":
        lines.append(f"{key}  # no primary key: the unique index DMS uses")
    else:
        lines.append(f"{inner}append_only: true  # no primary key at the source: every change row is appended")
    lines.append(f"{inner}columns:")
    width = max(len(c.name) + len(c.spark_type) for c in table.columns) + 4
    for column in table.columns:
        entry = f'{_name(column.name)}: "{column.spark_type}"'
        lines.append(f"{inner}  {entry.ljust(width)}  # {column.source_type}")
    return lines


def configuration_text(
    engine: str,
    tables: Sequence[CatalogTable],
    bronze: BronzeDefaults,
    database: str,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> str:
    """A whole configuration: bronze as the stack's DMS endpoint writes, silver, the globs the
    tables were chosen with, every table (``silver_targets`` names the ones sharing a name). The
    first line carries a checksum of the rest, so a later ``init`` can tell a hand-edited file."""
    body = [
        "bronze:  # the DMS S3 target endpoint of the stack (template.yaml: DmsTargetEndpoint)",
        f"  path: {_quoted(bronze.path)}",
        "  format: csv                 # DataFormat",
        "  csv_header: true            # AddColumnName: each file names its columns",
        '  csv_delimiter: ","          # CsvDelimiter',
        '  csv_null_value: ""          # DMS writes NULL as an empty unquoted field',
        "  include_op_for_full_load: false",
        f"  timestamp_column: {bronze.timestamp_column}    # TimestampColumnName",
        f"  change_sequence_column: {bronze.change_sequence_column}  # the task's $AR_H_CHANGE_SEQ column",
        "silver:",
        f"  database: {database}",
    ]
    if include or exclude:
        body.append("source_tables:  # what init --check and init --add-new look at when given no --include/--exclude")
        body.extend(
            f"  {key}: [{', '.join(_quoted(g) for g in globs)}]"
            for key, globs in (("include", include), ("exclude", exclude))
            if globs
        )
    body.append("tables:")
    targets = silver_targets(tables)
    for table in tables:
        body.extend(table_block(table, target=targets.get(table.qualified)))
    return with_header(engine, "\n".join(body) + "\n")


def with_header(engine: str, body: str) -> str:
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    header = (
        f"# cdclake init ({engine}): sha256 {digest}. Columns are in the order DMS writes them, typed as DMS's "
        "output reads; an edited file is not overwritten without --force.\n"
    )
    return header + body


def written_by_init(text: str) -> tuple[str, bool] | None:
    """``(engine, untouched)`` for a file ``init`` wrote (untouched: nobody edited it since), or
    ``None`` for any other file."""
    match = _HEADER.match(text)
    if match is None:
        return None
    body = text[match.end() :]
    return match.group(1), hashlib.sha256(body.encode("utf-8")).hexdigest() == match.group(2)


def add_tables(
    text: str, tables: Sequence[CatalogTable], source: str = "<config>", targets: dict[str, str] | None = None
) -> str:
    """``text`` with ``tables`` appended to its ``tables:`` mapping (``targets``: silver names
    other than the tables' own); everything else (comments, hand edits) is kept byte for byte. A
    file ``init`` wrote and nobody edited keeps a valid checksum."""
    targets = targets or {}
    if not tables:
        return text
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {' '.join(str(exc).split())}") from None
    mapping = None
    if isinstance(root, MappingNode):
        mapping = next(
            (v for k, v in root.value if isinstance(k, ScalarNode) and k.value == "tables"),
            None,
        )
    if not isinstance(mapping, MappingNode) or mapping.flow_style or not mapping.value:
        raise ConfigError(f"{source} has no block-style 'tables:' mapping to add tables to.")
    last_key, last_value = mapping.value[-1]
    indent = last_key.start_mark.column
    end = last_value.end_mark
    # A block value ends where the next token starts: at a line start, or inside the last line.
    insert_at = end.index if end.column == 0 else _line_end(text, end.index)
    if end.column != 0 and insert_at == len(text) and not text.endswith("\n"):
        text += "\n"
        insert_at = len(text)
    elif end.column != 0:
        insert_at += 1
    addition = "".join(
        line + "\n" for table in tables for line in table_block(table, indent, targets.get(table.qualified))
    )
    new_text = text[:insert_at] + addition + text[insert_at:]
    origin = written_by_init(text)
    if origin is not None and origin[1]:
        match = _HEADER.match(new_text)
        assert match is not None
        return with_header(origin[0], new_text[match.end() :])
    return new_text


def _line_end(text: str, index: int) -> int:
    end = text.find("\n", index)
    return len(text) if end < 0 else end
