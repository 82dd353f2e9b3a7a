"""The CLI's log output: plain lines, and on a terminal one progress bar that rewrites itself.

The engine logs ``progress`` records (``extra={"progress": fraction}``) as plain ``key=value``
lines. When standard error is a terminal, ``ProgressConsole`` draws each as one line (a bar, the
share done and the record's text) that the next one replaces; any other output (a log line, a
result printed on standard output) first erases the bar, so nothing is drawn over. Everywhere
else (a pipe, a file, AWS Glue) the records stay plain log lines.
"""

from __future__ import annotations

import logging
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

_ERASE = "\r\x1b[K"  # back to the line's start, erase to its end
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def render_bar(fraction: float, text: str, columns: int, width: int = 24) -> str:
    """``[#######.................]  29% text``, cut to fit ``columns`` without wrapping."""
    share = min(max(fraction, 0.0), 1.0)
    filled = round(share * width)
    line = f"[{'#' * filled}{'.' * (width - filled)}] {share:4.0%} {text}"
    return line[: max(columns - 1, 0)]


class ProgressConsole(logging.StreamHandler):  # type: ignore[type-arg]
    """A log handler for a terminal: progress records rewrite one bar line, others print as usual."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.setFormatter(logging.Formatter(LOG_FORMAT))
        self.showing = False

    def clear(self) -> None:
        """Erase the bar, if one is drawn (before anything else is written to the terminal)."""
        if self.showing:
            self.stream.write(_ERASE)
            self.stream.flush()
            self.showing = False

    def emit(self, record: logging.LogRecord) -> None:
        fraction = getattr(record, "progress", None)
        if fraction is None:
            self.clear()
            super().emit(record)
            return
        try:
            text = record.getMessage().removeprefix("progress ")
            columns = shutil.get_terminal_size().columns
            self.stream.write(_ERASE + render_bar(float(fraction), text, columns))
            self.stream.flush()
            self.showing = True
        except Exception:
            self.handleError(record)


class _ClearingStream:
    """A text stream that erases the progress bar before each write (standard output and error)."""

    def __init__(self, stream: TextIO, console: ProgressConsole) -> None:
        self._stream = stream
        self._console = console

    def write(self, text: str) -> int:
        if text:
            self._console.clear()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def console_logging(quiet: bool) -> Iterator[bool]:
    """Set up the CLI's logging for the block; yields whether progress is drawn as a bar.

    ``quiet``: warnings and errors only (no progress). A terminal standard error gets the bar.
    """
    level = logging.WARNING if quiet else logging.INFO
    stderr, stdout = sys.stderr, sys.stdout
    bar = not quiet and stderr.isatty()
    handler: logging.Handler = ProgressConsole(stderr) if bar else logging.StreamHandler(stderr)
    if not bar:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    for chatty in ("py4j", "pyiceberg"):  # pyiceberg says "Loaded FileIO" at INFO for every table it reads
        logging.getLogger(chatty).setLevel(logging.WARNING)
    if isinstance(handler, ProgressConsole):
        sys.stdout = _ClearingStream(stdout, handler)
        sys.stderr = _ClearingStream(stderr, handler)
    try:
        yield bar
    finally:
        if isinstance(handler, ProgressConsole):
            handler.clear()
            sys.stdout, sys.stderr = stdout, stderr
        root.removeHandler(handler)
