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
    """Reads CloudFormation short-form tags as one-key mappings: ``!Sub text`` -> ``{"Sub": "text"}``."""


def _short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        return {suffix: loader.construct_scalar(node)}
    if isinstance(node, yaml.SequenceNode):
        return {suffix: loader.construct_sequence(node, deep=True)}
    assert isinstance(node, yaml.MappingNode)
    return {suffix: loader.construct_mapping(node, deep=True)}


_CfnLoader.add_multi_constructor("!", _short_form)


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
    assert (tmp_path / "build" / "WorkCheckFunction" / "work.py").exists()


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


@pytest.mark.parametrize("function", ["work_check", "deploy_guard"])
def test_function_code_is_strictly_typed(function: str) -> None:
    # Each function directory is its own import root (as in Lambda), so mypy checks them one at a time.
    run = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "mypy"), "--strict", "--python-version", "3.11", "--no-incremental", "."],
        cwd=ROOT / "functions" / function, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


# ------------------------------------------------------------------------------------------ observability
TABLE_METRICS = ["RowsInserted", "RowsUpdated", "RowsDeleted", "RowsIgnoredLate", "RowsQuarantined",
                 "FilesQuarantined", "FilesApplied", "BytesApplied", "BatchSeconds", "FreshnessLagSeconds"]  # fmt: skip


def test_table_metrics_jobs_name_their_environment_and_namespace_and_may_publish_only_there() -> None:
    resources = template()["Resources"]
    for job in ("CdcJob", "FullLoadJob"):
        arguments = resources[job]["Properties"]["DefaultArguments"]
        assert arguments["--environment"] == {"Ref": "EnvironmentName"}, job
        assert arguments["--metrics_namespace"] == {"Ref": "MetricsNamespace"}, job
    [statement] = [
        s
        for s in resources["GlueJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        if "cloudwatch:PutMetricData" in s.get("Action", [])  # conditional (!If) statements have no Action
    ]
    assert statement["Condition"] == {"StringEquals": {"cloudwatch:namespace": ["Glue", {"Ref": "MetricsNamespace"}]}}
    # the CDC job's own role carries the same policy (a YAML alias of it), so the same statement
    assert resources["CdcJob"]["Properties"]["Role"] == {"GetAtt": "CdcJobRole.Arn"}
    assert resources["CdcJobRole"]["Properties"]["Policies"][0] == resources["GlueJobRole"]["Properties"]["Policies"][0]


def test_dashboard_is_valid_json_showing_every_table_metric_the_queues_and_the_executions() -> None:
    body = template()["Resources"]["PipelineDashboard"]["Properties"]["DashboardBody"]["Sub"]
    # What CloudFormation's !Sub would do, with stand-in values.
    rendered = re.sub(r"\$\{[A-Za-z0-9:.]+\}", "x", body)
    widgets = json.loads(rendered)["widgets"]
    expressions = [m["expression"] for w in widgets for row in w["properties"].get("metrics", []) for m in row
                   if isinstance(m, dict) and "expression" in m]  # fmt: skip
    for metric in TABLE_METRICS:
        [expression] = [e for e in expressions if f'MetricName="{metric}"' in e]
        assert expression.startswith("SEARCH('{x,Environment,Table} ") and 'Environment="x"' in expression
    plain = {row[1] for w in widgets for row in w["properties"].get("metrics", []) if isinstance(row[0], str)}
    assert {"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", "ExecutionsFailed"} <= plain
    assert "${FileDeadLetterQueue.QueueName}" in body and "${PipelineStateMachine}" in body
    for widget in widgets:  # the grid is 24 wide; overlapping widgets are silently moved by CloudWatch
        assert widget["x"] + widget["width"] <= 24


@pytest.mark.parametrize(
    ("alarm", "metric"),
    [("FreshnessLagAlarm", "MAX(FreshnessLagSeconds)"), ("RowsQuarantinedAlarm", "SUM(RowsQuarantined)"),
     ("FilesQuarantinedAlarm", "SUM(FilesQuarantined)")],
)  # fmt: skip
def test_table_metric_alarms_cover_every_table_of_this_environment_and_alert(alarm: str, metric: str) -> None:
    properties = template()["Resources"][alarm]["Properties"]
    [query] = properties["Metrics"]
    assert query["Expression"]["Sub"] == (
        f'SELECT {metric} FROM SCHEMA("${{MetricsNamespace}}", Environment, "Table") '
        "WHERE Environment = '${EnvironmentName}'"
    )
    assert properties["AlarmActions"] == [{"Ref": "AlertTopic"}]
    assert properties["TreatMissingData"] == "notBreaching"  # an idle source publishes nothing


def test_every_glue_job_failure_alerts_and_the_state_machine_may_run_every_job() -> None:
    resources = template()["Resources"]
    jobs = [name for name, r in resources.items() if r["Type"] == "AWS::Glue::Job"]
    assert sorted(jobs) == ["CdcJob", "FullLoadJob", "GoldJob", "MaintenanceJob"]
    rule = resources["GlueJobFailedRule"]["Properties"]["EventPattern"]["detail"]["jobName"]
    assert rule == [{"Ref": job} for job in ("FullLoadJob", "CdcJob", "MaintenanceJob", "GoldJob")]
    statements = resources["PipelineStateMachine"]["Properties"]["Policies"][-1]["Statement"]
    [run_jobs] = [s for s in statements if s["Sid"] == "RunGlueJobs"]
    assert len(run_jobs["Resource"]) == 4 and all(f"${{{job}}}" in str(run_jobs["Resource"]) for job in jobs)
