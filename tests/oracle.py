"""The tests' oracle: the source state a change log leaves, replayed in plain Python.

Independent of the engine: no Spark, no ordering code of cdclake's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cdclake.dms.writer import SourceChange, Value


def replay_change_log(
    initial: Iterable[dict[str, Value]], changes: Iterable[SourceChange], key: Sequence[str]
) -> dict[tuple[Value, ...], dict[str, Value]]:
    """The source state after ``changes`` (applied in commit order, then sequence) on ``initial``."""
    state = {tuple(row[k] for k in key): dict(row) for row in initial}
    for change in sorted(changes, key=lambda c: (c.commit_ts, c.seq)):
        ident = tuple(change.row[k] for k in key)
        if change.op == "D":
            state.pop(ident, None)
        else:
            state[ident] = dict(change.row)
    return state


def replay_versions(
    initial: Iterable[dict[str, Value]], changes: Iterable[SourceChange], key: Sequence[str]
) -> list[tuple[tuple[Value, ...], str, dict[str, Value], bool]]:
    """Every version a change log leaves (SCD type 2): per key, its ``initial`` row as an insert,
    then one version per change in commit order (then sequence); each as (key, operation, row,
    is_current), where only a key's last version is current, and never a delete."""
    timelines: dict[tuple[Value, ...], list[tuple[str, dict[str, Value]]]] = {}
    for row in initial:
        timelines[tuple(row[k] for k in key)] = [("I", dict(row))]
    for change in sorted(changes, key=lambda c: (c.commit_ts, c.seq)):
        timelines.setdefault(tuple(change.row[k] for k in key), []).append((change.op, dict(change.row)))
    return [
        (ident, op, row, n == len(versions) - 1 and op != "D")
        for ident, versions in timelines.items()
        for n, (op, row) in enumerate(versions)
    ]
