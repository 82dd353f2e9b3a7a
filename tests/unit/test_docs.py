"""The documentation renders as written: every code fence closes, no table is cut in two by a blank
line, and the README's commands run as shown on a fresh clone (cdclake from .venv, scripts that exist)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "tests" / "README.md"])


def _fences(path: Path) -> list[tuple[int, str]]:
    return [
        (n, line.strip())
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if line.strip().startswith("```")
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_fence_closes(path: Path) -> None:
    # GIVEN the fences of a document, in order WHEN they are paired
    inside: int | None = None
    for number, fence in _fences(path):
        if inside is None:
            inside = number
        else:
            # THEN a fence inside a block closes it, bare (```sql there would open a block unclosed)
            assert fence == "```", f"{path.name}:{number}: the block opened at line {inside} is not closed"
            inside = None
    assert inside is None, f"{path.name}:{inside}: this code block is never closed"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_table_is_cut_in_two_by_a_blank_line(path: Path) -> None:
    lines = path.read_text("utf-8").splitlines()
    cut = [
        n + 1
        for n in range(1, len(lines) - 1)
        if not lines[n].strip()
        and lines[n - 1].startswith("|")
        and lines[n + 1].startswith("|")
        and not (n + 2 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[n + 2]))  # a new table's header
    ]
    assert cut == [], f"{path.name}: a blank line at line(s) {cut} cuts a table in two"


def _blocks(text: str) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)]


def test_the_readme_runs_cdclake_from_the_venv_and_names_scripts_that_exist() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    for block in _blocks(readme):
        activated = False
        for line in block:
            command = line.split("#", 1)[0].strip()
            activated |= command.startswith(". .venv/bin/activate")
            # THEN cdclake is the venv's: written out, or after the block activates the venv
            if command.startswith("cdclake "):
                assert activated, f"`{command}`: cdclake is .venv/bin/cdclake, or activate the venv first"
    # AND the PostgreSQL quick start says where a throwaway server comes from, and that script exists
    quick_start = readme.split("## Your PostgreSQL", 1)[1].split("\n## ", 1)[0]
    scripts = set(re.findall(r"scripts/[\w.-]+", quick_start))
    assert "scripts/postgres-local.sh" in scripts
    assert [s for s in scripts if not (ROOT / s).exists()] == []
