"""Faults the tests inject through the engine's seams (never by patching private names)."""

from __future__ import annotations

from typing import Any

from cdclake.lake.tables import IcebergCommitter


class CrashingCommitter(IcebergCommitter):
    """A committer whose data commits never happen: the job is killed just before each one."""

    def merge(self, *_: Any) -> None:
        raise RuntimeError("the job was killed before its data commit")

    def append(self, *_: Any) -> None:
        raise RuntimeError("the job was killed before its data commit")
