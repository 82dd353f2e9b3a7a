"""When a batch's classification may broadcast the stored rows it touches (pure, no Spark)."""

from __future__ import annotations

from cdclake.engine.commit_way import BROADCAST_BYTES_PER_KEY, broadcast_fits

SHARE = 0.25  # BatchSizes.broadcast_heap_share's default

GIB = 1 << 30


def test_a_small_batch_broadcasts_even_with_many_tables_in_flight() -> None:
    # GIVEN a 2 GiB driver and 8 tables at once WHEN a batch touches 10k keys THEN it broadcasts
    assert broadcast_fits(10_000, 2 * GIB, 8, SHARE)


def test_a_million_keys_shuffle_in_the_clis_default_driver() -> None:
    # GIVEN the CLI's 2 GiB driver WHEN a batch touches 1M keys (the full profile's batch that ran
    # out of memory broadcasting) THEN it shuffles, alone or beside other tables
    assert not broadcast_fits(1_000_000, 2 * GIB, 1, SHARE)
    assert not broadcast_fits(1_000_000, 2 * GIB, 4, SHARE)


def test_the_budget_is_shared_by_the_tables_in_flight() -> None:
    # GIVEN the largest batch that fits alone
    alone = int(2 * GIB * SHARE / BROADCAST_BYTES_PER_KEY)
    assert broadcast_fits(alone, 2 * GIB, 1, SHARE)
    # WHEN four tables may broadcast at once THEN a quarter of it fits, and no more
    assert broadcast_fits(alone // 4, 2 * GIB, 4, SHARE)
    assert not broadcast_fits(alone // 4 + 1, 2 * GIB, 4, SHARE)
