"""One writer per local warehouse: a lock file that a second run waits on, naming who holds it.

On AWS the state machine runs one Glue job at a time; a manual run beside it is caught by the
engine's commit-conflict retries instead (``engine.turn.apply_batch``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from cdclake.errors import ConcurrentWriterError

log = logging.getLogger("cdclake")

LOCK_FILE = ".cdclake.lock"


@contextmanager
def warehouse_lock(warehouse: Path, command: str, wait_seconds: float) -> Iterator[None]:
    """Hold the warehouse's write lock while the block runs; wait up to ``wait_seconds`` for it.

    The lock is an advisory ``flock``: the operating system releases it when the holder exits,
    however it ends, so a crashed run never leaves the warehouse locked.
    """
    warehouse.mkdir(parents=True, exist_ok=True)
    path = warehouse / LOCK_FILE
    with path.open("a+", encoding="utf-8") as handle:
        deadline = time.monotonic() + wait_seconds
        announced = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(path)
                if time.monotonic() >= deadline:
                    raise ConcurrentWriterError(
                        f"The warehouse {warehouse} is in use by {holder}; run again once it has finished "
                        "(or give --lock-wait SECONDS to wait for it)."
                    ) from None
                if not announced:
                    log.warning("waiting for the warehouse lock held by %s (at most %.0f s)", holder, wait_seconds)
                    announced = True
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        handle.seek(0)
        handle.truncate()
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        handle.write(f"`cdclake {command}` (pid {os.getpid()} on {socket.gethostname()}, since {stamp})\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)


def _holder(path: Path) -> str:
    text = path.read_text(encoding="utf-8").strip()
    return text or "another cdclake run"
