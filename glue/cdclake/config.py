"""The table configuration file: one YAML document read once, validated, and passed down.

Every mistake names its line: unknown keys, bad types, missing primary keys in the column list. Each key is
declared once in ``config_settings.py`` (with the table and bronze values it fills); this module reads the
file with those declarations and checks what spans keys (a key and append_only, history without a key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node

from cdclake.columns import HISTORY_SUFFIX
from cdclake.config_settings import DEFAULTS, keys, read_section, top_keys
from cdclake.config_settings import LAYOUTS as LAYOUTS
from cdclake.config_settings import BronzeFormat as BronzeFormat
from cdclake.config_settings import BronzeSettings as BronzeSettings
from cdclake.config_settings import CleaningRules as CleaningRules
from cdclake.config_settings import Layout as Layout
from cdclake.config_settings import StoreSettings as StoreSettings
from cdclake.config_settings import TableConfig as TableConfig
from cdclake.errors import ConfigError
from cdclake.identifiers import name_problem
from cdclake.mart_config import GoldSettings, parse_gold, with_silver_database
from cdclake.types import fraction_digits
from cdclake.yaml_doc import YamlDoc

# The Iceberg catalog silver tables live in, locally and on AWS Glue.
DEFAULT_CATALOG = "silver"


@dataclass(frozen=True)
class PipelineConfig:
    bronze: BronzeSettings
    database: str
    tables: tuple[TableConfig, ...]
    # The sections cdc, quarantine and source_tables (``config_settings.SETTINGS``).
    max_files_per_batch: int = DEFAULTS["cdc.max_files_per_batch"]
    cut_tag_days: int = DEFAULTS["silver.cut_tag_days"]  # the dated tags of a published cut (``lake.cuts``)
    max_batch_bytes: int = DEFAULTS["cdc.max_batch_mb"]
    max_bad_row_ratio: float = DEFAULTS["quarantine.max_bad_row_ratio"]
    # None: ``Engine.parallel_tables`` decides.
    parallel_tables: int | None = DEFAULTS["cdc.parallel_tables"]
    gold: GoldSettings = field(default_factory=GoldSettings)  # the gold database and its marts
    # ``init --check`` and ``init --add-new`` use these globs when given none.
    source_include: tuple[str, ...] = DEFAULTS["source_tables.include"]
    source_exclude: tuple[str, ...] = DEFAULTS["source_tables.exclude"]

    def table(self, name: str) -> TableConfig:
        """Find a table by source name (``schema.table``), source table name or silver name."""
        for table in self.tables:
            if name in (table.source, table.source_table, table.target):
                return table
        from cdclake.errors import UnknownTableError

        known = ", ".join(t.source for t in self.tables) or "none"
        raise UnknownTableError(f"Table '{name}' is not in the configuration (known: {known}).")

    def in_database(self, database: str) -> PipelineConfig:
        """The same configuration with silver in ``database`` (the AWS stack's, a test's): the
        marts' SQL, written with ``silver.database``'s table names, reads the new database too."""
        if database == self.database:
            return self
        known = readable_tables(self.database, self.tables)
        return replace(self, database=database, gold=with_silver_database(self.gold, known, database))

    def table_for_source(self, schema: str, table: str) -> TableConfig | None:
        for candidate in self.tables:
            if candidate.source_schema == schema and candidate.source_table == table:
                return candidate
        return None


def _parse_bronze(doc: YamlDoc, node: Node | None) -> BronzeSettings:
    if node is None:
        return BronzeSettings()
    fields = doc.mapping(node, "bronze", keys("bronze"))
    values = read_section(doc, fields, "bronze", "bronze")
    return BronzeSettings(**values, s3=_parse_s3(doc, fields.get("s3")))


def _parse_s3(doc: YamlDoc, node: Node | None) -> StoreSettings:
    """``bronze.s3``: how patiently bronze on S3 is read (botocore retries, timeouts, body resumes)."""
    if node is None:
        return StoreSettings()
    fields = doc.mapping(node, "bronze.s3", keys("bronze.s3"))
    return StoreSettings(**read_section(doc, fields, "bronze.s3", "bronze.s3"))


def _parse_clean(doc: YamlDoc, node: Node | None, where: str, columns: dict[str, str]) -> CleaningRules:
    if node is None:
        return CleaningRules()
    fields = doc.mapping(node, where, keys("table.clean"))
    values = read_section(doc, fields, "table.clean", where)
    derive: dict[str, str] = {}
    if "derive" in fields:
        for name, expr in doc.free_mapping(fields["derive"], f"{where}.derive").items():
            problem = name_problem(name)
            if problem:
                raise doc.fail(expr, f"derived column name '{name}' is not valid: {problem}")
            derive[name] = doc.scalar(expr, f"expression of derived column '{name}'")
    rename: dict[str, str] = {}
    if "rename" in fields:
        for old, new in doc.free_mapping(fields["rename"], f"{where}.rename").items():
            rename[old] = doc.identifier(new, f"new name of '{old}'")
    types = {**columns, **values.get("cast", {})}
    for name in values.get("round", ()):
        if name not in types or fraction_digits(types[name]) is None:
            raise doc.fail(
                fields["round"],
                f"{where}.round names '{name}', which columns or cast do not declare as an integer or decimal type",
            )
    return CleaningRules(**values, derive=derive, rename=rename)


def _table_name(doc: YamlDoc, source_node: Node) -> tuple[str, str]:
    """A ``tables`` key: ``schema.table``, each part a name cdclake can use."""
    source = doc.scalar(source_node, "a table name")
    parts = source.split(".")
    if len(parts) != 2:
        raise doc.fail(source_node, f"table '{source}' must be written as schema.table")
    for part in parts:
        problem = name_problem(part)
        if problem:
            raise doc.fail(source_node, f"table '{source}': '{part}' cannot be a schema or table name: {problem}")
    return parts[0], parts[1]


def _parse_table(doc: YamlDoc, source_node: Node, node: Node, bronze: BronzeSettings) -> TableConfig:
    schema, name = _table_name(doc, source_node)
    where = f"table {schema}.{name}"
    fields = doc.mapping(node, where, keys("table")) if node.tag != "tag:yaml.org,2002:null" else {}
    values = read_section(doc, fields, "table", where)
    key = values.get("primary_key", ())
    if key and values.get("append_only"):
        raise doc.fail(fields["append_only"], f"{where} has a primary key and append_only: choose one")
    if values.get("history") and not key:
        raise doc.fail(fields["history"], f"{where}.history needs a primary_key (versions are kept per key)")
    values.setdefault("layout", "sorted" if key else "none")
    if "layout" in fields and values["layout"] != "none" and not key:
        raise doc.fail(fields["layout"], f"{where}.layout clusters by the primary key: declare primary_key")
    columns = values.get("columns", {})
    missing = [k for k in key if k not in columns]
    if columns and missing:
        raise doc.fail(fields["primary_key"], f"primary key column(s) {', '.join(missing)} not in {where}.columns")
    if bronze.format == "csv" and not bronze.csv_header and not columns:
        raise doc.fail(
            node if fields else source_node,
            f"{where} needs 'columns' (names and types in file order) because bronze CSV files have no header",
        )
    values.setdefault("target", name)
    clean = _parse_clean(doc, fields.get("clean"), f"{where}.clean", columns)
    return TableConfig(source_schema=schema, source_table=name, clean=clean, **values)


def gold_database(config: PipelineConfig) -> str:
    """Where the marts live: ``gold.database``, by default the silver database name + ``_gold``."""
    return config.gold.database or f"{config.database}_gold"


def readable_tables(database: str, tables: Sequence[TableConfig]) -> dict[str, str]:
    """``database.table`` names a mart may read -> silver table name (history tables included)."""
    names: dict[str, str] = {}
    for table in tables:
        names[f"{database}.{table.target}"] = table.target
        if table.history:
            names[f"{database}.{table.target}{HISTORY_SUFFIX}"] = f"{table.target}{HISTORY_SUFFIX}"
    return names


def _yaml_error(exc: yaml.YAMLError, text: str, source: str) -> ConfigError:
    """One sentence with the line (and column) for a YAML syntax error; PyYAML's own text spans
    several lines and names "<unicode string>" instead of the file."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = f"{exc.problem} ({exc.context})" if exc.context else str(exc.problem)
        return ConfigError(f"{source}, line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}")
    if isinstance(exc, yaml.reader.ReaderError):
        line = text[: exc.position].count("\n") + 1
        return ConfigError(f"{source}, line {line}: not valid YAML: character {exc.character!r} is not allowed")
    return ConfigError(f"{source}, line 1: not valid YAML: {' '.join(str(exc).split())}")


def _read_sections(doc: YamlDoc, top: dict[str, Node], sections: tuple[str, ...]) -> dict[str, Any]:
    """The values of the top-level ``sections`` that hold only declared keys, by field name."""
    values: dict[str, Any] = {}
    for section in sections:
        if section in top:
            values |= read_section(doc, doc.mapping(top[section], section, keys(section)), section, section)
    return values


def parse_config(text: str, source: str = "<config>") -> PipelineConfig:
    """Parse and validate a configuration document; raise ``ConfigError`` naming the line."""
    doc = YamlDoc(source)
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, text, source) from None
    except RecursionError:  # nesting deeper than the parser's stack; no configuration is that deep
        raise ConfigError(f"{source}, line 1: not valid YAML: nested too deeply") from None
    if root is None:
        raise ConfigError(f"{source} is empty: it needs at least a 'tables' section.")
    top = doc.mapping(root, "the configuration", top_keys())
    bronze = _parse_bronze(doc, top.get("bronze"))
    values = _read_sections(doc, top, ("silver", "cdc", "quarantine"))
    if "tables" not in top:
        raise doc.fail(root, "the configuration needs a 'tables' section")
    tables_node = top["tables"]
    if not isinstance(tables_node, MappingNode) or not tables_node.value:
        raise doc.fail(tables_node, "'tables' must map schema.table names to their settings")
    seen_sources: set[str] = set()
    for key_node, _ in tables_node.value:
        name = doc.scalar(key_node, "a table name")
        if name in seen_sources:
            raise doc.fail(key_node, f"duplicate table '{name}' in tables")
        seen_sources.add(name)
    tables = tuple(_parse_table(doc, k, v, bronze) for k, v in tables_node.value)
    targets = [t.target for t in tables]
    duplicates = sorted({t for t in targets if targets.count(t) > 1})
    if duplicates:
        raise doc.fail(tables_node, f"several tables write to the same silver table: {', '.join(duplicates)}")
    values |= _read_sections(doc, top, ("source_tables",))
    database = values.pop("database", DEFAULTS["silver.database"])
    gold = parse_gold(doc, top.get("gold"), top.get("marts"), database, readable_tables(database, tables))
    return PipelineConfig(bronze=bronze, database=database, tables=tables, gold=gold, **values)


def load_config(path: Path) -> PipelineConfig:
    """Read the configuration file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"The configuration file {path} does not exist.") from None
    except OSError as exc:
        raise ConfigError(f"The configuration file {path} cannot be read: {exc.strerror}.") from None
    return parse_config(text, str(path))
