"""What ``cdclake maintain`` and the Glue maintenance job say of each table (pure)."""

from __future__ import annotations

from cdclake.ops.maintenance import HISTORY, SILVER, MaintenanceReport


def test_a_silver_table_and_a_table_beside_it_are_summed_up_in_one_line_each() -> None:
    # GIVEN what maintenance did to a silver table and to its history
    history = MaintenanceReport("db.people__history", HISTORY, 4, 1, snapshots_expired=3, orphan_files_removed=2)
    silver = MaintenanceReport(
        "s.people", SILVER, 9, 2, 3, 0, 12, ledger_entries_archived=12, orphan_files_removed=1, tombstones_removed=5,
        seconds=1.26, side_tables=[history],
    )  # fmt: skip
    # WHEN they are summed up THEN the silver line has the delete files and tombstones, the other its role
    assert silver.summary() == (
        "s.people: data files 9 -> 2, delete files 3 -> 0, snapshots expired 12, orphans removed 1, "
        "tombstones removed 5 (1.3s)"
    )
    assert history.summary() == (
        "db.people__history (history): data files 4 -> 1, snapshots expired 3, orphans removed 2 (0.0s)"
    )
