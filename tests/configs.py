"""Configurations the scenario tests share, written as the YAML a user writes."""

from __future__ import annotations


def keyed_tables(*sources: str, bronze: str = "timestamp_column: ts") -> str:
    """A configuration of ``sources`` (``schema.table`` each), every one keyed by ``id`` with the
    columns ``id int`` and ``name string``; ``bronze``: the bronze settings (by default, files that
    carry their commit timestamp in column ``ts``)."""
    tables = "".join(f"  {source}: {{primary_key: [id], columns: {{id: int, name: string}}}}\n" for source in sources)
    return f"bronze: {{{bronze}}}\ntables:\n{tables}"
