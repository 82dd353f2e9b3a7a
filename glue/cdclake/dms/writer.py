"""Write files the way AWS DMS writes them to S3 (CSV dialect, names, layout), plus a replay oracle.

Used by the demo, the tests and (later) local change capture. The oracle replays a change log in
commit order in plain Python, independent of Spark and of the engine's code path.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

Value = str | None


@dataclass(frozen=True)
class SourceChange:
    """One committed row change at the source, in DMS terms (values as DMS writes them: text)."""

    op: str  # I, U or D
    row: dict[str, Value]
    commit_ts: str  # yyyy-MM-dd HH:mm:ss.SSSSSS
    seq: str  # AR_H_CHANGE_SEQ: unique, increasing, fixed width


def change_sequence(commit_ts: str, counter: int) -> str:
    """A 35-character change sequence like DMS's AR_H_CHANGE_SEQ: commit time digits + a counter."""
    digits = "".join(ch for ch in commit_ts if ch.isdigit())
    return f"{digits:0<20}"[:20] + f"{counter:015d}"


def csv_field(value: Value, delimiter: str = ",", null_value: str = "") -> str:
    """One field in DMS's CSV dialect: NULL as the null marker; quoted when it must be (RFC 4180)."""
    if value is None:
        return null_value
    needs_quotes = value == "" or value == null_value or any(c in value for c in (delimiter, '"', "\n", "\r"))
    return '"' + value.replace('"', '""') + '"' if needs_quotes else value


def csv_text(records: Iterable[Sequence[Value]], delimiter: str = ",", null_value: str = "") -> str:
    return "".join(delimiter.join(csv_field(v, delimiter, null_value) for v in r) + "\n" for r in records)


def write_csv(
    path: Path,
    records: Iterable[Sequence[Value]],
    header: Sequence[str] | None = None,
    delimiter: str = ",",
    null_value: str = "",
    compress: bool = False,
) -> Path:
    """Write a DMS CSV file (gzip when ``compress``); the parent folders are created. The file
    appears whole, as DMS's uploads do: it is written outside bronze and renamed into place, so a
    loop listing bronze meanwhile never sees it empty or partial."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (delimiter.join(header) + "\n" if header else "") + csv_text(records, delimiter, null_value)
    data = text.encode("utf-8")
    with tempfile.NamedTemporaryFile(delete=False, suffix=".part") as staged:
        staged.write(gzip.compress(data) if compress else data)
    shutil.move(staged.name, path)  # a rename on one file system
    return path


def load_file_name(counter: int, extension: str = "csv") -> str:
    """``LOAD`` + 8 hexadecimal digits, as DMS numbers full-load files (1-based)."""
    return f"LOAD{counter:08X}.{extension}"


def cdc_file_name(commit_ts: str, extension: str = "csv") -> str:
    """A CDC file name from a timestamp: ``yyyyMMdd-HHmmssSSSS``."""
    digits = "".join(ch for ch in commit_ts if ch.isdigit())
    return f"{digits[:8]}-{digits[8:18]:0<10}.{extension}"


def cdc_records(
    changes: Iterable[SourceChange], columns: Sequence[str], with_timestamp: bool = True, with_seq: bool = True
) -> list[list[Value]]:
    """Headerless CDC rows: Op, [timestamp], the columns, [change sequence] (DMS's order)."""
    records = []
    for change in changes:
        record: list[Value] = [change.op]
        if with_timestamp:
            record.append(change.commit_ts)
        record.extend(change.row.get(c) for c in columns)
        if with_seq:
            record.append(change.seq)
        records.append(record)
    return records


def write_durably(path: Path, data: bytes) -> None:
    """Write ``path`` atomically: a temporary name, fsync, rename, fsync of the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
