"""What the stack must be, read from template.yaml: issue 14's deploy-breakers and their siblings."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from conftest import DEFINITION, ROOT
from moto.events.models import EventPattern
from test_static import template

from cdclake.config import readable_tables
from cdclake.errors import ConfigError
from cdclake.gold.refresh import gold_database
from cdclake.identifiers import IDENTIFIER
from cdclake.mart_sql import referenced_tables
from cdclake.shells.glue_job import job_config, parse_arguments

RESOURCES = template()["Resources"]
PARAMETERS = template()["Parameters"]
EXAMPLE_CONFIG = ROOT / "glue" / "cdclake" / "examples" / "hosts.yaml"


def test_no_arn_is_spelled_for_one_partition() -> None:
    for path in (ROOT / "template.yaml", DEFINITION):
        assert "arn:aws:" not in path.read_text(), path


def test_every_glue_job_runs_glue_5_1() -> None:
    jobs = [r for r in RESOURCES.values() if r["Type"] == "AWS::Glue::Job"]
    assert [job["Properties"]["GlueVersion"] for job in jobs] == ["5.1"] * 4


def test_no_reserved_concurrency_and_no_streaming_worker_type() -> None:
    assert "ReservedConcurrentExecutions" not in (ROOT / "template.yaml").read_text()
    for name in ("FullLoadWorkerType", "CdcWorkerType", "MaintenanceWorkerType", "GoldWorkerType"):
        assert "G.025X" not in PARAMETERS[name]["AllowedValues"], name


@pytest.mark.parametrize(
    "resource", ["SilverBucket", "BronzeBucket", "GlueDatabase", "GoldDatabase", "ArtifactsBucket", "AccessLogBucket"]
)
def test_deleting_or_replacing_the_stack_keeps_the_lake_and_never_fails_on_a_versioned_bucket(resource: str) -> None:
    assert RESOURCES[resource]["DeletionPolicy"] == "Retain"
    assert RESOURCES[resource]["UpdateReplacePolicy"] == "Retain"


def test_every_versioned_bucket_is_retained() -> None:
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::S3::Bucket" and "VersioningConfiguration" in resource["Properties"]:
            assert resource.get("DeletionPolicy") == "Retain", name


# ---------------------------------------------------------------------------------- database and IAM


@pytest.mark.parametrize("name", ["dev", "prod", "eu_prod", "a", "dev2", "abcdefghijkl"])
def test_an_accepted_environment_name_makes_a_database_name_the_config_accepts(name: str) -> None:
    assert re.fullmatch(PARAMETERS["EnvironmentName"]["AllowedPattern"], name)
    assert IDENTIFIER.match(f"cdclake_{name}")


@pytest.mark.parametrize("name", ["dev-2", "Prod", "", "abcdefghijklm", "_x", "2dev", "de v"])
def test_names_the_database_rule_or_resource_names_reject_are_refused(name: str) -> None:
    assert not re.fullmatch(PARAMETERS["EnvironmentName"]["AllowedPattern"], name)


def test_the_jobs_are_given_the_database_iam_allows() -> None:
    assert RESOURCES["GlueDatabase"]["Properties"]["DatabaseInput"]["Name"] == {"Sub": "cdclake_${EnvironmentName}"}
    for job in ("FullLoadJob", "CdcJob", "MaintenanceJob", "GoldJob"):
        assert RESOURCES[job]["Properties"]["DefaultArguments"]["--database"] == {"Ref": "GlueDatabase"}, job
    statements = RESOURCES["GlueJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    [catalog] = [s for s in statements if isinstance(s, dict) and s.get("Sid") == "IcebergCatalog"]
    resources = json.dumps(catalog["Resource"])
    assert "database/cdclake_${EnvironmentName}" in resources and "table/cdclake_${EnvironmentName}/*" in resources


def test_the_gold_job_writes_to_the_gold_database_iam_allows() -> None:
    # GIVEN the stack's gold database: cdclake_<env>_gold, a valid identifier for every accepted environment name
    assert RESOURCES["GoldDatabase"]["Properties"]["DatabaseInput"]["Name"] == {
        "Sub": "cdclake_${EnvironmentName}_gold"
    }
    assert IDENTIFIER.match("cdclake_abcdefghijkl_gold")
    # THEN the gold job is given it (and only the gold job writes marts)
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::Glue::Job":
            arguments = resource["Properties"]["DefaultArguments"]
            assert arguments.get("--gold_database") == ({"Ref": "GoldDatabase"} if name == "GoldJob" else None), name
    # AND the Glue role may create and update its tables, like the silver ones
    statements = RESOURCES["GlueJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    [catalog] = [s for s in statements if isinstance(s, dict) and s.get("Sid") == "IcebergCatalog"]
    resources = json.dumps(catalog["Resource"])
    assert "database/cdclake_${EnvironmentName}_gold" in resources
    assert "table/cdclake_${EnvironmentName}_gold/*" in resources
    assert {"glue:CreateTable", "glue:UpdateTable"} <= set(catalog["Action"])


def test_the_gold_database_argument_replaces_the_configurations_gold_database() -> None:
    common = ["job.py", "--config", str(EXAMPLE_CONFIG), "--bronze", "/tmp/b", "--warehouse", "/tmp/w"]
    assert gold_database(job_config(parse_arguments(common))) == "airbnb_gold"  # <silver.database>_gold
    # without --gold_database the default follows --database, to the stack's gold database name as well
    assert gold_database(job_config(parse_arguments([*common, "--database", "cdclake_prod"]))) == "cdclake_prod_gold"
    stack = [*common, "--database", "cdclake_prod", "--gold_database", "bi_marts"]
    config = job_config(parse_arguments(stack))
    assert (config.database, gold_database(config)) == ("cdclake_prod", "bi_marts")
    # AND the marts read the silver tables of the stack's database, whatever the configuration calls it
    [mart] = config.gold.marts
    assert mart.name == "hosts_by_city" and "FROM cdclake_prod.hosts_silver" in mart.sql
    assert referenced_tables(mart.sql, readable_tables("cdclake_prod", config.tables)) == ["cdclake_prod.hosts_silver"]
    assert "airbnb." not in mart.sql
    with pytest.raises(ConfigError, match="--gold_database must differ from the silver database"):
        job_config(parse_arguments([*common, "--database", "cdclake_prod", "--gold_database", "cdclake_prod"]))


def test_every_glue_job_runs_an_entry_point_that_exists() -> None:
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::Glue::Job":
            location = resource["Properties"]["Command"]["ScriptLocation"]["Sub"]
            assert location.startswith("s3://${ArtifactsBucket}/glue/"), name
            assert (ROOT / "glue" / "jobs" / location.rsplit("/", 1)[1]).is_file(), name


def test_the_database_argument_replaces_the_configurations_database() -> None:
    common = ["job.py", "--config", str(EXAMPLE_CONFIG), "--bronze", "/tmp/b", "--warehouse", "/tmp/w"]
    assert job_config(parse_arguments(common)).database == "airbnb"  # the example configuration's own
    assert job_config(parse_arguments([*common, "--database", "cdclake_prod"])).database == "cdclake_prod"


def test_no_kms_grant_on_keys_the_buckets_do_not_use() -> None:
    # The buckets use the AWS managed aws/s3 key, whose key policy already admits the account's principals
    # through S3; the Glue role's only KMS grant is the stack's own key (logs and bookmarks).
    statements = RESOURCES["GlueJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    kms = [s for s in statements if "Action" in s and any(str(a).startswith("kms:") for a in s["Action"])]
    assert [s["Resource"] for s in kms] == [{"GetAtt": "QueueKey.Arn"}]


def test_service_principals_in_the_key_policy_are_bound_to_this_account_or_log_group() -> None:
    for statement in RESOURCES["QueueKey"]["Properties"]["KeyPolicy"]["Statement"]:
        if "Service" in statement["Principal"]:
            condition = json.dumps(statement["Condition"])
            assert "aws:SourceAccount" in condition or "kms:EncryptionContext:aws:logs:arn" in condition


def test_lake_formation_grants_are_optional_and_for_the_glue_role() -> None:
    granted = {n: r for n, r in RESOURCES.items() if r["Type"] == "AWS::LakeFormation::Permissions"}
    assert set(granted) == {
        "LakeFormationDatabasePermissions", "LakeFormationTablePermissions",
        "LakeFormationGoldDatabasePermissions", "LakeFormationGoldTablePermissions",
    }  # fmt: skip
    for resource in granted.values():
        assert resource["Condition"] == "UseLakeFormation"
        principal = resource["Properties"]["DataLakePrincipal"]["DataLakePrincipalIdentifier"]
        assert principal == {"GetAtt": "GlueJobRole.Arn"}
    assert PARAMETERS["GrantLakeFormationPermissions"]["Default"] == "false"


# ---------------------------------------------------------------------------------------- source side


def test_without_a_source_connection_the_jobs_run_outside_any_vpc() -> None:
    assert PARAMETERS["SourceConnectionName"]["Default"] == ""
    assert template()["Conditions"]["HasSourceConnection"] == {
        "Not": [{"Equals": [{"Ref": "SourceConnectionName"}, ""]}]
    }
    for job in ("FullLoadJob", "CdcJob"):
        connections = RESOURCES[job]["Properties"]["Connections"]
        assert connections["If"][0] == "HasSourceConnection" and connections["If"][2] == {"Ref": "AWS::NoValue"}
    assert "Connections" not in RESOURCES["MaintenanceJob"]["Properties"]
    assert "Connections" not in RESOURCES["GoldJob"]["Properties"]


def test_the_optional_dms_endpoint_writes_what_cdclake_reads_to_bronze() -> None:
    endpoint = RESOURCES["DmsTargetEndpoint"]
    assert (
        endpoint["Condition"] == "CreateDmsEndpoint" and RESOURCES["DmsTargetRole"]["Condition"] == "CreateDmsEndpoint"
    )
    settings = endpoint["Properties"]["S3Settings"]
    assert settings["BucketName"] == {"Ref": "BronzeBucket"}
    assert settings["BucketFolder"] == {"Ref": "BronzePrefix"}
    assert (settings["DataFormat"], settings["AddColumnName"], settings["IncludeOpForFullLoad"]) == ("csv", True, False)
    assert settings["TimestampColumnName"] == {"Ref": "DmsTimestampColumnName"}
    assert settings["CdcMaxBatchInterval"] == {"Ref": "DmsCdcMaxBatchIntervalSeconds"}
    assert settings["CdcMinFileSize"] == {"Ref": "DmsCdcMinFileSizeKb"}
    [write] = [s for s in RESOURCES["DmsTargetRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
               if s["Sid"] == "WriteBronze"]  # fmt: skip
    assert write["Resource"] == {"Sub": "${BronzeBucket.Arn}/${BronzePrefix}/*"}


# -------------------------------------------------------------------------------- new files -> queue


def rule_pattern() -> EventPattern:
    """The rule's event pattern as EventBridge would see it (bucket "bronze", BronzePrefix "dms")."""
    pattern: dict[str, Any] = json.loads(json.dumps(RESOURCES["NewFileRule"]["Properties"]["EventPattern"]))
    pattern["detail"]["bucket"]["name"] = ["bronze"]
    [key_filter] = pattern["detail"]["object"]["key"]
    key_filter["wildcard"] = key_filter["wildcard"]["Sub"].replace("${BronzePrefix}", "dms")
    return EventPattern.load(json.dumps(pattern))


def s3_event(key: str, bucket: str = "bronze") -> dict[str, Any]:
    return {
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": bucket}, "object": {"key": key}},
    }


@pytest.mark.parametrize(
    ("key", "queued"),
    [
        ("dms/sales/orders/20240301-120000000.csv", True),
        ("dms/sales/orders/20240301-120000000.csv.gz", True),
        ("dms/sales/orders/20240301-120000000.parquet", True),
        ("dms/changes/20240301-120000000.csv", True),  # CdcPath (PreserveTransactions)
        ("dms/sales/orders/LOAD00000001.csv", False),  # the full-load job's file
        ("other/sales/orders/20240301-120000000.csv", False),
    ],
)
def test_only_cdc_files_under_the_prefix_are_queued(key: str, queued: bool) -> None:
    assert rule_pattern().matches_event(s3_event(key)) is queued


def test_undeliverable_new_file_events_are_retried_a_day_then_kept() -> None:
    [target] = RESOURCES["NewFileRule"]["Properties"]["Targets"]
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
    assert target["DeadLetterConfig"] == {"Arn": {"GetAtt": "NewFileEventDeadLetterQueue.Arn"}}
    dlq = RESOURCES["NewFileEventDeadLetterQueue"]["Properties"]
    assert "FifoQueue" not in dlq  # EventBridge accepts only standard queues as dead-letter queues
    policy = RESOURCES["NewFileEventDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"][0]
    assert policy["Condition"] == {"ArnEquals": {"aws:SourceArn": {"GetAtt": "NewFileRule.Arn"}}}
    alarm = RESOURCES["NewFileEventDeadLetterAlarm"]["Properties"]
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"GetAtt": "NewFileEventDeadLetterQueue.QueueName"}}]


def test_byte_budget_releases_can_never_dead_letter_a_file() -> None:
    # A message handed back for the byte budget is received at most MaxFilesPerBatch times before it is applied
    # (every batch takes at least the head of the group); failures need receives of their own on top.
    redrive = RESOURCES["FileQueue"]["Properties"]["RedrivePolicy"]
    assert redrive["maxReceiveCount"] >= PARAMETERS["MaxFilesPerBatch"]["MaxValue"] + 3


# ------------------------------------------------------------------------------------------ functions


def test_function_metrics_use_the_stack_namespace_and_no_reserved_concurrency() -> None:
    variables = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == {"Ref": "MetricsNamespace"}
    dequeue = RESOURCES["DequeueBatchFunction"]["Properties"]["Environment"]["Variables"]
    assert dequeue["RECEIVE_WAIT_SECONDS"] == {"Ref": "ReceiveWaitSeconds"}
    assert PARAMETERS["ReceiveWaitSeconds"]["MinValue"] >= 1 and PARAMETERS["ReceiveWaitSeconds"]["MaxValue"] <= 20


def test_the_state_machine_may_release_a_failed_batch() -> None:
    statements = RESOURCES["PipelineStateMachine"]["Properties"]["Policies"][-1]["Statement"]
    [queue] = [s for s in statements if "sqs:ChangeMessageVisibility" in s["Action"]]
    assert queue["Resource"] == {"GetAtt": "FileQueue.Arn"}


def test_history_budget_stays_below_the_step_functions_limit() -> None:
    assert PARAMETERS["MaxHistoryEvents"]["MaxValue"] <= 25_000 - 2_000
