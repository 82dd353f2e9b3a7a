"""The progress line of a long run: counts, rates and the time left, from finished batches."""

from __future__ import annotations

from cdclake.report import Progress, TableReport


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
    assert line == "files=4/10 mb=40.0/100.0 rows=100000 rows_per_s=5000 mb_per_s=2.00 eta_s=30"
