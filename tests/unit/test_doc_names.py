"""The names the docs and docstrings give are the code's: template parameters, resources and outputs, state
names, metrics and alarms, CLI commands, files and ``module.path`` references, and the sections they quote.

A name the code no longer has (a state renamed, a module moved, a section retitled) fails here, naming the
file that still says it. Names of AWS, DMS, Spark and Iceberg that the docs use in backticks are in EXTERNAL:
a new one goes there, after checking that it is not one of ours that went away.
"""

from __future__ import annotations

import ast
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from cdclake.config_settings import SETTINGS
from cdclake.ops.metric_catalog import ALARMS, METRICS
from cdclake.shells.cli import COMMANDS
from file_modules import module_at

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "glue" / "cdclake"
DOCS = [ROOT / "README.md", ROOT / "tests" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "glue" / "jobs").glob("*.py"), *(ROOT / "functions").rglob("*.py")])
SKIPPED_DIRS = {".git", ".venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}

# Names of AWS services' APIs, settings and errors, of DMS endpoint settings, and of Spark, Iceberg, PostgreSQL and
# Linux classes, plan nodes or fields that the docs name in backticks: not ours, so not checked against the code.
EXTERNAL = {
    "AccessDenied", "AlreadyExists", "BucketFolder", "BucketName", "CdcInsertsAndUpdates", "CdcInsertsOnly",
    "CdcMaxBatchInterval", "CdcMinFileSize", "CdcPath", "CollapseProject", "CollectMetrics", "CommitMetadata",
    "ConcurrentRunsExceededException", "ConnectionClosedError", "CreateChangeSet", "CsvRowDelimiter", "DataFile",
    "DeduplicateRelations", "DefinitionS3Location", "DefinitionSubstitutions", "DeleteFile", "DeletionPolicy",
    "DontCompileHugeMethods", "ExecutionAlreadyExists", "ExecutionTime", "FailedInvocations", "FileIO",
    "FullLoadProgressPercent", "GenerateUnsafeProjection", "GetTable", "GroupAggregate", "HashAggregate",
    "InvocationsFailedToBeSentToDlq",
    "InvocationsSentToDlq", "LastFailureMessage", "ListObjectsV2", "LobMaxSize", "LocalRelation", "LocationUri",
    "MapUnboundedNumericAsString",
    "MatchedEvents", "MaxConcurrentRuns", "MaxFileSize", "MessageRetentionPeriod", "NaN", "NoSuchBucket",
    "NoSuchKey", "NotificationConfiguration", "PreserveTransactions", "PutMetricData", "PythonUtils",
    "ReadTimeoutError", "ReceiveRequestAttemptId", "RetryInvocationAttempts", "SecretsManagerSecretId",
    "ServiceTimeout", "SlowDown", "SqlCatalog", "StartAfter", "StartJobRun", "StaticTable", "TargetErrorCount",
    "TimestampColumnName", "TypeUtil", "UnsafeProjection", "VmHWM",
}  # fmt: skip
# Files the docs name that are not the repository's: the user's configuration, S3 keys the stack writes.
NOT_IN_REPOSITORY = {
    "cdclake.yaml", "state/reloads.json", "state/silent.json", "state/failing-tables.json",
    "_cdclake/capture-progress.json",
    "_cdclake/cut-request.json",
}  # fmt: skip
# Dotted names that are not module paths: a placeholder for a table's name.
NOT_MODULES = {"schema.table"}


def template() -> dict[str, Any]:
    loaded: dict[str, Any] = module_at(ROOT / "scripts" / "cost_model.py", "cost_model").load_template(
        ROOT / "template.yaml"
    )
    return loaded


def state_names(machine: dict[str, Any]) -> set[str]:
    """Every state of an ASL definition, those inside Parallel branches and Map processors included."""
    names: set[str] = set()
    for name, state in machine.get("States", {}).items():
        names.add(name)
        for inner in [*state.get("Branches", []), state.get("Iterator", {}), state.get("ItemProcessor", {})]:
            names |= state_names(inner)
    return names


@cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a Python file, parsed once."""
    return tuple(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))


@cache
def defined_names(path: Path) -> frozenset[str]:
    """The classes, functions, methods and assigned names (attributes included) of a Python file."""
    names: set[str] = set()
    for node in nodes(path):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(target) if isinstance(n, ast.Attribute)}
    return frozenset(names)


def stack_names() -> set[str]:
    """Everything of ours a doc may name with a capital: the template's, the state machine's, the
    metrics' and alarms', and the Python code's names (the tests' too: tests/README.md names them)."""
    stack = template()
    names = {name for part in ("Parameters", "Resources", "Outputs", "Conditions") for name in stack.get(part, {})}
    names |= set(re.findall(r"Sid: (\w+)", (ROOT / "template.yaml").read_text(encoding="utf-8")))
    for definition in (ROOT / "statemachine").glob("*.asl.json"):
        names |= state_names(json.loads(definition.read_text(encoding="utf-8")))
    names |= {m.name for m in METRICS} | {a.name for a in ALARMS}
    for path in [
        *CODE,
        *(ROOT / "scripts").glob("*.py"),
        *(ROOT / "bench").glob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
    ]:
        names |= defined_names(path)
    return names


def test_every_capitalised_name_the_docs_give_in_backticks_is_ours_or_named_external() -> None:
    # GIVEN the CamelCase names in backticks in README.md and docs/*.md
    known = stack_names()
    unknown = {
        f"{doc.relative_to(ROOT)}: {name}"
        for doc in DOCS
        for name in re.findall(r"`([A-Z][a-z]+(?:[A-Z][A-Za-z0-9]*)+)`", doc.read_text(encoding="utf-8"))
        if name not in known and name not in EXTERNAL
    }
    # THEN each is a parameter, resource, output, state, metric, alarm or Python name of ours, or an outside one
    assert sorted(unknown) == []
    assert not EXTERNAL & known, "a name of ours in EXTERNAL: " + ", ".join(sorted(EXTERNAL & known))


@cache
def repository_files() -> dict[str, list[Path]]:
    """Every file of the repository by its name."""
    files: dict[str, list[Path]] = {}
    for path in ROOT.rglob("*"):
        if path.is_file() and not SKIPPED_DIRS & set(path.relative_to(ROOT).parts):
            files.setdefault(path.name, []).append(path)
    return files


def path_problem(reference: str) -> str | None:
    """Why ``path[:name]`` names nothing: a path from the root, glue/cdclake/, glue/ or tests/(spark/), or a bare file
    name of the repository; ``name`` defined in that Python file."""
    path, _, name = reference.partition(":")
    if path in NOT_IN_REPOSITORY:
        return None
    if "/" in path:
        bases = (ROOT, PACKAGE, ROOT / "glue", ROOT / "tests", ROOT / "tests" / "spark")
        found = [base / path for base in bases if (base / path).is_file()]
    else:
        found = repository_files().get(path, [])
    if not found:
        return "no such file"
    first = re.split(r"[.(\[]", name)[0] if name else ""
    if first and found[0].suffix == ".py" and not any(first in defined_names(f) for f in found):
        return f"{found[0].relative_to(ROOT)} defines no {first}"
    return None


PATH = re.compile(r"`+((?:[\w.-]+/)*[\w-]+\.(?:py|json|md|yaml|yml|sh|toml|txt)(?::[A-Za-z_][\w.]*)?)`*")


def test_every_file_and_definition_the_docs_and_docstrings_name_exists() -> None:
    # GIVEN every `path` or `path:name` in backticks in the docs and in the code's docstrings and comments
    stale = {
        f"{source.relative_to(ROOT)}: {ref}: {problem}"
        for source in [*DOCS, *CODE, ROOT / "template.yaml"]
        for ref in set(PATH.findall(source.read_text(encoding="utf-8")))
        if (problem := path_problem(ref))
    }
    # THEN each file exists and defines the name
    assert sorted(stale) == []


def module_problem(reference: str) -> str | None:
    """Why ``package.module.Name`` (optionally ``cdclake.``-prefixed) is no module of glue/cdclake or no name
    in it; ``engine.attribute`` may also be an attribute of ``Engine`` (context.py)."""
    parts = reference.removeprefix("cdclake.").split(".")
    base, i = PACKAGE, 0
    while i < len(parts) and (base / parts[i]).is_dir():
        base, i = base / parts[i], i + 1
    if i == len(parts):
        return None
    module = base / f"{parts[i]}.py"
    if not module.is_file():
        if parts[0] == "engine" and parts[1] in defined_names(PACKAGE / "context.py"):
            return None  # the Engine handed to every stage, spelt as the parameter's name
        return f"no module {module.relative_to(ROOT)}"
    if i + 1 < len(parts) and parts[i + 1] not in defined_names(module):
        return f"{module.relative_to(ROOT)} defines no {parts[i + 1]}"
    return None


def not_module_paths() -> set[str]:
    """Dotted names that are keys, not modules: the configuration's keys and the code's string literals
    (Iceberg properties such as ``cdclake.gold.sources``)."""
    keys = {s.path.removeprefix("tables.<schema.table>.") for s in SETTINGS}
    literals = {
        node.value
        for path in CODE
        for node in nodes(path)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    return keys | literals | NOT_MODULES


def dotted_references(text: str) -> set[str]:
    packages = sorted(p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file())
    pattern = r"`+((?:cdclake\.)?(?:" + "|".join(packages) + r")(?:\.[A-Za-z_]\w*)+)(?:\(\))?`+"
    return {ref for ref in re.findall(pattern, text) if not re.search(r"\.(py|md|json|yaml)$", ref)}


# Stale references in modules another change is rewriting now; this list may only shrink (each must still
# be stale, so a correction removes it here too).
STALE_ELSEWHERE: set[str] = set()


def test_every_module_path_the_docs_and_docstrings_name_is_a_module_and_name_of_the_package() -> None:
    # GIVEN every ``package.module.Name`` in backticks in the docs and the code, less keys and properties
    skipped = not_module_paths()
    stale = {
        f"{source.relative_to(ROOT)}: {ref}"
        for source in [*DOCS, *CODE]
        for ref in dotted_references(source.read_text(encoding="utf-8"))
        if ref not in skipped and module_problem(ref)
    }
    # THEN each resolves (but the ones listed as being corrected elsewhere, which must still be stale)
    assert sorted(stale - STALE_ELSEWHERE) == []
    assert stale >= STALE_ELSEWHERE, STALE_ELSEWHERE - stale


def test_every_cdclake_command_the_docs_name_exists() -> None:
    # GIVEN every `cdclake <command>` in backticks in the docs / THEN it is a command of the CLI
    pattern = re.compile(r"`(?:\.venv/bin/)?cdclake (?:--config \S+ )?([a-z][a-z-]*)")
    named = {(doc.name, c) for doc in DOCS for c in pattern.findall(doc.read_text(encoding="utf-8"))}
    assert named and sorted((doc, c) for doc, c in named if c not in COMMANDS) == []


def section_titles(doc: Path) -> list[str]:
    """A doc's headings and its bold paragraph or list-item labels (``**A new table setting**``)."""
    text = doc.read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    return headings + re.findall(r"^\s*(?:[-*] )?\*\*([^*]+)\*\*", text, flags=re.MULTILINE)


def test_every_section_a_reference_quotes_is_a_section_of_that_doc() -> None:
    # GIVEN every `docs/x.md, "Section"` (or `x.md ("Section", "Other")`) in the code, template, tests and docs
    pattern = re.compile(r'((?:docs/)?[\w-]+\.md)`?[,:]?\s+\(?((?:"[^"\n]+"(?:,\s*|\s+and\s+)?)+)')
    tests = [p for p in sorted((ROOT / "tests").rglob("*.py")) if p != Path(__file__).resolve()]
    sources = [*CODE, ROOT / "template.yaml", *DOCS, *tests]
    stale = set()
    for source in sources:
        text = re.sub(r"\n\s*(?:[#>]\s*)?", " ", source.read_text(encoding="utf-8"))  # wrapped lines joined
        for doc, quoted in pattern.findall(text):
            target = ROOT / "docs" / Path(doc).name
            titles = section_titles(target) if target.is_file() else []
            stale |= {
                f"{source.relative_to(ROOT)}: {doc}, {title!r}"
                for title in re.findall(r'"([^"]+)"', quoted)
                if not any(t.startswith(title) for t in titles)
            }
    # THEN the doc has a heading (or bold label) that starts with it
    assert sorted(stale) == []
