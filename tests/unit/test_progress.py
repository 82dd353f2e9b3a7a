"""The progress line of a long run: counts, rates and the time left, from finished batches."""

from __future__ import annotations

import io
import logging

from cdclake.report import Progress, TableReport
from cdclake.runtime.progress import StageTasks, describe_stages
from cdclake.shells.console import ProgressConsole, render_bar


def test_progress_counts_batches_and_estimates_the_time_left() -> None:
    # GIVEN a run of 10 files (100 MB) that started at t=0
    progress = Progress(total_files=10, total_bytes=100_000_000, started=0.0)
    batch = TableReport("s.t", "cdc", files_applied=2, bytes_applied=20_000_000, changes_read=50_000)
    # WHEN two batches of 2 files end, at t=10 s and t=20 s, the second holding a quarantined file
    progress.advance(batch, now=10.0)
    held = TableReport("s.t", "cdc", files_applied=1, bytes_applied=20_000_000, changes_read=50_000,
                       quarantined_files=["s/t/bad.csv"])  # fmt: skip
    line = progress.advance(held, now=20.0)
    # THEN the line says 4 of 10 files, 40 of 100 MB, 5,000 rows/s, 2 MB/s and 30 s left
    assert line.text == "files=4/10 mb=40.0/100.0 rows=100000 rows_per_s=5000 mb_per_s=2.00 eta_s=30"
    assert line.fraction == 0.4


def test_a_scan_in_progress_says_its_tasks_and_the_time_left() -> None:
    # GIVEN a full load's scan 40 s in, two stages active: 3 of 8 and 1 of 2 tasks done, 2M rows
    # (300 MB) read by them so far
    stages = [
        StageTasks(4, done=3, total=8, rows_read=1_500_000, bytes_read=200_000_000),
        StageTasks(5, done=1, total=2, rows_read=500_000, bytes_read=100_000_000),
    ]
    # WHEN it is described THEN 4 of 10 tasks took 40 s, so 6 more take about 60 s; 50,000 rows/s
    line = describe_stages("full load public.orders", stages, elapsed=40.0)
    assert line is not None
    assert line.text == (
        "full load public.orders stage=4,5 tasks=4/10 rows=2000000 mb=300.0 rows_per_s=50000 elapsed_s=40 eta_s=60"
    )
    assert line.fraction == 0.4
    # AND before any task ends the time left is unknown; with no stage active there is no line
    early = describe_stages("x", [StageTasks(1, done=0, total=16)], elapsed=3.0)
    assert early is not None and early.text.endswith("tasks=0/16 rows=0 mb=0.0 rows_per_s=0 elapsed_s=3 eta_s=?")
    assert describe_stages("x", [], elapsed=3.0) is None


def test_the_bar_fills_with_the_share_done_and_fits_the_terminal() -> None:
    assert render_bar(0.5, "files=5/10", columns=80, width=10) == "[#####.....]  50% files=5/10"
    assert render_bar(1.7, "", columns=80, width=4) == "[####] 100% "
    assert len(render_bar(0.1, "x" * 200, columns=60)) == 59


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_rewrites_one_line_and_other_output_erases_it() -> None:
    # GIVEN the CLI's console on a terminal
    terminal = _Terminal()
    console = ProgressConsole(terminal)
    log = logging.getLogger("cdclake.test_console")
    log.propagate = False
    log.addHandler(console)
    log.setLevel(logging.INFO)
    try:
        # WHEN two progress records come, then a warning
        log.info("progress files=1/4", extra={"progress": 0.25})
        log.info("progress files=2/4", extra={"progress": 0.5})
        log.warning("commit conflict")
    finally:
        log.removeHandler(console)
    # THEN each bar erased the one before (no newline between them), the warning erased the last
    out = terminal.getvalue()
    assert out.count("\n") == 1
    assert "\r\x1b[K[######" in out and "files=1/4" in out and "files=2/4" in out
    assert out.index("files=2/4") < out.rindex("\r\x1b[K") < out.index("WARNING")
    assert not console.showing
