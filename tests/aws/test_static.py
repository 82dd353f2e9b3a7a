"""Static checks of the stack: placeholders, ASL validators, SAM validate/build, checkov.

SAM CLI and checkov pin boto3 versions that conflict with the project's pins (and with each other),
so they live in their own virtual environments under .venv/tools (`make aws-tools`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import DEFINITION, ROOT

TOOLS = ROOT / ".venv" / "tools"
SAM = TOOLS / "sam" / "bin" / "sam"
CHECKOV = TOOLS / "checkov" / "bin" / "checkov"
OFFLINE = {**os.environ, "SAM_CLI_TELEMETRY": "0", "BC_SKIP_MAPPING": "TRUE", "AWS_DEFAULT_REGION": "us-east-1"}


class _CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation short-form tags (!Ref, !Sub ...) as plain values."""


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def template() -> dict[str, Any]:
    return yaml.load((ROOT / "template.yaml").read_text(), Loader=_CfnLoader)  # a SafeLoader subclass


def needs(tool: Path) -> None:
    if not tool.exists():
        pytest.skip(f"{tool} is missing: run `make aws-tools`")


def test_every_placeholder_has_a_substitution_and_every_substitution_is_used() -> None:
    placeholders = set(re.findall(r"\$\{([A-Za-z0-9_]+)\}", DEFINITION.read_text()))
    substitutions = set(template()["Resources"]["PipelineStateMachine"]["Properties"]["DefinitionSubstitutions"])
    assert placeholders == substitutions
    assert "StateMachineArn" in placeholders


def test_definition_is_valid_json_with_reachable_states() -> None:
    definition = json.loads(DEFINITION.read_text())
    states = definition["States"]
    targets = {definition["StartAt"]}
    for state in states.values():
        targets |= {state[k] for k in ("Next", "Default") if k in state}
        targets |= {c["Next"] for c in state.get("Choices", []) + state.get("Catch", [])}
    assert targets <= set(states), targets - set(states)
    assert set(states) <= targets, set(states) - targets


def test_statelint_is_clean() -> None:
    statelint = shutil.which("statelint", path=str(ROOT / ".venv" / "bin"))
    assert statelint, "statelint is a dev dependency (pyproject.toml)"
    run = subprocess.run([statelint, str(DEFINITION)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_sam_validate_lint_is_clean() -> None:
    needs(SAM)
    run = subprocess.run(
        [str(SAM), "validate", "--lint", "--region", "us-east-1"],
        cwd=ROOT, capture_output=True, text=True, env=OFFLINE, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "is a valid SAM Template" in run.stdout + run.stderr


def test_sam_build_succeeds(tmp_path: Path) -> None:
    needs(SAM)
    run = subprocess.run(
        [str(SAM), "build", "--build-dir", str(tmp_path / "build"), "--region", "us-east-1"],
        cwd=ROOT, capture_output=True, text=True, env=OFFLINE, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "build" / "DequeueBatchFunction" / "batch_manifest.py").exists()
    assert (tmp_path / "build" / "AckBatchFunction" / "batch_ack.py").exists()


def test_checkov_has_no_failed_checks() -> None:
    needs(CHECKOV)
    run = subprocess.run(
        [str(CHECKOV), "-f", "template.yaml", "--framework", "cloudformation", "--skip-download", "--compact",
         "--quiet", "--output", "json"],
        cwd=ROOT, capture_output=True, text=True, env=OFFLINE, check=False,
    )  # fmt: skip
    report = json.loads(run.stdout)
    assert report["summary"]["failed"] == 0, [c["check_id"] for c in report["results"]["failed_checks"]]
    assert report["summary"]["passed"] > 40


def test_every_checkov_suppression_is_justified() -> None:
    for name, resource in template()["Resources"].items():
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert len(skip.get("comment", "")) > 20, f"{name} {skip['id']} has no reason"


@pytest.mark.parametrize("function", ["dequeue_batch", "ack_batch"])
def test_function_code_is_strictly_typed(function: str) -> None:
    # Each function directory is its own import root (as in Lambda), so mypy checks them one at a time.
    run = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "mypy"), "--strict", "--python-version", "3.11", "--no-incremental", "."],
        cwd=ROOT / "functions" / function, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
