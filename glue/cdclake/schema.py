"""Schema evolution as a pure plan: compare a batch's columns with the silver table's.

| change at the source                 | what cdclake does                                         |
|--------------------------------------|-----------------------------------------------------------|
| column added                         | added to silver (nullable); earlier rows read as NULL     |
| int -> bigint, float -> double,      | silver column widened in place (Iceberg type promotion)   |
| decimal(p,s) -> decimal(p2,s), p2>p  |                                                           |
| column dropped                       | kept in silver, NULL for rows written from then on        |
| narrower type (bigint -> int, ...)   | values stored in the wider silver type (lossless)         |
| any other type change                | the table's batch is quarantined with the reason          |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cdclake.types import compare_types

_CHANGED_TYPE = " changed type from "


def is_type_change(reason: str | None) -> bool:
    """Whether a quarantine reason is a type change no widening covers (``SchemaPlan.incompatible``)."""
    return bool(reason) and str(reason).startswith("column ") and _CHANGED_TYPE in str(reason)


def type_change_advice(table: str) -> str:
    """What to do about a type change that holds ``table``'s batches: one sentence, the same in
    ``run``, ``status`` and ``init --check``. The held files carry the new type; silver's column
    keeps the old one until the table is loaded again with the new type declared."""
    return (
        "a type change silver cannot take: declare the new type in the configuration, reload that one table "
        f"(`cdclake full-load --table {table} --reload`, once its LOAD files hold the new type: a DMS "
        f'"Reload table data", or locally `cdclake capture --reload {table}`), then '
        f"`cdclake replay --quarantined --table {table}`"
    )


@dataclass(frozen=True)
class SchemaPlan:
    """What to change in silver before a batch can be merged, and what the batch must do."""

    add: list[tuple[str, str]] = field(default_factory=list)  # (column, type)
    widen: list[tuple[str, str, str]] = field(default_factory=list)  # (column, from, to)
    absent: list[str] = field(default_factory=list)  # silver columns the batch does not carry
    cast: dict[str, str] = field(default_factory=dict)  # batch column -> silver type (narrower input)
    incompatible: list[str] = field(default_factory=list)  # reasons

    @property
    def changes_table(self) -> bool:
        return bool(self.add or self.widen)

    def describe(self) -> list[str]:
        """One line per schema change, for the schema-change log."""
        lines = [f"added column {c} {t}" for c, t in self.add]
        lines += [f"widened column {c} from {a} to {b}" for c, a, b in self.widen]
        return lines


def plan_schema_change(
    stored: Sequence[tuple[str, str]], incoming: Sequence[tuple[str, str]], bookkeeping: Sequence[str] = ()
) -> SchemaPlan:
    """Plan how a batch with ``incoming`` (name, type) columns fits silver's ``stored`` columns.

    Names compare case-insensitively, as Spark resolves them. ``bookkeeping`` columns never count
    as dropped.
    """
    plan = SchemaPlan()
    stored_types = {name.lower(): (name, type_name) for name, type_name in stored}
    incoming_names = {name.lower() for name, _ in incoming}
    for name, type_name in incoming:
        if name.lower() not in stored_types:
            plan.add.append((name, type_name))
            continue
        stored_name, stored_type = stored_types[name.lower()]
        verdict = compare_types(stored_type, type_name)
        if verdict == "widen":
            plan.widen.append((stored_name, stored_type, type_name))
        elif verdict == "narrower":
            plan.cast[name] = stored_type
        elif verdict == "incompatible":
            plan.incompatible.append(f"column {name}{_CHANGED_TYPE}{stored_type} to {type_name}")
    skip = {b.lower() for b in bookkeeping}
    plan.absent.extend(name for key, (name, _) in stored_types.items() if key not in incoming_names and key not in skip)
    return plan
