"""What bronze holds, kept current by listings that cost what is new (``follow``'s view of bronze).

A full listing reads every key: a request per 1,000 keys. A table's folder is looked at again with
S3's ``StartAfter`` set to its newest CDC key: DMS names CDC files by their write time, and LOAD
files (``LOAD…``) sort after every timestamp, so one request returns the folder's new CDC files and
its LOAD files. That holds only while key order is time order: date folders written year first
(``YYYYMMDD``, ``YYYY/MM/DD``…) keep it; ``DDMMYYYY`` and ``MMYYYYDD`` do not, and such a folder is
listed whole. A file that lands out of order (an upload that finished late) is added by its key
when its S3 event names it (``announce``), or by the next full listing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cdclake.dms.files import BronzeFile, BronzeListing, FileKind, parse_key
from cdclake.dms.store import BronzeStore, list_bronze, versioned


def _changed(before: BronzeFile | None, now: BronzeFile) -> bool:
    """Whether a listing shows ``now`` as new to the index: a key not seen, another size, or (a LOAD
    file written again in place) another version."""
    return before != now or (before is not None and before.version != now.version)


def folder_of(file: BronzeFile) -> str:
    """The folder a table's files are listed from: ``schema/table``, or the transaction folder."""
    return file.table if file.is_multi_table else f"{file.schema}/{file.table}"


def in_time_order(file: BronzeFile, folder: str) -> bool:
    """Whether the file's date folders (if any) read as the start of its write time, so that key
    order is time order: ``2024/03/01/20240301-…`` yes, ``01032024/20240301-…`` no."""
    between = file.key[len(folder) + 1 : -len(file.name)]
    folders = "".join(ch for ch in between if ch.isdigit())
    stamp = "".join(ch for ch in file.name.split(".", 1)[0] if ch.isdigit())
    return stamp.startswith(folders)


def list_from(
    store: BronzeStore, starts: Mapping[str, str | None], transaction_path: str | None = None
) -> BronzeListing:
    """Each folder of ``starts`` listed after its start key (S3 ``StartAfter``; None: the whole
    folder), in one listing: a request per folder and per 1,000 keys found, not per 1,000 keys
    the folder holds. A start is a table's watermark (``lake.ledger_record.AppliedKeys``): with date
    folders written year first, key order is time order across them, so one listing after it
    reads only the date folders from its day on, and the table's LOAD files, which sort after every
    CDC name (a reload's new LOAD files are found)."""
    files: list[BronzeFile] = []
    unrecognised: list[str] = []
    for folder, start in sorted(starts.items()):
        listed = list_bronze(store, folder, transaction_path, start_after=start)
        # a deeper folder of another table (``s/t/x`` under ``s/t``) is not this folder's
        files.extend(f for f in listed.files if folder_of(f) == folder)
        unrecognised.extend(listed.unrecognised)
    return BronzeListing(files=tuple(sorted(files)), unrecognised=tuple(unrecognised))


@dataclass
class BronzeIndex:
    """Every DMS file seen in bronze, by key; the keys that were not DMS files, with their reasons."""

    store: BronzeStore
    transaction_path: str | None = None
    files: dict[str, BronzeFile] = field(default_factory=dict)
    unrecognised: tuple[str, ...] = ()
    requests: int = 0  # listings made (one per folder or full listing; S3 adds one per 1,000 keys)
    # folder -> the key its last ``relist`` started after: nothing at or below it is looked at again
    floors: dict[str, str] = field(default_factory=dict)

    def relist(self, starts: Mapping[str, str | None] | None = None) -> set[str]:
        """List bronze again: all of it, or (``starts``) each of these folders after its start key
        (``list_from``); the keys new to the index (or changed in size)."""
        if starts is None:
            listing = list_bronze(self.store, transaction_path=self.transaction_path)
            self.requests += 1
        else:
            listing = list_from(self.store, starts, self.transaction_path)
            self.requests += len(starts)
        self.floors = {folder: start for folder, start in (starts or {}).items() if start is not None}
        before = self.files
        self.files = {f.key: f for f in listing.files}
        self.unrecognised = listing.unrecognised
        return {k for k, f in self.files.items() if _changed(before.get(k), f)}

    def newest_in_order(self, folder: str) -> str | None:
        """The folder's newest CDC key, when listing after it misses nothing; None: list it whole."""
        cdc = [f for f in self.files.values() if f.kind is FileKind.CDC and folder_of(f) == folder]
        floor = self.floors.get(folder)
        if not cdc:
            return floor
        if not all(in_time_order(f, folder) for f in cdc):
            return None
        return max([f.key for f in cdc] + ([floor] if floor else []))

    def look(self, folders: Iterable[str]) -> set[str]:
        """List each folder after its newest CDC key; the keys new to the index (or changed)."""
        new: set[str] = set()
        for folder in sorted(set(folders)):
            after = self.newest_in_order(folder)
            listed = list_bronze(self.store, folder, self.transaction_path, start_after=after)
            self.requests += 1
            # What sorts after ``after`` is replaced by the listing: a LOAD file removed or rewritten shows.
            for key in [k for k, f in self.files.items() if folder_of(f) == folder and (after is None or k > after)]:
                if all(key != f.key for f in listed.files):
                    del self.files[key]
            for file in listed.files:
                if folder_of(file) != folder:
                    continue  # a deeper folder of another table (``s/t/x`` under ``s/t``) is not this table's
                if _changed(self.files.get(file.key), file):
                    new.add(file.key)
                self.files[file.key] = file
        return new

    def announce(self, keys: Iterable[str]) -> tuple[set[str], set[str]]:
        """Add files named by their events (relative keys) that no listing showed, their size read
        from the store: the keys added, and the DMS keys that no longer exist. Other keys are ignored."""
        new: set[str] = set()
        missing: set[str] = set()
        for key in keys:
            if key in self.files:
                continue
            try:
                parse_key(key, 0, self.transaction_path)
            except ValueError:
                continue
            size = self.store.size(key)
            if size is None:
                missing.add(key)
                continue
            file = versioned(self.store, parse_key(key, size, self.transaction_path))
            self.files[file.key] = file
            new.add(file.key)
        return new, missing

    def forget_applied(self, applied: Callable[[BronzeFile], bool]) -> int:
        """Drop the CDC files ``applied`` says are done, except each folder's newest (the next look
        starts after it): a long follow keeps what is pending in memory, not all of bronze.
        Returns how many were dropped; the next ``relist`` reads them again (and drops them again)."""
        newest: dict[str, str] = {}
        for file in self.files.values():
            if file.kind is FileKind.CDC:
                folder = folder_of(file)
                newest[folder] = max(newest.get(folder, file.key), file.key)
        done = [k for k, f in self.files.items() if f.kind is FileKind.CDC and k != newest[folder_of(f)] and applied(f)]
        for key in done:
            del self.files[key]
        return len(done)

    def listing(self) -> BronzeListing:
        return BronzeListing(files=tuple(sorted(self.files.values())), unrecognised=self.unrecognised)
