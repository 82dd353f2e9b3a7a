"""Faults the tests inject through the engine's seams (never by patching private names)."""

from __future__ import annotations

from typing import Any

from cdclake.lake.committer import IcebergCommitter


class CrashingCommitter(IcebergCommitter):
    """A committer whose data commits never happen: the job is killed just before each one."""

    def merge(self, *_: Any) -> None:
        raise RuntimeError("the job was killed before its data commit")

    def publish(self, *_: Any, **__: Any) -> None:
        raise RuntimeError("the job was killed before its data commit")

    def append(self, *_: Any) -> None:
        raise RuntimeError("the job was killed before its data commit")


class RacingCommitter(IcebergCommitter):
    """A committer that loses the commit race ``losses`` times: just before each of its first
    ``losses`` merges, another writer (``rival``) commits to the table, and Iceberg refuses."""

    def __init__(self, losses: int, rival: Any = None) -> None:
        self.losses = losses
        self.rival = rival  # called with no arguments: the other writer's commit
        self.attempts = 0

    def publish(self, *args: Any, **kwargs: Any) -> None:
        self.attempts += 1
        if self.attempts <= self.losses:
            if self.rival is not None:
                self.rival()
            raise RuntimeError(
                "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: base metadata location "
                "is not the table's current one (another writer committed first)"
            )
        super().publish(*args, **kwargs)
