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


def test_a_table_counts_done_in_the_line_of_its_last_batch_and_no_eta_comes_from_one_batch() -> None:
    # GIVEN a run over 3 tables of one CDC file each (3 MB in all): the first batch took 30 s (the
    # run's warm-up), the next ones 2 s each
    progress = Progress(total_files=3, total_bytes=3_000_000, started=0.0, total_tables=3)
    batch = TableReport("s.t", "cdc", files_applied=1, bytes_applied=1_000_000, changes_read=10)
    # WHEN the first table's only batch ends
    first = progress.advance(batch, now=30.0, table_done=True)
    # THEN its line counts that table done, and says the time left is not known yet (one batch is
    # no measure: from its rate alone the time left would be 60 s, and with a large first file far more)
    assert first.text.startswith("tables=1/3 files=1/3 mb=1.0/3.0 ")
    assert first.text.endswith(" eta_s=?")
    # WHEN the second table's batch ends
    second = progress.advance(batch, now=32.0, table_done=True)
    # THEN two of three tables are done, and the time left is the time so far scaled: 32 s for 2/3 -> 16 s
    assert second.text.startswith("tables=2/3 files=2/3 ") and second.text.endswith(" eta_s=16")
    assert second.fraction == 2 / 3


def test_a_table_in_several_batches_is_done_only_with_its_last_and_small_shares_give_no_eta() -> None:
    # GIVEN a run of 2 tables and 100 files of 1 MB
    progress = Progress(total_files=100, total_bytes=100_000_000, started=0.0, total_tables=2)
    batch = TableReport("s.t", "cdc", files_applied=2, bytes_applied=2_000_000)
    # WHEN the first table's first two batches end (4 % of the run)
    progress.advance(batch, now=5.0)
    line = progress.advance(batch, now=10.0)
    # THEN no table is done yet and 4 % is too little to say the time left
    assert line.text.startswith("tables=0/2 files=4/100 ") and line.text.endswith(" eta_s=?")
    # WHEN its third and last batch ends (6 %)
    line = progress.advance(batch, now=15.0, table_done=True)
    # THEN it is counted done and the time left is known: 15 s for 6 % -> 235 s
    assert line.text.startswith("tables=1/2 files=6/100 ") and line.text.endswith(" eta_s=235")


def test_the_share_done_weighs_files_and_bytes_alike() -> None:
    # GIVEN a run of 10 files, one of them 91 % of the bytes
    progress = Progress(total_files=10, total_bytes=100, started=0.0)
    # WHEN the big file is done THEN the run is half done: a tenth of the files, 91 % of the bytes
    line = progress.advance(TableReport("s.t", "cdc", files_applied=1, bytes_applied=91), now=1.0)
    assert line.fraction == (0.1 + 0.91) / 2
    # AND a run without byte sizes counts files alone
    no_bytes = Progress(total_files=4, total_bytes=0, started=0.0)
    assert no_bytes.advance(TableReport("s.t", "cdc", files_applied=1), now=1.0).fraction == 0.25


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
