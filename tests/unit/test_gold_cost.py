"""The choice between an incremental and a full mart refresh, from byte counts (pure, no Spark)."""

from __future__ import annotations

import pytest

from cdclake.gold.cost import SourceReads, full_refresh_reason, readable_size

MB = 1024 * 1024
A_THIRD = 1 / 3


def test_changes_touching_every_file_make_a_full_refresh_cheaper() -> None:
    # GIVEN changes spread over every data file of a 123 MB table (and a few new rows)
    reads = [SourceReads("shop.orders", round(123 * MB), changed=True, changed_bytes=round(125 * MB))]
    # WHEN the refresh chooses / THEN full, saying how much of which table the changes touch
    assert full_refresh_reason(reads, A_THIRD, 0) == (
        "the changes touch 102% of the data files of shop.orders (125.0 MB of 123.0 MB): a full refresh reads less"
    )


@pytest.mark.parametrize(
    ("changed", "total", "full"),
    [
        (0, 100, False),  # nothing read by the diff (a commit that changed nothing the mart reads)
        (33, 100, False),  # just under a third
        (34, 100, True),  # a third or more
        (100, 100, True),
        (250, 100, True),  # a compaction since: every file read before and after
        (5, 0, True),  # the table was emptied: the full refresh reads nothing
        (0, 0, False),
    ],
)
def test_the_share_of_a_table_the_changes_touch_decides(changed: int, total: int, full: bool) -> None:
    # GIVEN one changed table / WHEN the refresh chooses at a third
    reason = full_refresh_reason([SourceReads("s.t", total, changed=True, changed_bytes=changed)], A_THIRD, 0)
    # THEN full exactly when the changed files hold a third of its bytes or more
    assert (reason is not None) == full, reason


def test_small_tables_refresh_in_full_whatever_changed() -> None:
    # GIVEN a mart over two tables of 20 MB in all, of which one changed in one small file
    reads = [SourceReads("s.orders", 19 * MB, changed=True, changed_bytes=MB // 10), SourceReads("s.days", MB)]
    # WHEN the refresh chooses with 32 MB as the size below which a full refresh costs less
    reason = full_refresh_reason(reads, A_THIRD, 32 * MB)
    # THEN full, saying the tables are small; and not with no such size
    assert reason == (
        "the tables it reads hold 20.0 MB, less than gold.full_refresh_below_mb (32.0 MB): "
        "a full refresh costs less than the incremental path's fixed work"
    )
    assert full_refresh_reason(reads, A_THIRD, 0) is None


def test_a_changed_table_joined_to_a_large_one_reads_that_one_twice() -> None:
    # GIVEN a join mart whose small table changed in full and whose large table did not change
    customers = SourceReads("s.customers", MB, changed=True, changed_bytes=MB)
    orders = SourceReads("s.orders", 99 * MB)
    # WHEN the refresh chooses / THEN full: finding the groups joins the changed rows with all the
    # orders, at the older and at the newer snapshot (199 MB against the 100 MB a full refresh reads)
    assert full_refresh_reason([customers, orders], A_THIRD, 0) == (
        "finding the groups the changes affect reads 199.0 MB (the files the changes touch in s.customers, "
        "and the tables joined to them, twice), 199% of the 100.0 MB a full refresh reads: a full refresh reads less"
    )
    # AND when only a little of the large table changed, and the small one did not: incremental
    orders_changed = SourceReads("s.orders", 99 * MB, changed=True, changed_bytes=5 * MB)
    assert full_refresh_reason([SourceReads("s.customers", MB), orders_changed], A_THIRD, 0) is None


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 bytes"), (1023, "1023 bytes"), (1536, "1.5 KB"), (round(12.3 * MB), "12.3 MB"), (3 * 1024 * MB, "3.0 GB")],
)
def test_sizes_read_as_people_write_them(size: int, text: str) -> None:
    assert readable_size(size) == text
