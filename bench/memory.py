"""Peak memory of the Spark driver: the JVM child of this Python process, and Python itself.

Linux only. ``VmHWM`` in ``/proc/<pid>/status`` is the resident-set high-water mark; writing ``5``
to ``/proc/<pid>/clear_refs`` resets it, so each scenario gets its own peak.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry.name))
    return found


def find_jvm(root: int | None = None) -> int | None:
    """The pid of the first ``java`` process below ``root`` (default: this process)."""
    queue = [root or os.getpid()]
    while queue:
        pid = queue.pop(0)
        for child in _children(pid):
            try:
                comm = Path(f"/proc/{child}/comm").read_text().strip()
            except OSError:
                continue
            if comm == "java":
                return child
            queue.append(child)
    return None


def status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (VmHWM, VmRSS ...), 0 if unavailable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peak(pid: int) -> bool:
    """Reset ``VmHWM`` of ``pid`` to its current RSS; False where the kernel does not allow it."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def python_peak_kib() -> int:
    """The Python process's peak RSS since it started (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
