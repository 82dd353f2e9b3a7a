"""The drift between a table configuration and the source catalog (``cdclake init --check``, the
full-load job): pure functions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cdclake.config import PipelineConfig
from cdclake.schema import type_change_advice
from cdclake.sources.catalog.model import CatalogTable
from cdclake.types import compare_types

DriftKind = Literal["new table", "dropped table", "added column", "dropped column", "retyped column", "changed key"]


@dataclass(frozen=True)
class Drift:
    table: str
    kind: DriftKind
    detail: str
    handled: bool  # the engine copes by itself; no change to the configuration is needed

    def line(self) -> str:
        mark = "handled by the engine" if self.handled else "action needed"
        return f"{self.table}: {self.kind} {self.detail} ({mark})"


def _norm(type_name: str) -> str:
    return type_name.replace(" ", "").lower()


def drift(
    config: PipelineConfig, selected: Sequence[CatalogTable], catalog: Sequence[CatalogTable] | None = None
) -> list[Drift]:
    """Differences between the configuration and the (selected) catalog tables, table by table.

    An added column and a dropped one are handled by the engine (a new nullable silver column;
    a dropped one kept, NULL from then on). A type change needs the configuration changed (a
    widening is then applied to silver in place, anything else quarantines the table's batches);
    a key change needs the configuration changed too. Tables only in the catalog are new; tables
    only in the configuration are dropped at the source. ``selected`` are the tables the patterns
    choose (new ones come from there); ``catalog`` is every table (default: ``selected``), so a
    configured table that a pattern leaves out is not reported as dropped.
    """
    found: list[Drift] = []
    by_name = {t.qualified: t for t in (selected if catalog is None else catalog)}
    configured = {t.source for t in config.tables}
    for name in sorted({t.qualified for t in selected} - configured):
        table = by_name[name]
        key = f"key [{', '.join(table.key)}]" if table.key else "no key"
        found.append(Drift(name, "new table", f"({len(table.columns)} columns, {key}): cdclake init --add-new", False))
    for table_config in config.tables:
        name = table_config.source
        source = by_name.get(name)
        if source is None:
            found.append(Drift(name, "dropped table", "(not at the source any more; silver keeps its rows)", False))
            continue
        types = source.types()
        bookkeeping = {config.bronze.timestamp_column, config.bronze.change_sequence_column}
        declared = {k: _norm(v) for k, v in table_config.columns.items() if k not in bookkeeping}
        if declared:  # a table configured without columns (files with a header) has no types to compare
            for column, type_name in types.items():
                if column not in declared:
                    detail = f"{column} {type_name}: a new nullable silver column; declare its type in columns"
                    found.append(Drift(name, "added column", detail, True))
                elif declared[column] != _norm(type_name):
                    verdict = compare_types(declared[column], _norm(type_name))
                    effect = {
                        "widen": "declare it and silver widens in place",
                        "narrower": "declare it (silver keeps the wider type)",
                    }.get(verdict, f"incompatible: batches with it are held in quarantine; {type_change_advice(name)}")
                    found.append(
                        Drift(name, "retyped column", f"{column} {declared[column]} -> {type_name}: {effect}", False)
                    )
            for column in declared:
                if column not in types:
                    found.append(Drift(name, "dropped column", f"{column}: kept in silver, NULL from then on", True))
        configured_key = tuple(table_config.primary_key)
        if configured_key != source.key:
            before = f"[{', '.join(configured_key)}]" if configured_key else "append_only"
            after = f"[{', '.join(source.key)}] ({source.key_source})" if source.key else "no key"
            found.append(Drift(name, "changed key", f"{before} -> {after}", False))
    return found


def drift_report(found: Sequence[Drift]) -> str:
    if not found:
        return "no drift: the configuration matches the source catalog\n"
    lines = [d.line() for d in found]
    needs = sum(not d.handled for d in found)
    lines.append(f"{len(found)} difference(s), {needs} needing a change to the configuration")
    return "\n".join(lines) + "\n"
