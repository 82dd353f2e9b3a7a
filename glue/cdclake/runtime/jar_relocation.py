"""Relocate Java packages inside jars by rewriting class-file constant pools.

The Iceberg Spark runtime published on PyPI lacks the shaded Jackson classes it links against
(``org.apache.iceberg.shaded.com.fasterxml.jackson``). PySpark ships the same Jackson version
unshaded, so relocating those jars gives Iceberg exactly what it expects. Only UTF-8 constant-pool
entries change; everything after the constant pool is copied byte for byte, which keeps every
constant-pool index valid.
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

CLASS_MAGIC = 0xCAFEBABE

# Constant-pool tag -> payload size in bytes (UTF-8 entries are variable-length and handled apart).
_FIXED_SIZE_TAGS = {
    3: 4,  # Integer
    4: 4,  # Float
    5: 8,  # Long (takes two slots)
    6: 8,  # Double (takes two slots)
    7: 2,  # Class
    8: 2,  # String
    9: 4,  # Fieldref
    10: 4,  # Methodref
    11: 4,  # InterfaceMethodref
    12: 4,  # NameAndType
    15: 3,  # MethodHandle
    16: 2,  # MethodType
    17: 4,  # Dynamic
    18: 4,  # InvokeDynamic
    19: 2,  # Module
    20: 2,  # Package
}
_UTF8_TAG = 1


class ClassFileError(ValueError):
    """A class file could not be parsed."""


@dataclass(frozen=True)
class Relocation:
    """Move every name under ``source`` (dotted package) to ``target``."""

    source: str
    target: str

    def rewrite_text(self, text: str) -> str:
        """Rewrite both the internal (slashed) and the binary (dotted) spelling of the package.

        Only whole package names move: ``com.fasterxml.jacksonx`` is another package.
        """
        for source, target in (
            (self.source.replace(".", "/"), self.target.replace(".", "/")),
            (self.source, self.target),
        ):
            text = re.sub(re.escape(source) + r"(?![A-Za-z0-9_])", target.replace("\\", "\\\\"), text)
        return text

    def rewrite_path(self, entry_name: str) -> str:
        return self.rewrite_text(entry_name)


def _constant_pool(data: bytes) -> Iterator[tuple[int, int, int]]:
    """Yield ``(tag, start, end)`` for each constant-pool entry; the last end is where the pool stops."""
    if len(data) < 10 or struct.unpack_from(">I", data, 0)[0] != CLASS_MAGIC:
        raise ClassFileError("not a Java class file (bad magic number)")
    (pool_count,) = struct.unpack_from(">H", data, 8)
    offset, index = 10, 1
    while index < pool_count:
        if offset + 3 > len(data):
            raise ClassFileError(f"class file ends inside its constant pool (entry {index})")
        tag = data[offset]
        if tag == _UTF8_TAG:
            (length,) = struct.unpack_from(">H", data, offset + 1)
            size = 3 + length
        elif tag in _FIXED_SIZE_TAGS:
            size = 1 + _FIXED_SIZE_TAGS[tag]
        else:
            raise ClassFileError(f"unknown constant-pool tag {tag} at byte {offset}")
        if offset + size > len(data):
            raise ClassFileError(f"constant-pool entry {index} runs past the end of the class file")
        yield tag, offset, offset + size
        offset += size
        index += 2 if tag in (5, 6) else 1


def _decode(raw: bytes) -> str:
    # Modified UTF-8 differs from UTF-8 only for NUL and supplementary characters, which never
    # occur in the ASCII package names replaced here; surrogateescape round-trips the rest.
    return raw.decode("utf-8", errors="surrogateescape")


def relocate_class(data: bytes, relocation: Relocation) -> bytes:
    """Return the class file ``data`` with every UTF-8 constant rewritten by ``relocation``."""
    out = bytearray(data[:10])
    pool_end = 10
    for tag, start, end in _constant_pool(data):
        if tag == _UTF8_TAG:
            text = relocation.rewrite_text(_decode(data[start + 3 : end]))
            encoded = text.encode("utf-8", errors="surrogateescape")
            out += bytes([tag]) + struct.pack(">H", len(encoded)) + encoded
        else:
            out += data[start:end]
        pool_end = end
    out += data[pool_end:]
    return bytes(out)


def _skip_entry(name: str) -> bool:
    # module-info and multi-release variants describe the unshaded module; they would clash.
    return name.endswith("module-info.class") or name.startswith("META-INF/versions/")


def relocate_jars(sources: Iterable[Path], destination: Path, relocation: Relocation) -> Path:
    """Merge ``sources`` into one jar at ``destination`` with ``relocation`` applied.

    Class files get their constant pools rewritten, entry paths are moved, and ServiceLoader
    files (``META-INF/services/...``) are renamed and rewritten so relocated providers still load.
    The jar is written to a temporary name of this process's first, so an interrupted run never
    leaves a half jar and two processes building it at once (two commands on a fresh machine) each
    move a whole one into place.
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(f"{destination.name}.{os.getpid()}.partial")
    seen: set[str] = set()
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for source in sources:
            with zipfile.ZipFile(source) as jar:
                for info in jar.infolist():
                    if info.is_dir() or _skip_entry(info.filename):
                        continue
                    data = jar.read(info)
                    name = relocation.rewrite_path(info.filename)
                    if info.filename.endswith(".class"):
                        data = relocate_class(data, relocation)
                    elif info.filename.startswith("META-INF/services/"):
                        data = relocation.rewrite_text(data.decode("utf-8")).encode("utf-8")
                    if name in seen:
                        continue  # LICENSE / NOTICE / MANIFEST appear in every jar: keep the first
                    seen.add(name)
                    out.writestr(name, data)
    partial.replace(destination)
    return destination


def list_class_names(jar_path: Path) -> list[str]:
    """Class names (dotted) in a jar, for diagnostics and the tests."""
    with zipfile.ZipFile(jar_path) as jar:
        return [n[: -len(".class")].replace("/", ".") for n in jar.namelist() if n.endswith(".class")]


def utf8_constants(data: bytes) -> list[str]:
    """All UTF-8 constants of a class file, in pool order (for tests and diagnostics)."""
    return [_decode(data[start + 3 : end]) for tag, start, end in _constant_pool(data) if tag == _UTF8_TAG]
