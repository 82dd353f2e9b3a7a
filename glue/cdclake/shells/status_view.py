"""``cdclake status`` for a terminal: a compact view that fits 100 columns, or every field (--wide).

The compact view has one line per table (TABLE, ROWS, APPLIED, PENDING, LAG, STATE), then, for
each table that is not up to date, the whole reason on a line of its own. STATE is "up to date" or
the table's short markers (``ops.table_status.ATTENTION_MARKERS``). The csv and json formats always carry
every field, with the lag in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.gold.status import mart_statuses_as_rows
from cdclake.ops.metrics import freshness_lag
from cdclake.ops.table_status import NO_FILES, TableStatus, attention, statuses_as_rows
from cdclake.shells.output import aligned_table, format_rows, text_of

if TYPE_CHECKING:
    from cdclake.gold.status import MartStatus
    from cdclake.lake.cuts import PublishedCut

WIDTH = 100  # the compact view's widest line (the reasons below it excepted)
_NAME_WIDTH = 32  # a longer table or mart name is shortened in the middle
_GAP = "  "


def human_duration(seconds: float | None) -> str:
    """``8040`` -> ``2h 14m``: the two largest units (days, hours, minutes, seconds); ``-`` for None."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def shorten(text: str, width: int) -> str:
    """``text`` at most ``width`` characters: the middle left out (``…``) so both ends still show."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """Plain aligned columns (numbers right-aligned), no frame; the last column is not padded."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def render(cells: Sequence[str]) -> str:
        padded = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return _GAP.join(padded).rstrip()

    return [render(header), *[render(r) for r in rows]]


def _number(value: int | None) -> str:
    return "-" if value is None else str(value)


def table_state(status: TableStatus) -> str:
    """The STATE cell: "no files yet", "not loaded", the attention markers or "up to date"."""
    if status.behind.startswith(NO_FILES) or not (status.exists or status.behind):
        return NO_FILES
    if not status.exists:
        return "not loaded"
    markers = attention(status)
    if not markers and status.behind != "up to date":
        markers = ["behind"]
    return ", ".join(markers) or "up to date"


def compact_tables(statuses: Sequence[TableStatus]) -> str:
    """The compact view of the tables, then one line per table that is behind, with its reason."""
    header = ["TABLE", "ROWS", "APPLIED", "PENDING", "LAG", "STATE"]
    cells = [
        [
            shorten(s.source, _NAME_WIDTH),
            _number(s.rows),
            _number(s.files_applied),
            str(s.pending_files),
            human_duration(s.lag_seconds),
            table_state(s),
        ]
        for s in statuses
    ]
    fixed = [max([len(header[i])] + [len(r[i]) for r in cells]) for i in range(len(header) - 1)]
    room = max(WIDTH - sum(fixed) - len(_GAP) * (len(header) - 1), len("up to date"))
    cells = [[*row[:-1], shorten(row[-1], room)] for row in cells]
    lines = _columns(header, cells, right={1, 2, 3})
    reasons = [f"{s.source}: {s.behind}" for s in statuses if s.behind and s.behind != "up to date"]
    return "\n".join(lines) + "\n" + "".join(f"\n{line}" for line in reasons) + ("\n" if reasons else "")


def _wide(columns: list[str], rows: list[list[Any]]) -> str:
    """Every field in a boxed table, ``lag_seconds`` as a duration (``lag``)."""
    lag = columns.index("lag_seconds")
    header = [("lag" if i == lag else c) for i, c in enumerate(columns)]
    text = [
        [human_duration(v) if i == lag else ("NULL" if v is None else text_of(v)) for i, v in enumerate(row)]
        for row in rows
    ]
    return aligned_table(header, text, count=False)


def compact_marts(statuses: Sequence[MartStatus]) -> str:
    """The compact view of the marts, then why each one refreshed in full last time."""
    header = ["MART", "ROWS", "LAST REFRESH (UTC)", "PATH", "BEHIND", "LAG"]
    cells = [
        [
            shorten(m.mart, _NAME_WIDTH),
            _number(m.rows),
            (m.last_refresh or "-")[:19].replace("T", " "),
            m.path or ("-" if m.exists else "not refreshed yet"),
            _number(m.silver_commits_behind),
            human_duration(m.lag_seconds),
        ]
        for m in statuses
    ]
    lines = _columns(header, cells, right={1, 4})
    reasons = [f"{m.mart}: last refreshed in full: {m.full_reason}" for m in statuses if m.full_reason]
    return "\n".join(lines) + "\n" + "".join(f"\n{line}" for line in reasons) + ("\n" if reasons else "")


def cut_line(cut: PublishedCut, tables: Sequence[TableStatus]) -> str:
    """Where the database's latest published cut stands (``lake.cuts``), in the words of ``run``'s
    ``cut:`` line, and how far its commit time T is behind the newest change any table applied."""
    if cut.commit_ts is None:
        return f"cut: at the first full load ({cut.position_text}): {len(cut.snapshots)} tables"
    head = f"cut: at {cut.commit_ts} ({cut.position_text}): {len(cut.snapshots)} tables"
    newest = max((s.latest_change for s in tables if s.latest_change), default=None)
    if newest is None:
        return head
    try:
        moment = datetime.fromisoformat(newest).replace(tzinfo=UTC)
    except ValueError:
        return head
    behind = freshness_lag(cut.commit_ts, moment)
    if behind is None:
        return head
    if behind == 0:
        return f"{head}, at the newest change"
    return f"{head}, {human_duration(behind)} behind the newest change"


def status_text(
    tables: Sequence[TableStatus],
    marts: Sequence[MartStatus],
    style: str,
    wide: bool,
    cut: PublishedCut | None = None,
) -> str:
    """The whole ``status`` output: tables, the latest cut (the table format, when the database has
    one), then marts (when any are configured). csv and json keep one record per table."""
    columns, rows = statuses_as_rows(tables)
    mart_columns, mart_rows = mart_statuses_as_rows(marts)
    if style != "table":
        return format_rows(columns, rows, style) + (format_rows(mart_columns, mart_rows, style) if marts else "")
    cut_text = "" if cut is None else "\n" + cut_line(cut, tables) + "\n"
    if wide:
        return _wide(columns, rows) + cut_text + (("\n" + _wide(mart_columns, mart_rows)) if marts else "")
    return compact_tables(tables) + cut_text + (("\n" + compact_marts(marts)) if marts else "")
