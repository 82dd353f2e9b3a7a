"""What `make try-aws` shows: its story (the steps and the verdict) on the terminal, everything else
(the emulator's parse warnings, the Lambda handlers' metric JSON lines, Spark's and the JVM's own
output) in a log file whose path the story names. The formatting is pure, for tests/unit."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO


class Story:
    """The lines the user reads, on the terminal the script started with."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()


@contextmanager
def told_apart(log: Path) -> Iterator[Story]:
    """Inside the block, file descriptors 1 and 2 (and ``sys.stdout``, ``sys.stderr``) write to
    ``log``: whatever a library, a thread or the JVM prints lands there; the ``Story`` yielded
    writes to the terminal. Both restored on the way out."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1, encoding="utf-8")
    stdout, stderr = sys.stdout, sys.stderr
    with open(log, "a", encoding="utf-8", buffering=1) as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        sys.stdout = sys.stderr = sink
        try:
            yield Story(terminal)
        finally:
            sink.flush()
            sys.stdout, sys.stderr = stdout, stderr
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            terminal.close()


def executions_text(executions: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """Each execution (name, status, the states it entered) on a line of its own."""
    return "executions:\n" + "".join(f"  {name} ({status}): {' > '.join(path)}\n" for name, status, path in executions)


def silver_text(name: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """The whole silver table (every row, not Spark's first 20), columns in the rows' order."""
    from cdclake.shells.output import format_rows

    columns = list(rows[0]) if rows else []
    return f"silver table {name}:\n" + format_rows(columns, [[r[c] for c in columns] for r in rows], "table")


def verdict(problems: Sequence[str], alerts: Sequence[str]) -> tuple[str, int]:
    """The last lines and the exit code: silver equal to the source with no alert, or what is not."""
    if problems:
        return "try-aws: silver differs from the source:\n" + "".join(f"  {p}\n" for p in problems), 1
    if alerts:
        return "try-aws: alerts were sent:\n" + "".join(f"  {a}\n" for a in alerts), 1
    return "try-aws: silver equals the source's final state; no alert was sent.\n", 0
