"""The tombstone horizon: a file written before it is held, never applied blindly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cdclake.dms.files import parse_key
from cdclake.dms.horizon import beyond_horizon, pruned_before_after, written_at
from cdclake.lake.journals import parse_pruned_before

PRUNED = datetime(2024, 3, 16, 12, 0, tzinfo=UTC)  # maintenance pruned tombstones of deletes before this


def test_the_write_time_is_read_from_the_dms_file_name() -> None:
    assert written_at(parse_key("s/t/20240301-120000123.csv")) == datetime(2024, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert written_at(parse_key("s/t/20240301-1234567890.csv.gz")) == datetime(
        2024, 3, 1, 12, 34, 56, 789000, tzinfo=UTC
    )


def test_a_file_written_before_the_horizon_is_held_with_the_reason_and_the_replay() -> None:
    # GIVEN tombstones pruned before 16 March noon, and a batch with a file written on 1 March (a re-driven
    # dead letter), one written within the day's margin, and one written after it
    old = parse_key("sales/orders/20240301-120000000.csv", 10)
    near = parse_key("sales/orders/20240317-110000000.csv", 10)
    fresh = parse_key("sales/orders/20240317-130000000.csv", 10)
    # WHEN the batch is checked
    late = beyond_horizon([old, near, fresh], PRUNED)
    # THEN the two files that may hold changes older than a forgotten delete are held, the fresh one is applied
    assert [f.file for f in late] == [old, near]
    reason = late[0].reason
    assert "written 2024-03-01 12:00:00 UTC, before the tombstone horizon 2024-03-17 12:00:00 UTC" in reason
    assert "could bring back a deleted row" in reason and "replay" in reason


def test_nothing_is_held_before_any_pruning_or_in_a_replay_or_for_a_full_load() -> None:
    old = parse_key("sales/orders/20240301-120000000.csv", 10)
    load = parse_key("sales/orders/LOAD00000001.csv", 10)
    assert beyond_horizon([old], None) == []
    assert beyond_horizon([old], PRUNED, replay=True) == []
    assert beyond_horizon([load], PRUNED) == []


def test_the_recorded_cut_never_moves_back() -> None:
    now = datetime(2024, 3, 31, tzinfo=UTC)
    assert pruned_before_after(None, now, 15) == datetime(2024, 3, 16, tzinfo=UTC)
    assert pruned_before_after(datetime(2024, 3, 20, tzinfo=UTC), now, 15) == datetime(2024, 3, 20, tzinfo=UTC)
    assert pruned_before_after(datetime(2024, 3, 1, tzinfo=UTC), now, 15) == datetime(2024, 3, 16, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [(None, None), ("", None), ("2024-03-16T12:00:00+00:00", PRUNED), ("2024-03-16T12:00:00", PRUNED)],
)
def test_the_table_property_is_read_back(value: str | None, parsed: datetime | None) -> None:
    assert parse_pruned_before(value) == parsed


def test_a_margin_of_zero_holds_only_files_written_before_the_cut() -> None:
    before = parse_key("sales/orders/20240316-115959000.csv", 10)
    after = parse_key("sales/orders/20240316-120000000.csv", 10)
    assert [f.file for f in beyond_horizon([before, after], PRUNED, margin=timedelta(0))] == [before]
