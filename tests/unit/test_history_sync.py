"""engine/history_sync.py: what a table's history lacks of silver, as ``status`` and the log say it.

``history_lag`` itself reads table metadata: its cases (a crash between silver's and history's
commits, expired snapshots, history turned on late) run against real Iceberg tables in
tests/spark/test_history_crash.py, test_history_start.py and test_history_same_instant.py.
"""

from __future__ import annotations

from cdclake.engine.history_sync import HistoryLag
from cdclake.lake.ledger_record import SnapshotRef


def test_a_lag_of_cdc_files_counts_them_and_says_the_next_run_catches_up() -> None:
    lag = HistoryLag(("s/t/20240301-1200000000.csv", "s/t/20240301-1300000000.csv"), SnapshotRef(9, 4))

    assert lag.describe() == "history behind silver by 2 CDC file(s); the next run catches it up"


def test_a_lag_that_includes_a_full_load_asks_for_a_reload_whatever_the_cdc_files() -> None:
    with_files = HistoryLag(("s/t/20240301-1200000000.csv",), SnapshotRef(9, 4), load=True)
    without = HistoryLag((), None, load=True)

    expected = "history lacks silver's last full load: reload the table or start its history again"
    assert with_files.describe() == expected
    assert without.describe() == expected
