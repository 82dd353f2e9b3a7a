"""Decode PostgreSQL's ``pgoutput`` logical decoding messages (protocol version 1), as pure functions.

The message layout is PostgreSQL's "Logical Replication Message Formats" chapter. Column values
arrive as the type's text output (``'t'``), SQL NULL (``'n'``) or "unchanged TOAST value, not sent"
(``'u'``); the binary option is never requested, so ``'b'`` is rejected.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# A column value: text, None for SQL NULL, or UNCHANGED_TOAST for a value the WAL did not carry.
UNCHANGED_TOAST = object()
ColumnValue = str | None | object

_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class PgOutputError(ValueError):
    """A message this decoder does not understand (never skipped silently)."""


@dataclass(frozen=True)
class Begin:
    final_lsn: int  # the LSN of the commit record
    commit_ts: datetime
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int  # the end of the commit record: the position to confirm once this is durable
    commit_ts: datetime


@dataclass(frozen=True)
class RelationColumn:
    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True)
class Relation:
    relation_id: int
    schema: str
    table: str
    replica_identity: str  # d (default), n (nothing), f (full), i (index)
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True)
class RowChange:
    """An insert (``I``), update (``U``) or delete (``D``) of one row.

    ``new`` is the row after an insert or update; ``old`` is the replica identity before an update
    or delete: key columns only (``old_is_key``) or the whole row (REPLICA IDENTITY FULL). An
    update carries ``old`` only when the key changed or the identity is FULL.
    """

    op: str
    relation_id: int
    new: tuple[ColumnValue, ...] | None
    old: tuple[ColumnValue, ...] | None
    old_is_key: bool


@dataclass(frozen=True)
class Truncate:
    relation_ids: tuple[int, ...]


@dataclass(frozen=True)
class Ignored:
    """Origin and type messages: nothing to capture."""

    kind: str


Message = Begin | Commit | Relation | RowChange | Truncate | Ignored


def pg_timestamp(microseconds: int) -> datetime:
    """A timestamp on the wire (microseconds since 2000-01-01 UTC) as an aware UTC datetime."""
    return _PG_EPOCH + timedelta(microseconds=microseconds)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def byte(self) -> str:
        value = chr(self.data[self.pos])
        self.pos += 1
        return value

    def string(self) -> str:
        end = self.data.index(b"\x00", self.pos)
        value = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return value

    def tuple_data(self) -> tuple[ColumnValue, ...]:
        values: list[ColumnValue] = []
        for _ in range(self.take("!h")):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED_TOAST)
            elif kind == "t":
                length = self.take("!i")
                values.append(self.data[self.pos : self.pos + length].decode("utf-8"))
                self.pos += length
            else:
                raise PgOutputError(f"unsupported column value kind '{kind}' (binary values are not requested)")
        return tuple(values)


def decode(payload: bytes) -> Message:
    """One pgoutput message -> its typed form; raise ``PgOutputError`` for unknown messages."""
    reader = _Reader(bytes(payload))
    kind = reader.byte()
    if kind == "B":
        return Begin(final_lsn=reader.take("!Q"), commit_ts=pg_timestamp(reader.take("!q")), xid=reader.take("!I"))
    if kind == "C":
        reader.byte()  # flags, unused
        return Commit(
            commit_lsn=reader.take("!Q"), end_lsn=reader.take("!Q"), commit_ts=pg_timestamp(reader.take("!q"))
        )
    if kind == "R":
        relation_id = reader.take("!I")
        schema, table = reader.string(), reader.string()
        identity = reader.byte()
        columns = []
        for _ in range(reader.take("!h")):
            flags = reader.take("!B")
            columns.append(RelationColumn(reader.string(), reader.take("!I"), reader.take("!i"), bool(flags & 1)))
        return Relation(relation_id, schema, table, identity, tuple(columns))
    if kind == "I":
        relation_id = reader.take("!I")
        if reader.byte() != "N":
            raise PgOutputError("an insert message without its new tuple")
        return RowChange("I", relation_id, new=reader.tuple_data(), old=None, old_is_key=False)
    if kind == "U":
        relation_id = reader.take("!I")
        marker = reader.byte()
        old: tuple[ColumnValue, ...] | None = None
        old_is_key = marker == "K"
        if marker in ("K", "O"):
            old = reader.tuple_data()
            marker = reader.byte()
        if marker != "N":
            raise PgOutputError(f"an update message with unexpected tuple marker '{marker}'")
        return RowChange("U", relation_id, new=reader.tuple_data(), old=old, old_is_key=old_is_key)
    if kind == "D":
        relation_id = reader.take("!I")
        marker = reader.byte()
        if marker not in ("K", "O"):
            raise PgOutputError(f"a delete message with unexpected tuple marker '{marker}'")
        return RowChange("D", relation_id, new=None, old=reader.tuple_data(), old_is_key=marker == "K")
    if kind == "T":
        count = reader.take("!I")
        reader.byte()  # options: CASCADE / RESTART IDENTITY
        return Truncate(tuple(reader.take("!I") for _ in range(count)))
    if kind in ("O", "Y"):
        return Ignored(kind)
    raise PgOutputError(f"unknown pgoutput message type '{kind}'")


def format_lsn(lsn: int) -> str:
    """An LSN in PostgreSQL's ``X/Y`` text form."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """PostgreSQL's ``X/Y`` text form -> an integer LSN."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)
