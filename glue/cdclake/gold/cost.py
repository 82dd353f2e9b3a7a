"""Whether a keyed mart's incremental refresh costs more than a full one: the choice, from byte counts.

A full refresh reads every table the mart reads once, aggregates everything and writes the mart.
The incremental path first finds the groups the changes affect: of each changed table it reads the
data files the changes touch (the older snapshot's files that delete files added since point into
or that were removed since, for the before-images; the files added since, for the after-images),
and the mart's SQL joins them with the other tables it reads, at the older and at the newer
snapshot (each read in full, twice). Then it recomputes the affected groups, which reads about what
a full refresh reads (less where silver is clustered by the mart's keys), and MERGEs them. So what
finding the groups reads is what the incremental path reads on top of a full refresh's scan; it
pays while the aggregation and the write it saves cost more:

* not when it reads ``share`` or more of what a full refresh reads (changes spread over a table's
  files, or a table joined to a changed one);
* not when the tables are small: the incremental path runs about ten Spark jobs and a MERGE
  whatever the change, seconds that a full refresh of a few tens of MB costs in all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceReads:
    """What the refresh paths read of one table a mart reads, in bytes of files (Iceberg metadata)."""

    table: str  # database.table, as the mart's SQL names it
    total_bytes: int  # the table's data and delete files at the pinned snapshot: what a full refresh reads
    changed: bool = False  # a commit since the snapshot the mart last reflected
    changed_bytes: int = 0  # the data files the changes touch: what its before- and after-images read


def full_refresh_reason(reads: Sequence[SourceReads], share: float, below_bytes: int) -> str | None:
    """Why a full refresh costs less than the incremental one (None: it does not).

    ``share``: the share of a full refresh's read at which finding the changed groups costs more
    (``gold.full_refresh_share``); ``below_bytes``: the size of the tables under which a full
    refresh costs less than the incremental path's fixed work (``gold.full_refresh_below_mb``).
    The reason is in plain words, for the mart's ``cdclake.gold.reason`` and ``cdclake status``.
    """
    full = sum(r.total_bytes for r in reads)
    if full < below_bytes:
        return (
            f"the tables it reads hold {readable_size(full)}, less than gold.full_refresh_below_mb "
            f"({readable_size(below_bytes)}): a full refresh costs less than the incremental path's fixed work"
        )
    changed = [r for r in reads if r.changed]
    diff = sum(r.changed_bytes + 2 * (full - r.total_bytes) for r in changed)
    if diff <= 0 or diff < share * full:
        return None
    if len(reads) == 1:
        (source,) = reads
        touched = "all" if source.total_bytes == 0 else f"{source.changed_bytes / source.total_bytes:.0%}"
        return (
            f"the changes touch {touched} of the data files of {source.table} "
            f"({readable_size(source.changed_bytes)} of {readable_size(source.total_bytes)}): "
            "a full refresh reads less"
        )
    tables = ", ".join(r.table for r in changed)
    return (
        f"finding the groups the changes affect reads {readable_size(diff)} (the files the changes touch "
        f"in {tables}, and the tables joined to them, twice), {diff / full:.0%} of the "
        f"{readable_size(full)} a full refresh reads: a full refresh reads less"
    )


def readable_size(size: int) -> str:
    """Bytes as people read them: ``812 bytes``, ``4.2 KB``, ``12.3 MB``, ``1.5 GB`` (powers of 1024)."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024**2:
        return f"{size / 1024:.1f} KB"
    if size < 1024**3:
        return f"{size / 1024**2:.1f} MB"
    return f"{size / 1024**3:.1f} GB"
