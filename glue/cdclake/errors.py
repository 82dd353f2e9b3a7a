"""Typed errors. ``CdclakeError`` and its subclasses carry one sentence meant for the user."""

from __future__ import annotations

import re
from typing import Any


class CdclakeError(Exception):
    """A problem the user can fix; the command line prints the message and exits non-zero."""


class SetupError(CdclakeError):
    """The local environment is missing something (Java, a jar, a package)."""


class ConfigError(CdclakeError):
    """The table configuration file is invalid."""


class BronzeError(CdclakeError):
    """A bronze path or file cannot be listed or read."""


class BadInputError(CdclakeError):
    """A bronze file holds data that cannot be applied (unknown Op, missing key, bad value)."""


class FullLoadPendingError(CdclakeError):
    """CDC files were given for a table whose full load has not been applied yet."""


class LoadFilesConflictError(CdclakeError):
    """LOAD files beside a loaded table that may be a late part of its load or a reload: nothing applied."""


class HistoryBehindError(CdclakeError):
    """A table's history lacks changes silver holds and cannot be caught up (their files are gone)."""


class UnknownTableError(CdclakeError):
    """A table named by the user is not in the configuration."""


class ConcurrentWriterError(CdclakeError):
    """Another writer holds the warehouse or keeps winning the commit race: try again later."""

    exit_code = 75  # EX_TEMPFAIL: the same command later will succeed


class TablesFailedError(CdclakeError):
    """Several tables of one run failed (each named in the message); the others were applied."""


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (Java errors carry whole stack traces), at most 500 characters."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]


def _java_chain(exc: BaseException) -> list[Any]:
    """The Java exceptions of a failed Spark or Iceberg call, outermost first: its
    ``java_exception`` and that one's causes (empty when ``exc`` carries none, or the gateway is
    gone and the chain cannot be read further)."""
    chain: list[Any] = []
    throwable = getattr(exc, "java_exception", None)
    try:
        while throwable is not None and len(chain) < 50:  # finite, but a cycle must not hang
            chain.append(throwable)
            throwable = throwable.getCause()
    except Exception:  # the gateway is gone: what was read so far is all there is
        pass
    return chain


def java_classes(exc: BaseException) -> list[str]:
    """The class names of the Java exceptions a failed Spark or Iceberg call carries, outermost
    first (``org.apache.spark.SparkException``, then its causes); empty for a Python error."""
    names: list[str] = []
    for throwable in _java_chain(exc):
        try:
            names.append(str(throwable.getClass().getName()))
        except Exception:  # the gateway is gone
            break
    return names


def java_cause(exc: BaseException) -> tuple[str, str] | None:
    """The innermost Java cause of a failed Spark call: the first line of its message ("" if it
    has none) and its class's simple name; None when ``exc`` carries no Java exception or the
    gateway is gone. A failure's outer layers only name the py4j call (``An error occurred while
    calling o1170.collectToPython``) or the task; the cause at the bottom says what is wrong."""
    chain = _java_chain(exc)
    if not chain:
        return None
    try:
        message = chain[-1].getMessage()
        kind = str(chain[-1].getClass().getSimpleName())
    except Exception:  # the gateway is gone: the Python-side text is all there is
        return None
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    return (lines[0] if lines else "", kind)


def spark_error_sentence(exc: BaseException) -> str:
    """Spark's reason for an error in one line, without the plan or stack trace it carries.

    ``[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC' (line 1, position 0)`` for a
    ParseException (whose text starts with a blank line), the first line of an AnalysisException,
    the deepest cause's message for a failed Spark job (a ``Py4JJavaError``)."""
    text = str(exc)
    if type(exc).__name__ == "Py4JJavaError" and (cause := java_cause(exc)) is not None:
        text = cause[0] or cause[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    sentence = lines[0] if lines else type(exc).__name__
    sentence = re.sub(r"\.?\s*\(line (\d+), pos (\d+)\)$", r" (line \1, position \2)", sentence)
    sentence = re.sub(r"\.?\s*;\s*line (\d+) pos (\d+);?$", r" (line \1, position \2)", sentence)
    return sentence[:500]
