"""The ``gold:`` and ``marts:`` sections of the configuration, parsed with the same line-numbered errors.

``parse_gold`` is called by ``cdclake.config.parse_config`` with its YAML reader and the silver
tables a mart may read (``readable_tables``), so every mistake names its line like the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cdclake.config_settings import DEFAULTS, read_section
from cdclake.config_settings import keys as section_keys
from cdclake.mart_sql import SqlSyntaxError, referenced_tables, substitute_tables
from cdclake.yaml_doc import YamlDoc

if TYPE_CHECKING:
    from yaml.nodes import Node


@dataclass(frozen=True)
class MartConfig:
    """One gold mart: an Iceberg table in the gold database holding the result of ``sql``.

    ``keys``: the mart's group-by key columns (output columns); with them a refresh recomputes only
    the groups whose source rows changed and MERGEs them, otherwise every refresh is a full
    recompute with an atomic replace. ``consistent``: computed as of one source commit time that
    every table it reads has reached (a full recompute each time).
    """

    name: str
    sql: str
    keys: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    consistent: bool = False


@dataclass(frozen=True)
class GoldSettings:
    # The keys of the gold section (``config_settings.SETTINGS``); the marts are the ``marts`` list.
    database: str | None = DEFAULTS["gold.database"]  # None: "<silver database>_gold"
    marts: tuple[MartConfig, ...] = ()
    # A keyed mart refreshes in full when finding the groups its changes affect reads this share
    # of what a full refresh reads or more (the files the changes touch, the tables joined to a
    # changed one twice): on top of the recomputation, that costs more than the full refresh's
    # aggregation and write it saves (``gold.cost``; docs/benchmarks-journal.md, "Whole databases: the
    # tables of a batch at once").
    full_refresh_share: float = DEFAULTS["gold.full_refresh_share"]
    # ... and when the tables it reads hold less than this: the incremental path's fixed work
    # (about ten Spark jobs and a MERGE) costs more than a full refresh of them (the figures:
    # docs/benchmarks-journal.md, "Figures that were code comments").
    full_refresh_below_bytes: int = DEFAULTS["gold.full_refresh_below_mb"]

    def mart(self, name: str) -> MartConfig:
        from cdclake.errors import UnknownTableError

        for mart in self.marts:
            if mart.name == name:
                return mart
        known = ", ".join(m.name for m in self.marts) or "none"
        raise UnknownTableError(f"Mart '{name}' is not in the configuration (known: {known}).")


def _parse_mart(doc: YamlDoc, node: Node, known: dict[str, str]) -> tuple[MartConfig, Node]:
    fields = doc.mapping(node, "a mart", section_keys("mart"))
    if "name" not in fields:
        raise doc.fail(node, "a mart needs a 'name'")
    name = doc.identifier(fields["name"], "mart name", plain=True)
    where = f"mart {name}"
    if "sql" not in fields:
        raise doc.fail(node, f"{where} needs 'sql' (a Spark SQL SELECT over silver tables)")
    sql = doc.scalar(fields["sql"], f"{where}.sql").strip().rstrip(";").strip()
    first_word = sql.split(None, 1)[0].upper() if sql else ""
    if first_word not in ("SELECT", "WITH", "("):
        raise doc.fail(fields["sql"], f"{where}.sql must be a query (SELECT ... or WITH ...)")
    try:
        tables = referenced_tables(sql, known)
    except SqlSyntaxError as exc:
        raise doc.fail(fields["sql"], f"{where}.sql: {exc}") from None
    if not tables:
        names = ", ".join(sorted(known)) or "none"
        raise doc.fail(fields["sql"], f"{where}.sql reads none of the configured silver tables (write them as {names})")
    keys = doc.identifiers(fields["keys"], f"{where}.keys") if "keys" in fields else ()
    if len(set(keys)) != len(keys):
        raise doc.fail(fields["keys"], f"{where}.keys names a column twice")
    partition_by = doc.identifiers(fields["partition_by"], f"{where}.partition_by") if "partition_by" in fields else ()
    consistent = doc.boolean(fields["consistent"], f"{where}.consistent") if "consistent" in fields else False
    mart = MartConfig(name=name, sql=sql, keys=keys, partition_by=partition_by, consistent=consistent)
    return mart, fields["name"]


def parse_gold(
    doc: YamlDoc, gold_node: Node | None, marts_node: Node | None, database: str, known: dict[str, str]
) -> GoldSettings:
    """The ``gold:`` section (``database``, ``full_refresh_share``, ``full_refresh_below_mb``) and the
    ``marts:`` list; raise ``ConfigError`` naming the line."""
    settings = GoldSettings()
    if gold_node is not None:
        gold = doc.mapping(gold_node, "gold", section_keys("gold"))
        settings = GoldSettings(**read_section(doc, gold, "gold", "gold"))
        if settings.database == database:
            raise doc.fail(gold["database"], "gold.database must differ from silver.database")
    if marts_node is None:
        return settings
    from yaml.nodes import SequenceNode

    if not isinstance(marts_node, SequenceNode):
        raise doc.fail(marts_node, "'marts' must be a list of marts (- name: ..., sql: ...)")
    marts: list[MartConfig] = []
    for item in marts_node.value:
        mart, name_node = _parse_mart(doc, item, known)
        if any(m.name == mart.name for m in marts):
            raise doc.fail(name_node, f"duplicate mart '{mart.name}'")
        marts.append(mart)
    return replace(settings, marts=tuple(marts))


def with_silver_database(settings: GoldSettings, known: Mapping[str, str], database: str) -> GoldSettings:
    """The marts reading the silver tables of another database: the AWS jobs' ``--database``.

    ``known``: the ``database.table`` names the marts were written with (``readable_tables`` of the
    configuration's own ``silver.database``) -> table. Each reference in a mart's SQL (catalog-qualified,
    backquoted or as a column qualifier) becomes ``<database>.<table>``; strings and comments are kept.
    """
    renamed = {name: f"{database}.{table}" for name, table in known.items()}
    marts = tuple(replace(m, sql=substitute_tables(m.sql, renamed)) for m in settings.marts)
    return replace(settings, marts=marts)
