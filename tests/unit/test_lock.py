"""The local warehouse lock: a second writer waits for the first, or says who holds it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cdclake.errors import ConcurrentWriterError
from cdclake.shells.lock import warehouse_lock


def test_a_second_writer_that_cannot_wait_names_the_holder(tmp_path: Path) -> None:
    # GIVEN a run holding the warehouse
    # WHEN another command will not wait THEN it fails with one sentence naming the holder
    with (
        warehouse_lock(tmp_path / "warehouse", "run", wait_seconds=0),
        pytest.raises(ConcurrentWriterError, match=r"in use by `cdclake run` \(pid \d+ on .+, since .+\)"),
        warehouse_lock(tmp_path / "warehouse", "apply", wait_seconds=0),
    ):
        pass
    assert ConcurrentWriterError.exit_code == 75


def test_a_second_writer_waits_until_the_first_is_done(tmp_path: Path) -> None:
    # GIVEN a run holding the warehouse for a moment in another thread
    order: list[str] = []
    held = threading.Event()

    def first() -> None:
        with warehouse_lock(tmp_path / "warehouse", "run", wait_seconds=0):
            held.set()
            time.sleep(1.5)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    held.wait(5)
    # WHEN a second writer asks with time to wait
    with warehouse_lock(tmp_path / "warehouse", "maintain", wait_seconds=30):
        order.append("second in")
    thread.join()
    # THEN it got in only after the first was done, and the lock is free again
    assert order == ["first done", "second in"]
    with warehouse_lock(tmp_path / "warehouse", "run", wait_seconds=0):
        pass
