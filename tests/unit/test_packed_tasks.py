"""The reader's coalesce: about the tasks Spark's own file packing would have made."""

from __future__ import annotations

from cdclake.dms.reader import packed_tasks

MB = 1 << 20


def test_small_files_share_a_task_as_spark_packs_them() -> None:
    # GIVEN 200 files of 150 KB, 128 MB partitions and 4 cores: Spark counts 4 MB to open each
    # file and packs them into 7 partitions (seen: 200 such files read by Spark 3.5)
    # WHEN the reader's task count is asked for  THEN that many, not one a file
    assert packed_tasks([150 * 1024] * 200, 128 * MB, 4) == 7


def test_a_big_file_keeps_a_task_per_split() -> None:
    # GIVEN one 1 GB file, 128 MB partitions  THEN one task per 128 MB split
    assert packed_tasks([1024 * MB], 128 * MB, 2) == 8


def test_one_small_file_and_no_file_make_one_task() -> None:
    assert packed_tasks([10], 128 * MB, 8) == 1
    assert packed_tasks([], 128 * MB, 8) == 1
