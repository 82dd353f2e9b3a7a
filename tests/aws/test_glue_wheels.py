"""The Glue jobs start without the internet.

`make deploy-wheel` builds dist/cdclake-<version>.gluewheels.zip (the cdclake wheel and every dependency) and the
jobs install it with --python-modules-installer-option --no-index. This test builds that zip as the deploy does,
installs it with no index, and imports, from the installed wheels and the standard library alone, every
third-party module the Glue entry points and the cdclake package import, except what AWS Glue 5.1 provides.
Building the zip downloads wheels from the package index (as `make deploy` does).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT
from test_deploy import stack_artifacts
from test_static import template

# Modules AWS Glue 5.1 provides that no wheel brings: Spark's Python side and Glue's own library. (pyarrow and
# boto3, also in the image, are bundled at the image's versions: glue/requirements-glue.txt.)
GLUE_RUNTIME = {"pyspark", "py4j", "awsglue"}


def _imports(tree: ast.Module) -> set[str]:
    """Dotted names a module imports when it runs (imports under ``if TYPE_CHECKING:`` excluded)."""
    skipped = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for child in ast.walk(statement)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _module_file(name: str) -> Path | None:
    parts = ROOT / "glue" / Path(*name.split("."))
    for candidate in (parts.with_suffix(".py"), parts / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def third_party_imports() -> set[str]:
    """Top-level names of the modules outside cdclake that the Glue entry points (glue/jobs/*.py) import, directly
    or through the cdclake modules they reach (function-level imports included: they run too)."""
    pending = list((ROOT / "glue" / "jobs").glob("*.py"))
    seen: set[Path] = set()
    names: set[str] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if name.split(".")[0] != "cdclake":
                names.add(name.split(".")[0])
                continue
            parts = name.split(".")
            for end in range(1, len(parts) + 1):  # a package's __init__ runs before its modules
                found = _module_file(".".join(parts[:end]))
                if found is not None:
                    pending.append(found)
    return names - set(sys.stdlib_module_names) - {"__future__"}


def test_the_import_scan_sees_the_drivers_and_the_runtime() -> None:
    found = third_party_imports()
    # psycopg2: the verify job reads PostgreSQL through the verify engine's psycopg2 connection
    assert {"yaml", "pg8000", "pymysql", "pytds", "pyarrow", "boto3", "pyspark", "psycopg2"} <= found


@pytest.fixture(scope="module")
def glue_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dist/ as `make deploy-wheel` leaves it: the cdclake wheel and its zip of wheels."""
    root = tmp_path_factory.mktemp("deploy")
    shutil.copytree(ROOT / "glue", root / "glue", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(root / "dist"), str(ROOT)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return Path(stack_artifacts.build_glue_wheels(root))


@pytest.mark.stack
def test_every_import_of_the_glue_jobs_resolves_from_the_uploaded_wheels_with_no_index(
    glue_wheels: Path, tmp_path: Path
) -> None:
    # GIVEN the zip the deploy uploads, laid out as the AWS Glue guide's zip of wheels
    with zipfile.ZipFile(glue_wheels) as archive:
        names = archive.namelist()
        archive.extractall(tmp_path)
    assert "wheels/requirements.txt" in names and all(n.startswith("wheels/") for n in names)
    assert any(n.startswith("wheels/cdclake-") for n in names)
    # WHEN pip installs it as Glue does, with no index
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels),
         "--isolated", "--target", str(site), "-r", str(wheels / "requirements.txt")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    # THEN every module the jobs import comes from those wheels, the standard library, or Glue's own runtime
    needed = sorted(third_party_imports() - GLUE_RUNTIME)
    probe = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; import importlib.util as u; "
    probe += "assert u.find_spec('cdclake.shells.glue_job').origin.startswith(sys.path[0])"
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {probe}", *needed],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # AND the versions Glue 5.1 ships are the ones bundled (never a second pyarrow or boto3 beside the image's)
    assert any(n.startswith("wheels/pyarrow-22.0.0-") for n in names)
    assert any(n.startswith("wheels/boto3-1.40.61-") for n in names)


def test_every_job_installs_the_zip_of_wheels_with_no_index() -> None:
    for name, resource in template()["Resources"].items():
        if resource["Type"] == "AWS::Glue::Job":
            arguments = resource["Properties"]["DefaultArguments"]
            assert arguments["--python-modules-installer-option"] == "--no-index", name
            text, variables = arguments["--additional-python-modules"]["Sub"]
            assert text == "s3://${ArtifactsBucket}/${WheelsKey}", name
            # cdclake-0.1.0-py3-none-any.whl -> cdclake-0.1.0.gluewheels.zip, as the upload names it
            key = variables["WheelsKey"]["Join"][1]
            assert key[0] == {"Select": [0, {"Split": ["-py3-none-any.whl", {"Ref": "LibraryWheelKey"}]}]}
            assert key[1] == ".gluewheels.zip"
    assert (
        stack_artifacts.glue_wheels_name(Path("glue/cdclake-0.1.0-py3-none-any.whl")) == "cdclake-0.1.0.gluewheels.zip"
    )
