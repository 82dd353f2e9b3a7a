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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFINITION, ROOT

from cdclake.ops import metric_catalog
from file_modules import module_at

TOOLS = ROOT / ".venv" / "tools"
SAM = TOOLS / "sam" / "bin" / "sam"
CHECKOV = TOOLS / "checkov" / "bin" / "checkov"
OFFLINE = {**os.environ, "SAM_CLI_TELEMETRY": "0", "BC_SKIP_MAPPING": "TRUE", "AWS_DEFAULT_REGION": "us-east-1"}


_COST_MODEL = module_at(ROOT / "scripts" / "cost_model.py", "cost_model")


def template() -> dict[str, Any]:
    """template.yaml, CloudFormation's short-form tags read as one-key mappings (``!Sub text`` ->
    ``{"Sub": "text"}``): scripts/cost_model.py's reader, the one the cost figures come from."""
    loaded: dict[str, Any] = _COST_MODEL.load_template(ROOT / "template.yaml")
    return loaded


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


@pytest.mark.stack
def test_statelint_is_clean() -> None:
    statelint = shutil.which("statelint", path=str(ROOT / ".venv" / "bin"))
    assert statelint, "statelint is a dev dependency (pyproject.toml)"
    run = subprocess.run([statelint, str(DEFINITION)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.stack
def test_sam_validate_lint_is_clean() -> None:
    needs(SAM)
    run = subprocess.run(
        [str(SAM), "validate", "--lint", "--region", "us-east-1"],
        cwd=ROOT, capture_output=True, text=True, env=OFFLINE, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "is a valid SAM Template" in run.stdout + run.stderr


@pytest.mark.stack
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
# The declared metrics (ops/metric_catalog.py; tests/unit/test_metric_catalog.py checks each widget's lines).
PIPELINE_METRICS = [m.name for m in metric_catalog.PIPELINE_METRICS]
VERIFY_METRICS = [m.name for m in metric_catalog.VERIFY_METRICS]


def test_the_jobs_name_their_environment_and_namespace_and_may_publish_only_there() -> None:
    resources = template()["Resources"]
    for job in ("CdcJob", "FullLoadJob"):
        arguments = resources[job]["Properties"]["DefaultArguments"]
        assert arguments["--environment"] == {"Ref": "EnvironmentName"}, job
        assert arguments["--metrics_namespace"] == {"Ref": "MetricsNamespace"}, job
        # per-table CloudWatch metrics only for the tables the deployment names (none by default)
        assert arguments["--table_metrics"] == {
            "If": ["HasTableMetrics", {"Ref": "TableMetrics"}, {"Ref": "AWS::NoValue"}]
        }
    assert template()["Parameters"]["TableMetrics"]["Default"] == ""
    # each of the two jobs that publish has its own role with the same namespace-bound statement (a YAML alias)
    for job, role in (("CdcJob", "CdcJobRole"), ("FullLoadJob", "FullLoadJobRole")):
        assert resources[job]["Properties"]["Role"] == {"GetAtt": f"{role}.Arn"}
        [statement] = [
            s
            for s in resources[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
            if "cloudwatch:PutMetricData" in s.get("Action", [])  # conditional (!If) statements have no Action
        ]
        namespaces = ["Glue", {"Ref": "MetricsNamespace"}]
        assert statement["Condition"] == {"StringEquals": {"cloudwatch:namespace": namespaces}}, role


def dashboard() -> tuple[str, list[dict[str, Any]]]:
    """The dashboard body and its widgets, rendered as CloudFormation's !Sub would with stand-in values."""
    body, variables = template()["Resources"]["PipelineDashboard"]["Properties"]["DashboardBody"]["Sub"]
    assert set(variables) == {"SecurityConfiguration", "CdcRole", "FullLoadRole"}
    rendered = re.sub(r"\$\{[A-Za-z0-9:.]+\}", "x", body)
    return body, json.loads(rendered)["widgets"]


def test_the_dashboard_shows_every_pipeline_metric_of_this_environment_and_no_per_table_search() -> None:
    body, widgets = dashboard()
    assert "SEARCH(" not in body and "SCHEMA(" not in body
    rows = [row for w in widgets for row in w["properties"].get("metrics", [])]
    ours = {row[1]: row for row in rows if row[0] == "x"}  # the namespace, rendered
    assert sorted(ours) == sorted(PIPELINE_METRICS + VERIFY_METRICS)
    assert all(row[2:4] == ["Environment", "x"] for row in ours.values())
    assert body.count('["${MetricsNamespace}", ') == len(PIPELINE_METRICS) + len(VERIFY_METRICS)
    plain = {row[1] for row in rows if isinstance(row[0], str)}
    assert {"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", "ExecutionsFailed"} <= plain
    assert "${FileDeadLetterQueue.QueueName}" in body and "${PipelineStateMachine}" in body
    for widget in widgets:  # the grid is 24 wide; overlapping widgets are silently moved by CloudWatch
        assert widget["x"] + widget["width"] <= 24
    cells = [(w["x"] + dx, w["y"] + dy) for w in widgets for dx in range(w["width"]) for dy in range(w["height"])]
    assert len(cells) == len(set(cells)), "overlapping widgets"


def test_the_dashboard_queries_the_per_table_log_lines_of_both_jobs_in_both_log_groups() -> None:
    body, widgets = dashboard()
    [log] = [w for w in widgets if w["type"] == "log"]
    query = log["properties"]["query"]
    assert 'filter cdclake = "table_batch"' in query and query.split("|")[-2].strip().endswith("by table")
    # the Glue log groups of a job with a security configuration: /aws-glue/jobs/<configuration>-role/<role>/<stream>,
    # stdout in /output and stderr in /error (Glue guide, "Continuous logging"): the table lines' logging handler
    # decides which, so both are read, for the two jobs that write table lines (their roles' names)
    sources = re.findall(r"SOURCE '([^']+)'", body)
    assert sources == [
        f"/aws-glue/jobs/${{SecurityConfiguration}}-role/${{{role}}}/{stream}"
        for role in ("CdcRole", "FullLoadRole")
        for stream in ("output", "error")
    ]
    variables = template()["Resources"]["PipelineDashboard"]["Properties"]["DashboardBody"]["Sub"][1]
    assert (variables["CdcRole"], variables["FullLoadRole"]) == ({"Ref": "CdcJobRole"}, {"Ref": "FullLoadJobRole"})
    # every field it reads is one the jobs write (glue/cdclake/ops/metrics.py)
    from cdclake.ops.metrics import TABLE_BATCH, _batch_record
    from cdclake.report import TableReport

    assert TABLE_BATCH == "table_batch"
    fields = set(re.findall(r"\((\w+)\)", query))
    record = _batch_record(TableReport(table="s.t", kind="cdc"), "dev", datetime.now(UTC))
    assert fields <= set(record), fields - set(record)


@pytest.mark.parametrize(
    ("alarm", "metric", "statistic"),
    [("FreshnessLagAlarm", "FreshnessLagSeconds", "Maximum"), ("FilesQuarantinedAlarm", "FilesQuarantined", "Sum"),
     ("TablesFailedAlarm", "TablesFailed", "Sum")],
)  # fmt: skip
def test_pipeline_metric_alarms_watch_this_environment_and_alert(alarm: str, metric: str, statistic: str) -> None:
    properties = template()["Resources"][alarm]["Properties"]
    assert properties["Namespace"] == {"Ref": "MetricsNamespace"}
    assert (properties["MetricName"], properties["Statistic"]) == (metric, statistic)
    assert properties["Dimensions"] == [{"Name": "Environment", "Value": {"Ref": "EnvironmentName"}}]
    assert properties["AlarmActions"] == [{"Ref": "AlertTopic"}]
    assert properties["TreatMissingData"] == "notBreaching"  # an idle source publishes nothing


def test_no_alarm_or_widget_needs_a_per_table_metric() -> None:
    text = (ROOT / "template.yaml").read_text()
    assert "SCHEMA(" not in text and "SEARCH(" not in text and "RowsQuarantinedAlarm" not in text


def test_every_glue_job_failure_alerts_and_the_state_machine_may_run_every_job() -> None:
    resources = template()["Resources"]
    jobs = [name for name, r in resources.items() if r["Type"] == "AWS::Glue::Job"]
    assert sorted(jobs) == ["CdcJob", "FullLoadJob", "GoldJob", "MaintenanceJob", "VerifyJob"]
    rule = resources["GlueJobFailedRule"]["Properties"]["EventPattern"]["detail"]["jobName"]
    assert rule == [{"Ref": job} for job in ("FullLoadJob", "CdcJob", "MaintenanceJob", "GoldJob", "VerifyJob")]
    statements = resources["PipelineStateMachine"]["Properties"]["Policies"][-1]["Statement"]
    [run_jobs] = [s for s in statements if s["Sid"] == "RunGlueJobs"]
    assert len(run_jobs["Resource"]) == 5 and all(f"${{{job}}}" in str(run_jobs["Resource"]) for job in jobs)
