"""Spark's scratch of killed local processes is removed at the next start; a live process's never."""

from __future__ import annotations

import os
from pathlib import Path

from cdclake.runtime.session import clear_dead_scratch, process_alive


def test_the_scratch_of_processes_that_no_longer_run_is_removed_and_a_live_ones_is_kept(tmp_path: Path) -> None:
    # GIVEN scratch folders of a killed process, of this (live) process, and a folder not named by a process
    dead, live, other = tmp_path / "4000001", tmp_path / str(os.getpid()), tmp_path / "notes"
    for folder in (dead, live, other):
        (folder / "blockmgr-1").mkdir(parents=True)
        (folder / "blockmgr-1" / "shuffle_0_0_0.data").write_bytes(b"x" * 100)
    # WHEN a new process starts
    removed = clear_dead_scratch(tmp_path, alive=lambda pid: pid == os.getpid())
    # THEN only the killed process's scratch is gone
    assert removed == [dead]
    assert not dead.exists() and live.exists() and other.exists()


def test_a_process_is_alive_while_it_runs() -> None:
    assert process_alive(os.getpid())
    assert not process_alive(2**22 + 12345)  # above Linux's largest process id
    assert clear_dead_scratch(Path("/nonexistent/scratch")) == []
