"""Typed errors. ``CdclakeError`` and its subclasses carry one sentence meant for the user."""

from __future__ import annotations


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


class UnknownTableError(CdclakeError):
    """A table named by the user is not in the configuration."""


class ConcurrentWriterError(CdclakeError):
    """Another writer holds the warehouse or keeps winning the commit race: try again later."""

    exit_code = 75  # EX_TEMPFAIL: the same command later will succeed


class TablesFailedError(CdclakeError):
    """Several tables of one run failed (each named in the message); the others were applied."""
