"""ops/metric_catalog: each metric and alarm declared once; template.yaml's alarms and dashboard, the runbook's
alarm table and every writer (the Glue jobs' modules, the work check Lambda) agree with the declarations."""

from __future__ import annotations

import ast
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cdclake.ops import metric_catalog as catalog
from cdclake.ops.metric_catalog import ALARMS, METRICS, OURS, PIPELINE_METRICS, VERIFY_METRICS, Alarm, alarm_table
from cdclake.ops.metrics import MetricsTarget, metric_data
from cdclake.report import Backlog, RunReport, TableReport
from cdclake.verify.log import VerifySummary, verify_metric_data
from file_modules import module_at

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
COMPARISONS = {">": "GreaterThanThreshold", ">=": "GreaterThanOrEqualToThreshold", "<": "LessThanThreshold"}
TEMPLATE: dict[str, Any] = module_at(ROOT / "scripts" / "cost_model.py", "cost_model").load_template(
    ROOT / "template.yaml"
)
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]


def template_alarms() -> dict[str, dict[str, Any]]:
    return {n: r["Properties"] for n, r in RESOURCES.items() if r["Type"] == "AWS::CloudWatch::Alarm"}


def as_declared(name: str, properties: dict[str, Any]) -> Alarm:
    """The template's alarm read back into a declaration (texts taken from the declaration of that name)."""
    if "Metrics" in properties:  # metric math over several metrics of one namespace
        stats = [q["MetricStat"] for q in properties["Metrics"] if "MetricStat" in q]
        namespaces = {s["Metric"]["Namespace"] for s in stats}
        assert len(namespaces) == 1 and len({s["Stat"] for s in stats}) == 1, name
        namespace, statistic = stats[0]["Metric"]["Namespace"], stats[0]["Stat"]
        metrics = tuple(s["Metric"]["MetricName"] for s in stats)
    else:
        namespace, statistic, metrics = properties["Namespace"], properties["Statistic"], (properties["MetricName"],)
    threshold = properties["Threshold"]
    comparison = {v: k for k, v in COMPARISONS.items()}[properties["ComparisonOperator"]]
    declared = {a.name: a for a in ALARMS}[name]
    return Alarm(
        name,
        OURS if namespace == {"Ref": OURS} else namespace,
        metrics,
        statistic,
        comparison,  # type: ignore[arg-type]
        threshold["Ref"] if isinstance(threshold, dict) else threshold,
        declared.means,
        declared.do,
        properties["TreatMissingData"],
    )


def test_the_templates_alarms_are_the_declared_ones() -> None:
    # GIVEN template.yaml's alarms / WHEN each is read back as a declaration
    alarms = template_alarms()
    # THEN they are exactly ALARMS, in name, namespace, metrics, statistic, threshold and missing data
    assert sorted(alarms) == sorted(a.name for a in ALARMS)
    for alarm in ALARMS:
        assert as_declared(alarm.name, alarms[alarm.name]) == alarm
        assert alarms[alarm.name]["AlarmActions"] == [{"Ref": "AlertTopic"}], alarm.name


def test_an_alarm_on_our_namespace_watches_a_declared_metric_of_every_environment_total() -> None:
    # GIVEN the alarms on the stack's own namespace / THEN each watches a metric written as an Environment total
    totals = {m.name for m in METRICS if m.writer != "table"}
    ours = [a for a in ALARMS if a.namespace == OURS]
    assert ours and all(set(a.metrics) <= totals for a in ours), [a.name for a in ours]
    for alarm in ours:
        assert template_alarms()[alarm.name]["Dimensions"] == [
            {"Name": "Environment", "Value": {"Ref": "EnvironmentName"}}
        ]


def test_a_threshold_named_by_a_parameter_is_a_parameter_of_the_template() -> None:
    named = {a.threshold for a in ALARMS if isinstance(a.threshold, str)}
    assert named and named <= set(TEMPLATE["Parameters"]), named - set(TEMPLATE["Parameters"])


def dashboard_lines() -> list[tuple[str, list[Any]]]:
    """Every metric line of the dashboard with the title of its widget, ``${...}`` rendered as ``x``."""
    body, _ = RESOURCES["PipelineDashboard"]["Properties"]["DashboardBody"]["Sub"]
    widgets = json.loads(re.sub(r"\$\{[A-Za-z0-9:.]+\}", "x", body))["widgets"]
    return [(w["properties"]["title"], row) for w in widgets for row in w["properties"].get("metrics", [])]


def test_the_dashboard_plots_each_declared_metric_in_its_widget_and_no_other_of_ours() -> None:
    # GIVEN the dashboard's lines of the stack's namespace (rendered "x")
    ours = [(row[1], title) for title, row in dashboard_lines() if row[0] == "x"]
    # THEN they are the declared (metric, widget) pairs, once each, each for this environment
    assert sorted(ours) == sorted((m.name, m.widget) for m in METRICS if m.widget)
    assert all(row[2:4] == ["Environment", "x"] for _, row in dashboard_lines() if row[0] == "x")
    body = RESOURCES["PipelineDashboard"]["Properties"]["DashboardBody"]["Sub"][0]
    assert body.count('["${MetricsNamespace}", ') == len(ours)  # no line of ours escaped the parse


def test_the_runbooks_alarm_table_is_made_from_the_declarations() -> None:
    # GIVEN docs/runbook.md / WHEN its generated alarm table is cut out / THEN it is alarm_table() (make docs-tables)
    text = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    table = text.split("<!-- generated: alarms -->\n", 1)[1].split("\n<!-- end generated: alarms -->", 1)[0]
    assert table == alarm_table()
    assert "paused" in {a.name: a.do for a in ALARMS}["FreshnessMissingAlarm"]  # the false alarm and what to do
    assert all(len(a.means) > 30 and len(a.do) > 30 for a in ALARMS)


def test_a_runs_entries_are_the_declared_pipeline_and_table_metrics_with_their_units() -> None:
    # GIVEN a run with a lag, a backlog, a cut and an opted-in table
    batch = TableReport(table="s.t", kind="cdc", files_applied=1, latest_commit_ts="2024-03-01T11:00:00")
    report = RunReport(tables=[batch], cut_commit_ts="2024-03-01T11:30:00")
    entries = metric_data(report, MetricsTarget("ns", "dev", frozenset({"s.t"})), NOW, Backlog(files=2, bytes=3))
    # WHEN they are split by dimensions / THEN each total is a declared pipeline metric, each in its declared unit
    units = {m.name: m.unit for m in METRICS}
    totals = [e["MetricName"] for e in entries if len(e["Dimensions"]) == 1]
    per_table = [e["MetricName"] for e in entries if len(e["Dimensions"]) == 2]
    assert totals == [m.name for m in PIPELINE_METRICS]
    assert sorted(per_table) == sorted(m.name for m in catalog.TABLE_METRICS)
    assert all(e["Unit"] == units[e["MetricName"]] for e in entries)


def test_a_verify_runs_entries_are_the_declared_verify_metrics() -> None:
    summary = VerifySummary(tables_compared=3, tables_differing=1, rows_differing=2, tables_skipped=0, tables_lagging=0)
    entries = verify_metric_data(summary, "dev", NOW)
    assert [e["MetricName"] for e in entries] == [m.name for m in VERIFY_METRICS]


def emitted_by_functions() -> dict[str, set[str]]:
    """Each Lambda's ``add_metric(name=...)`` names (functions/*/*.py); a name that is not a literal fails."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "functions").glob("*/*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_metric":
                [name] = [k.value for k in node.keywords if k.arg == "name"]
                assert isinstance(name, ast.Constant), f"{path}: a metric name that is not a literal"
                found.setdefault(path.parent.name, set()).add(name.value)
    return found


def test_the_lambdas_emit_exactly_the_declared_work_check_metrics() -> None:
    # GIVEN the metrics the Lambdas emit (they cannot import cdclake) / THEN they are the declared ones
    assert emitted_by_functions() == {"work_check": {m.name for m in METRICS if m.writer == "work_check"}}


def test_every_metric_and_alarm_is_declared_once() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names)) and len(ALARMS) == len({a.name for a in ALARMS})
