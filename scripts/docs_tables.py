"""Write the docs' generated tables from their one declaration in the code, or check them.

- docs/runbook.md, "Alarms": ``cdclake.ops.metric_catalog.alarm_table()`` (the ``ALARMS`` declarations);
- docs/configuration.md, "Every setting": ``cdclake.config_settings.settings_table()`` (the ``SETTINGS``);
- docs/configuration.md, the column types: ``cdclake.types.types_table()`` (the ``COLUMN_TYPES``).

Each table sits between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``. Run it after
changing a declaration (``make docs-tables``); ``--check`` exits 1 naming a table that differs (the unit tests
tests/unit/test_metric_catalog.py and test_config_settings.py check the same).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "glue"))

from cdclake.config_settings import settings_table  # noqa: E402
from cdclake.ops.metric_catalog import alarm_table  # noqa: E402
from cdclake.types import types_table  # noqa: E402

TABLES: dict[str, tuple[Path, Callable[[], str]]] = {
    "alarms": (ROOT / "docs" / "runbook.md", alarm_table),
    "settings": (ROOT / "docs" / "configuration.md", settings_table),
    "types": (ROOT / "docs" / "configuration.md", types_table),
}


def with_table(text: str, name: str, table: str) -> str:
    """``text`` with the block between NAME's markers replaced by ``table``; ValueError if a marker is missing."""
    start, end = f"<!-- generated: {name} -->\n", f"<!-- end generated: {name} -->"
    if start not in text or end not in text.split(start, 1)[-1]:
        raise ValueError(f"no '{start.strip()}' ... '{end}' markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}{table}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a table differs; write nothing")
    check = parser.parse_args(argv).check
    stale = []
    for name, (path, make) in TABLES.items():
        text = path.read_text(encoding="utf-8")
        wanted = with_table(text, name, make())
        if wanted != text:
            stale.append(f"{path.relative_to(ROOT)} ({name})")
            if not check:
                path.write_text(wanted, encoding="utf-8")
    if stale:
        print(("differs: " if check else "written: ") + ", ".join(stale))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
