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
