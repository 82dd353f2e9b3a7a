"""What the stack must be, read from template.yaml: the settings that broke a deploy, and their siblings."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from conftest import DEFINITION, ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from moto.events.models import EventPattern
from test_static import template

from cdclake.config import readable_tables
from cdclake.errors import ConfigError
from cdclake.gold.refresh import gold_database
from cdclake.identifiers import IDENTIFIER
from cdclake.mart_sql import referenced_tables
from cdclake.shells.glue_job import JOB_FOLLOW, job_config, parse_arguments

RESOURCES = template()["Resources"]
PARAMETERS = template()["Parameters"]
CONDITIONS = template()["Conditions"]
EXAMPLE_CONFIG = ROOT / "glue" / "cdclake" / "examples" / "hosts.yaml"


def test_no_arn_is_spelled_for_one_partition() -> None:
    for path in (ROOT / "template.yaml", DEFINITION):
        assert "arn:aws:" not in path.read_text(), path


def test_every_glue_job_runs_glue_5_1() -> None:
    jobs = [r for r in RESOURCES.values() if r["Type"] == "AWS::Glue::Job"]
    assert [job["Properties"]["GlueVersion"] for job in jobs] == ["5.1"] * 5


def test_no_job_argument_glue_5_ignores() -> None:
    # Glue 4.0 and later log continuously on their own; --enable-continuous-cloudwatch-log does nothing there,
    # so setting it only suggests a choice that is not one.
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::Glue::Job":
            assert "--enable-continuous-cloudwatch-log" not in resource["Properties"]["DefaultArguments"], name


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


def test_every_bucket_aborts_multipart_uploads_left_incomplete_after_a_week() -> None:
    # A killed job's unfinished multipart upload keeps its parts (billed, never listed) until it is aborted.
    buckets = {name: r["Properties"] for name, r in RESOURCES.items() if r["Type"] == "AWS::S3::Bucket"}
    assert len(buckets) == 4
    for name, properties in buckets.items():
        rules = properties.get("LifecycleConfiguration", {}).get("Rules", [])
        aborts = [r for r in rules if "AbortIncompleteMultipartUpload" in r]
        assert [(r["Status"], r["AbortIncompleteMultipartUpload"]) for r in aborts] == [
            ("Enabled", {"DaysAfterInitiation": 7})
        ], name
        assert all("Prefix" not in r and "Filter" not in r for r in aborts), f"{name}: the whole bucket"


def test_every_versioned_bucket_is_retained() -> None:
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::S3::Bucket" and "VersioningConfiguration" in resource["Properties"]:
            assert resource.get("DeletionPolicy") == "Retain", name


# ---------------------------------------------------------------------------------- database and IAM


@pytest.mark.parametrize("name", ["dev", "prod", "eu_prod", "a", "dev2", "abcdefghijkl"])
def test_an_accepted_environment_name_makes_a_database_name_the_config_accepts(name: str) -> None:
    assert accepted_environment(name)
    assert IDENTIFIER.match(f"cdclake_{name}")


@pytest.mark.parametrize("name", ["dev-2", "Prod", "", "abcdefghijklm", "_x", "2dev", "de v"])
def test_names_the_database_rule_or_resource_names_reject_are_refused(name: str) -> None:
    assert not accepted_environment(name)


JOB_ROLES = ("FullLoadJobRole", "CdcJobRole", "MaintenanceJobRole", "GoldJobRole")


def statements_of(role: str) -> list[dict[str, Any]]:
    """Every statement of a role's policies (an optional !If statement as present)."""
    found = []
    for policy in RESOURCES[role]["Properties"]["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            found.append(statement["If"][1] if "If" in statement else statement)
    return found


def catalog_statement(role: str) -> dict[str, Any]:
    [catalog] = [s for s in statements_of(role) if s.get("Sid") == "IcebergCatalog"]
    return catalog


def test_the_jobs_are_given_the_database_iam_allows() -> None:
    assert RESOURCES["GlueDatabase"]["Properties"]["DatabaseInput"]["Name"] == {"Sub": "cdclake_${EnvironmentName}"}
    for job in ("FullLoadJob", "CdcJob", "MaintenanceJob", "GoldJob"):
        assert RESOURCES[job]["Properties"]["DefaultArguments"]["--database"] == {
            "If": ["CreateSilverDatabase", {"Ref": "GlueDatabase"}, {"Sub": "cdclake_${EnvironmentName}"}]
        }, job
    for role in JOB_ROLES:
        resources = json.dumps(catalog_statement(role)["Resource"])
        assert "database/cdclake_${EnvironmentName}" in resources, role
        assert "table/cdclake_${EnvironmentName}/*" in resources, role


def test_the_gold_job_writes_to_the_gold_database_iam_allows() -> None:
    # GIVEN the stack's gold database: cdclake_<env>_gold, a valid identifier for every accepted environment name
    assert RESOURCES["GoldDatabase"]["Properties"]["DatabaseInput"]["Name"] == {
        "Sub": "cdclake_${EnvironmentName}_gold"
    }
    assert IDENTIFIER.match("cdclake_abcdefghijkl_gold")
    # THEN the gold job is given it, and the maintenance job, which maintains the marts where the
    # gold job keeps them whatever the configuration's gold.database says (no other job touches marts)
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::Glue::Job":
            arguments = resource["Properties"]["DefaultArguments"]
            gold = {"If": ["CreateGoldDatabase", {"Ref": "GoldDatabase"}, {"Sub": "cdclake_${EnvironmentName}_gold"}]}
            given = gold if name in ("GoldJob", "MaintenanceJob") else None
            assert arguments.get("--gold_database") == given, name
    # AND their roles may create and update its tables, like the silver ones; the other jobs' roles may not
    for role in JOB_ROLES:
        catalog = catalog_statement(role)
        resources = json.dumps(catalog["Resource"])
        writes_marts = role in ("MaintenanceJobRole", "GoldJobRole")
        assert ("database/cdclake_${EnvironmentName}_gold" in resources) is writes_marts, role
        assert ("table/cdclake_${EnvironmentName}_gold/*" in resources) is writes_marts, role
        assert {"glue:CreateTable", "glue:UpdateTable"} <= set(catalog["Action"])


def test_the_gold_database_argument_replaces_the_configurations_gold_database() -> None:
    common = ["job.py", "--config", str(EXAMPLE_CONFIG), "--bronze", "/tmp/b", "--warehouse", "/tmp/w"]
    assert gold_database(job_config(parse_arguments(common, "gold"))) == "airbnb_gold"  # <silver.database>_gold
    # without --gold_database the default follows --database, to the stack's gold database name as well
    assert (
        gold_database(job_config(parse_arguments([*common, "--database", "cdclake_prod"], "gold")))
        == "cdclake_prod_gold"
    )
    stack = [*common, "--database", "cdclake_prod", "--gold_database", "bi_marts"]
    config = job_config(parse_arguments(stack, "gold"))
    assert (config.database, gold_database(config)) == ("cdclake_prod", "bi_marts")
    # AND the marts read the silver tables of the stack's database, whatever the configuration calls it
    [mart] = config.gold.marts
    assert mart.name == "hosts_by_city" and "FROM cdclake_prod.hosts_silver" in mart.sql
    assert referenced_tables(mart.sql, readable_tables("cdclake_prod", config.tables)) == ["cdclake_prod.hosts_silver"]
    assert "airbnb." not in mart.sql
    with pytest.raises(ConfigError, match="--gold_database must differ from the silver database"):
        job_config(parse_arguments([*common, "--database", "cdclake_prod", "--gold_database", "cdclake_prod"], "gold"))


def test_every_glue_job_runs_an_entry_point_that_exists() -> None:
    for name, resource in RESOURCES.items():
        if resource["Type"] == "AWS::Glue::Job":
            location = resource["Properties"]["Command"]["ScriptLocation"]["Sub"]
            assert location.startswith("s3://${ArtifactsBucket}/glue/"), name
            assert (ROOT / "glue" / "jobs" / location.rsplit("/", 1)[1]).is_file(), name


def test_the_database_argument_replaces_the_configurations_database() -> None:
    common = ["job.py", "--config", str(EXAMPLE_CONFIG), "--bronze", "/tmp/b", "--warehouse", "/tmp/w"]
    assert job_config(parse_arguments(common, "gold")).database == "airbnb"  # the example configuration's own
    assert job_config(parse_arguments([*common, "--database", "cdclake_prod"], "gold")).database == "cdclake_prod"


def test_no_kms_grant_on_keys_the_buckets_do_not_use() -> None:
    # The buckets use the AWS managed aws/s3 key, whose key policy already admits the account's principals
    # through S3; a Glue role's KMS grants are the stack's own key (logs and bookmarks; the CDC job's queue) and,
    # for the CDC job only, the alert topic's key (it publishes alerts).
    for role in JOB_ROLES:
        kms = [s for s in statements_of(role) if any(str(a).startswith("kms:") for a in s["Action"])]
        keys = [s["Resource"] for s in kms]
        alert_key = [{"GetAtt": "AlertKey.Arn"}] if role == "CdcJobRole" else []
        assert [k for k in keys if k != {"GetAtt": "QueueKey.Arn"}] == alert_key, role


# ----------------------------------------------------------------------------- keys EventBridge can use
KEYS = [name for name, r in RESOURCES.items() if r["Type"] == "AWS::KMS::Key"]
# The SNS developer guide ("Key management"): in a KMS key policy these condition keys are not supported for
# EventBridge deliveries to an encrypted topic (the deliveries fail). The EventBridge user guide's key policy
# for encrypted SQS targets has no condition either.
UNSUPPORTED_FOR_EVENTBRIDGE = {"aws:sourceaccount", "aws:sourcearn", "aws:sourceorgid"}


def service_statements(key: str) -> list[tuple[list[str], dict[str, Any]]]:
    """(service principals, statement) of each statement of ``key``'s policy that names a service."""
    found = []
    for statement in RESOURCES[key]["Properties"]["KeyPolicy"]["Statement"]:
        services = statement["Principal"].get("Service") if isinstance(statement["Principal"], dict) else None
        if services is not None:
            found.append((services if isinstance(services, list) else [services], statement))
    return found


def condition_keys(statement: dict[str, Any]) -> set[str]:
    return {key.lower() for test in statement.get("Condition", {}).values() for key in test}


@pytest.mark.parametrize("key", KEYS)
def test_no_key_grants_eventbridge_under_a_condition_aws_documents_as_unsupported(key: str) -> None:
    for services, statement in service_statements(key):
        if "events.amazonaws.com" in services:
            assert services == ["events.amazonaws.com"], f"{key} {statement['Sid']}: one statement per service"
            assert not condition_keys(statement) & UNSUPPORTED_FOR_EVENTBRIDGE, f"{key} {statement['Sid']}"
            assert set(statement["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey"}


def test_the_unsupported_condition_check_fails_on_the_policy_the_template_once_had() -> None:
    # GIVEN the statement the template had: EventBridge and CloudWatch together, under aws:SourceAccount
    before = {"Principal": {"Service": ["events.amazonaws.com", "cloudwatch.amazonaws.com"]},
              "Condition": {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}}  # fmt: skip
    # THEN the check above refuses it
    assert condition_keys(before) & UNSUPPORTED_FOR_EVENTBRIDGE == {"aws:sourceaccount"}


def test_every_service_principal_in_a_key_policy_is_bound_where_aws_supports_a_binding() -> None:
    for key in KEYS:
        for services, statement in service_statements(key):
            [service] = services
            conditions = condition_keys(statement)
            if service == "events.amazonaws.com":
                continue  # bound by the queue and topic policies instead (checked above and below)
            if service == {"Sub": "logs.${AWS::Region}.amazonaws.com"}:
                assert conditions == {"kms:encryptioncontext:aws:logs:arn"}, key
            else:
                assert conditions == {"aws:sourceaccount"}, f"{key}: {service}"


def test_every_encrypted_eventbridge_target_admits_only_its_rule() -> None:
    # With no condition in the key policy, the target's own policy is what keeps other senders out.
    rules = [name for name, r in RESOURCES.items() if r["Type"] == "AWS::Events::Rule"]
    assert sorted(rules) == ["GlueJobFailedRule", "NewFileRule", "ReplicationTaskStoppedRule"]
    for rule in rules:
        for target in RESOURCES[rule]["Properties"]["Targets"]:
            [(function, value)] = target["Arn"].items()
            logical = value.split(".")[0] if function == "GetAtt" else value
            assert RESOURCES[logical]["Properties"].get("KmsMasterKeyId"), f"{rule} -> {logical} is encrypted"
            [policy] = [
                r["Properties"]
                for r in RESOURCES.values()
                if r["Type"] in ("AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy")
                and {"Ref": logical} in r["Properties"].get("Queues", r["Properties"].get("Topics", []))
            ]
            grants = [s for s in policy["PolicyDocument"]["Statement"]
                      if s["Principal"] == {"Service": "events.amazonaws.com"}]  # fmt: skip
            # one statement per rule, each bound to its rule's ARN: no other sender (rule or account) may publish
            assert sorted(str(g["Condition"]) for g in grants) == sorted(
                str({"ArnEquals": {"aws:SourceArn": {"GetAtt": f"{r}.Arn"}}})
                for r in rules
                if any(t["Arn"] == target["Arn"] for t in RESOURCES[r]["Properties"]["Targets"])
            ), rule
            assert all(g["Action"] == "sns:Publish" or g["Action"] == "sqs:SendMessage" for g in grants)


def test_every_rule_alarms_on_failed_deliveries_through_a_path_without_its_targets_key() -> None:
    rules = [name for name, r in RESOURCES.items() if r["Type"] == "AWS::Events::Rule"]
    alarms = {name: r["Properties"] for name, r in RESOURCES.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    alert_key = RESOURCES["AlertTopic"]["Properties"]["KmsMasterKeyId"]
    for rule in rules:
        watching = [
            (name, query["MetricStat"]["Metric"]["MetricName"])
            for name, alarm in alarms.items()
            for query in alarm.get("Metrics", [])
            if "MetricStat" in query
            and query["MetricStat"]["Metric"]["Namespace"] == "AWS/Events"
            and query["MetricStat"]["Metric"]["Dimensions"] == [{"Name": "RuleName", "Value": {"Ref": rule}}]
        ]
        assert {metric for _, metric in watching} >= {"FailedInvocations", "InvocationsFailedToBeSentToDlq"}, rule
        for name in {name for name, _ in watching}:
            assert alarms[name]["AlarmActions"] == [{"Ref": "AlertTopic"}]
            [result] = [q for q in alarms[name]["Metrics"] if q["ReturnData"]]
            # the metrics exist only when not zero: a missing one must not hide the others
            assert all(
                f"FILL({q['Id']}, 0)" in result["Expression"] for q in alarms[name]["Metrics"] if "MetricStat" in q
            )
        # the alarm's way to the topic (CloudWatch, the topic's key) shares no key with the rule's targets
        for target in RESOURCES[rule]["Properties"]["Targets"]:
            [(_, value)] = target["Arn"].items()
            logical = value.split(".")[0]
            if logical != "AlertTopic":
                assert RESOURCES[logical]["Properties"].get("KmsMasterKeyId") != alert_key, rule
    services = [s for listed, _ in service_statements(alert_key["Ref"]) for s in listed]
    assert "cloudwatch.amazonaws.com" in services
    # and the new-file rule's dead letters do not depend on the file queue's key either
    dlq = RESOURCES["NewFileEventDeadLetterQueue"]["Properties"]
    assert dlq.get("SqsManagedSseEnabled") is True and "KmsMasterKeyId" not in dlq


def test_lake_formation_grants_are_optional_and_each_jobs_role_gets_what_its_job_does() -> None:
    granted = {n: r for n, r in RESOURCES.items() if r["Type"] == "AWS::LakeFormation::Permissions"}
    writes = ["ALTER", "DELETE", "DESCRIBE", "DROP", "INSERT", "SELECT"]
    creates = ["ALTER", "CREATE_TABLE", "DESCRIBE"]
    silver = {"If": ["CreateSilverDatabase", {"Ref": "GlueDatabase"}, {"Sub": "cdclake_${EnvironmentName}"}]}
    gold = {"If": ["CreateGoldDatabase", {"Ref": "GoldDatabase"}, {"Sub": "cdclake_${EnvironmentName}_gold"}]}
    # (role, database) -> (database permissions, table permissions): the gold job only reads silver
    expected = {
        ("FullLoadJobRole", "Silver"): (creates, writes), ("CdcJobRole", "Silver"): (creates, writes),
        ("MaintenanceJobRole", "Silver"): (creates, writes), ("MaintenanceJobRole", "Gold"): (creates, writes),
        ("GoldJobRole", "Silver"): (["DESCRIBE"], ["DESCRIBE", "SELECT"]), ("GoldJobRole", "Gold"): (creates, writes),
    }  # fmt: skip
    found: dict[tuple[str, str], dict[str, list[str]]] = {}
    for name, resource in granted.items():
        assert resource["Condition"] == "UseLakeFormation", name
        properties = resource["Properties"]
        role = properties["DataLakePrincipal"]["DataLakePrincipalIdentifier"]["GetAtt"].removesuffix(".Arn")
        kind, target = next(iter(properties["Resource"].items()))
        database = target.get("Name", target.get("DatabaseName"))
        assert database in (silver, gold), name
        found.setdefault((role, "Silver" if database == silver else "Gold"), {})[kind] = properties["Permissions"]
    assert found == {
        key: {"DatabaseResource": database, "TableResource": tables} for key, (database, tables) in expected.items()
    }
    assert PARAMETERS["GrantLakeFormationPermissions"]["Default"] == "false"


# ---------------------------------------------------------------------------------------- source side


def test_without_a_source_connection_the_jobs_run_outside_any_vpc() -> None:
    assert PARAMETERS["SourceConnectionName"]["Default"] == ""
    assert template()["Conditions"]["HasSourceConnection"] == {
        "Not": [{"Equals": [{"Ref": "SourceConnectionName"}, ""]}]
    }
    for job in ("FullLoadJob", "VerifyJob"):  # the jobs that read the source
        connections = RESOURCES[job]["Properties"]["Connections"]
        assert connections["If"][0] == "HasSourceConnection" and connections["If"][2] == {"Ref": "AWS::NoValue"}
    # the jobs that never talk to the source database are never put into its VPC
    for job in ("CdcJob", "MaintenanceJob", "GoldJob"):
        assert "Connections" not in RESOURCES[job]["Properties"], job


def test_the_verify_job_runs_only_with_a_source_after_the_full_load_and_on_an_optional_schedule() -> None:
    conditions = template()["Conditions"]
    assert conditions["VerifyAfterLoad"] == {
        "And": [{"Condition": "HasSourceSecret"}, {"Equals": [{"Ref": "VerifyAfterFullLoad"}, "true"]}]
    }
    assert conditions["HasVerifySchedule"] == {
        "And": [{"Condition": "HasSourceSecret"}, {"Not": [{"Equals": [{"Ref": "VerifySchedule"}, ""]}]}]
    }
    assert PARAMETERS["VerifySchedule"]["Default"] == ""  # no schedule unless asked for
    pattern = PARAMETERS["VerifySchedule"]["AllowedPattern"]
    for accepted in ("", "rate(1 day)", "cron(0 3 ? * SUN *)"):
        assert re.fullmatch(pattern, accepted), accepted
    for refused in ("daily", "rate 1 day", "at(2026-01-01T00:00:00)"):
        assert not re.fullmatch(pattern, refused), refused
    substitutions = RESOURCES["PipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]
    assert substitutions["VerifyAfterFullLoad"] == {"If": ["VerifyAfterLoad", "true", "false"]}
    assert substitutions["VerifyJobName"] == {"Ref": "VerifyJob"}
    # The schedule starts the verify job itself (never a second state machine execution), with a role for that alone
    schedule = RESOURCES["VerifyScheduleEntry"]
    assert schedule["Condition"] == RESOURCES["VerifyScheduleRole"]["Condition"] == "HasVerifySchedule"
    target = schedule["Properties"]["Target"]
    assert target["Arn"] == {"Sub": "arn:${AWS::Partition}:scheduler:::aws-sdk:glue:startJobRun"}
    assert json.loads(target["Input"]["Sub"].replace("${VerifyJob}", "cdclake-dev-verify")) == {
        "JobName": "cdclake-dev-verify"
    }
    [policy] = RESOURCES["VerifyScheduleRole"]["Properties"]["Policies"]
    [statement] = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == "glue:StartJobRun" and "job/${VerifyJob}" in statement["Resource"]["Sub"]


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


def test_a_receive_without_its_own_visibility_holds_the_message_group_minutes_not_hours() -> None:
    # The CDC job sets its visibility per receive; the queue's default is for anyone else (a look in the console).
    queue = RESOURCES["FileQueue"]["Properties"]
    assert queue["VisibilityTimeout"] <= 900
    # A failing iteration runs the job 4 times (1 + 3 retries): the dead-letter queue is several iterations away.
    assert queue["RedrivePolicy"]["maxReceiveCount"] >= 3 * 4


# ------------------------------------------------------------------------------------- the CDC job


def test_the_cdc_job_follows_the_file_queue_with_the_stacks_settings() -> None:
    arguments = RESOURCES["CdcJob"]["Properties"]["DefaultArguments"]
    assert arguments["--queue_url"] == {"Ref": "FileQueue"}
    for argument, parameter in (("--poll_seconds", "CdcPollSeconds"), ("--idle_seconds", "CdcIdleSeconds"),
                                ("--max_run_seconds", "CdcMaxRunSeconds")):  # fmt: skip
        assert arguments[argument] == {"Ref": parameter}
        assert len(PARAMETERS[parameter]["Description"]) > 60, parameter
    assert (PARAMETERS["CdcPollSeconds"]["Default"], PARAMETERS["CdcIdleSeconds"]["Default"]) == (10, 300)
    assert PARAMETERS["CdcPollSeconds"]["Default"] == JOB_FOLLOW.poll_seconds  # the job's own default pace
    assert PARAMETERS["CdcMaxRunSeconds"]["Default"] == 3600
    # The other jobs do not follow the queue, and the CDC job has every argument the full-load job has but the
    # source's (it never reads the source database) and the verify job's name (it never reloads)
    full_load = RESOURCES["FullLoadJob"]["Properties"]["DefaultArguments"]
    source = {"--secret_id", "--source_connection", "--dbname", "--source_engine", "--verify_job_name"}
    assert {name: arguments[name] for name in full_load if name not in source} == {
        name: value for name, value in full_load.items() if name not in source
    }
    assert not source & set(arguments)
    for job in ("FullLoadJob", "MaintenanceJob", "GoldJob"):
        assert "--queue_url" not in RESOURCES[job]["Properties"]["DefaultArguments"], job


def test_the_cdc_job_timeout_exceeds_its_longest_run_plus_one_round_for_any_accepted_setting() -> None:
    # A run ends after CdcMaxRunSeconds plus the round under way (a round includes its CdcPollSeconds wait).
    assert RESOURCES["CdcJob"]["Properties"]["Timeout"] == {"Ref": "CdcJobTimeoutMinutes"}
    shortest_timeout = PARAMETERS["CdcJobTimeoutMinutes"]["MinValue"] * 60
    longest_run = PARAMETERS["CdcMaxRunSeconds"]["MaxValue"] + PARAMETERS["CdcPollSeconds"]["MaxValue"]
    assert shortest_timeout >= longest_run + 20 * 60  # 20 minutes at least for the last round's work
    assert PARAMETERS["CdcJobTimeoutMinutes"]["Default"] * 60 > PARAMETERS["CdcMaxRunSeconds"]["Default"]


def test_only_the_cdc_job_may_consume_the_file_queue() -> None:
    def queue_actions(role: str) -> set[str]:
        actions = [
            a for s in statements_of(role) for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        ]
        return {a for a in actions if a.startswith("sqs:")}

    # receive and delete only: the job never extends a message nor reads the queue's depth (docs/iam.md)
    assert queue_actions("CdcJobRole") == {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
    for role in ("FullLoadJobRole", "MaintenanceJobRole", "GoldJobRole"):
        assert queue_actions(role) == set(), role
    [queue] = [s for s in statements_of("CdcJobRole") if s["Sid"] == "FollowFileQueue"]
    assert queue["Resource"] == {"GetAtt": "FileQueue.Arn"}


# ------------------------------------------------------------------------------------------ functions


def test_function_metrics_use_the_stack_namespace_and_no_reserved_concurrency() -> None:
    variables = template()["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == {"Ref": "MetricsNamespace"}
    work_check = RESOURCES["WorkCheckFunction"]["Properties"]["Environment"]["Variables"]
    assert work_check == {
        "CDC_JOB_NAME": {"Ref": "CdcJob"},
        "SWEEP_EVERY_ITERATIONS": {"Ref": "SweepEveryIterations"},
        "CDC_MAX_RUN_SECONDS": {"Ref": "CdcMaxRunSeconds"},
        # the full-load lane: the CDC job's reload request (the CDC job's --reload_requests) and the job it starts
        "RELOAD_REQUESTS_URI": {"Sub": "s3://${ArtifactsBucket}/state/reloads.json"},
        "FULL_LOAD_JOB_NAME": {"Ref": "FullLoadJob"},
        # the other lanes: maintenance waits while a verify run (or a full-load run) is active
        "VERIFY_JOB_NAME": {"Ref": "VerifyJob"},
        # maintenance by time: due this many hours after it last ran (the state machine adds: once silver changed)
        "MAINTENANCE_EVERY_HOURS": {"Ref": "MaintenanceEveryHours"},
        "ENVIRONMENT_NAME": {"Ref": "EnvironmentName"},  # the Environment dimension of its metrics
    }
    cdc_arguments = RESOURCES["CdcJob"]["Properties"]["DefaultArguments"]
    assert cdc_arguments["--reload_requests"] == work_check["RELOAD_REQUESTS_URI"]
    assert (PARAMETERS["SweepEveryIterations"]["Default"], PARAMETERS["SweepEveryIterations"]["MinValue"]) == (60, 0)
    assert (PARAMETERS["MaintenanceEveryHours"]["Default"], PARAMETERS["MaintenanceEveryHours"]["MinValue"]) == (24, 0)


def test_the_state_machine_no_longer_touches_the_queue() -> None:
    # The CDC job consumes it and CheckWork reads its depth: the state machine has no SQS permission left.
    statements = RESOURCES["PipelineStateMachine"]["Properties"]["Policies"][-1]["Statement"]
    assert [s for s in statements if any(str(a).startswith("sqs:") for a in s["Action"])] == []
    for removed in ("MaxFilesPerBatch", "MaxBytesPerBatch", "ReceiveWaitSeconds", "ReceiveVisibilitySeconds"):
        assert removed not in PARAMETERS, removed


def test_history_budget_stays_below_the_step_functions_limit() -> None:
    assert PARAMETERS["MaxHistoryEvents"]["MaxValue"] <= 25_000 - 2_000


# ----------------------------------------------------------------------------- names for every environment
# Each service's rule for the names the stack builds from EnvironmentName (the services' API references).
NAME_RULES: dict[tuple[str, str], str] = {
    ("AWS::SQS::Queue", "QueueName"): r"[A-Za-z0-9_-]{1,75}(\.fifo)?",
    ("AWS::Events::Rule", "Name"): r"[.\-_A-Za-z0-9]{1,64}",
    ("AWS::Glue::Job", "Name"): r"[A-Za-z0-9_.-]{1,255}",
    ("AWS::Glue::SecurityConfiguration", "Name"): r"[A-Za-z0-9_.-]{1,255}",
    ("AWS::SNS::Topic", "TopicName"): r"[A-Za-z0-9_-]{1,256}",
    ("AWS::Logs::LogGroup", "LogGroupName"): r"[.\-_/#A-Za-z0-9]{1,512}",
    ("AWS::Serverless::StateMachine", "Name"): r"[A-Za-z0-9_-]{1,80}",
    ("AWS::CloudWatch::Dashboard", "DashboardName"): r"[A-Za-z0-9_-]{1,255}",
    # DMS: begins with a letter; ASCII letters, digits and hyphens; no two consecutive hyphens, no final hyphen.
    ("AWS::DMS::Endpoint", "EndpointIdentifier"): r"[A-Za-z](?!.*--)[A-Za-z0-9-]{0,254}(?<!-)",
    # Glue databases the jobs and Athena use: lower-case letters, digits and underscores (and a cdclake identifier).
    ("AWS::Glue::Database", "DatabaseInput.Name"): r"[a-z0-9_]{1,255}",
}


def render(value: Any, parameters: dict[str, str]) -> str:
    """A resource name as CloudFormation renders it: Ref, Sub (both forms), Join and Split of parameters."""
    if isinstance(value, str):
        return value
    [(function, argument)] = value.items()
    if function == "Ref":
        return parameters[argument]
    if function == "Sub":
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        values = {**parameters, **{k: render(v, parameters) for k, v in variables.items()}}
        return re.sub(r"\$\{([A-Za-z0-9:]+)\}", lambda m: values[m.group(1)], text)
    if function == "Join":
        separator, items = argument
        parts = render_list(items, parameters)
        return separator.join(parts)
    raise AssertionError(f"not rendered here: {function}")


def render_list(value: Any, parameters: dict[str, str]) -> list[str]:
    if isinstance(value, list):
        return [render(v, parameters) for v in value]
    [(function, argument)] = value.items()
    assert function == "Split", function
    separator, text = argument
    return render(text, parameters).split(separator)


def accepted_environment(name: str) -> bool:
    rule = PARAMETERS["EnvironmentName"]
    return bool(re.fullmatch(rule["AllowedPattern"], name)) and len(name) <= rule.get("MaxLength", len(name))


def built_names(environment: str) -> list[tuple[str, str, str]]:
    """(resource, rule, name) for every name the template builds, for one EnvironmentName."""
    parameters = {"EnvironmentName": environment, "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}
    names = []
    for logical, resource in RESOURCES.items():
        for (kind, path), rule in NAME_RULES.items():
            if resource["Type"] != kind:
                continue
            value: Any = resource["Properties"]
            for part in path.split("."):
                value = value.get(part) if value is not None else None
            if value is not None:  # unnamed: CloudFormation generates a valid name
                names.append((logical, rule, render(value, parameters)))
    return names


@pytest.mark.parametrize("environment", ["dev", "prod", "eu_prod", "a", "a1_b2_c3", "abcdefghijkl", "x_1"])
def test_every_name_obeys_its_services_rules_for_an_accepted_environment_name(environment: str) -> None:
    assert accepted_environment(environment)
    names = built_names(environment)
    assert {logical for logical, _, _ in names} >= {"DmsTargetEndpoint", "FileQueue", "GlueDatabase", "NewFileRule"}
    for logical, rule, name in names:
        assert re.fullmatch(rule, name), f"{logical}: {name!r} breaks {rule}"
    assert IDENTIFIER.match(f"cdclake_{environment}_gold")


@given(st.from_regex(PARAMETERS["EnvironmentName"]["AllowedPattern"], fullmatch=True))
@settings(max_examples=200, deadline=None)
def test_every_name_obeys_its_services_rules_for_any_accepted_environment_name(environment: str) -> None:
    if not accepted_environment(environment):
        return  # longer than MaxLength: CloudFormation refuses it before any name is built
    for logical, rule, name in built_names(environment):
        assert re.fullmatch(rule, name), f"{logical}: {name!r} breaks {rule}"


@pytest.mark.parametrize("environment", ["a__b", "dev_", "eu-prod", "abcdefghijklm"])
def test_environment_names_that_would_break_a_name_are_refused(environment: str) -> None:
    assert not accepted_environment(environment)


# ----------------------------------------------------------------------------- server access logs


def test_access_logs_are_delivered_by_policy_and_the_logged_buckets_wait_for_it() -> None:
    # Policy-based log delivery needs no ACL: the access-log bucket enforces bucket-owner ownership (ACLs off),
    # and its policy admits the logging service before any bucket starts logging to it.
    ownership = RESOURCES["AccessLogBucket"]["Properties"]["OwnershipControls"]["Rules"]
    assert ownership == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    statements = RESOURCES["AccessLogBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    [delivery] = [s for s in statements if s["Effect"] == "Allow"]
    assert delivery["Principal"] == {"Service": "logging.s3.amazonaws.com"} and delivery["Action"] == "s3:PutObject"
    logged = [n for n, r in RESOURCES.items() if "LoggingConfiguration" in r.get("Properties", {})]
    assert sorted(logged) == ["ArtifactsBucket", "BronzeBucket", "SilverBucket"]
    for name in logged:
        depends = RESOURCES[name].get("DependsOn", [])
        assert "AccessLogBucketPolicy" in ([depends] if isinstance(depends, str) else depends), name


# ----------------------------------------------------------------------------------- day two on AWS


def test_no_receive_anywhere_in_the_stack_releases_a_message_at_once() -> None:
    # A message made visible again at once (visibility 0) is received again at once: its receive count grows each
    # round until it dead-letters, and it holds the FIFO group meanwhile (docs/architecture.md, "Following bronze").
    for path in (ROOT / "template.yaml", DEFINITION):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"VisibilityTimeout\"?\s*:\s*\"?0\b", text), path


def test_the_deploy_guard_answers_within_minutes_not_the_default_hour() -> None:
    guard = RESOURCES["DeployGuard"]["Properties"]
    assert guard["ServiceTimeout"] == 300  # CloudFormation's default is 3600 s
    # longer than the function may run, so a slow answer is still an answer
    assert template()["Globals"]["Function"]["Timeout"] < guard["ServiceTimeout"]


TASK = "arn:aws:dms:us-east-1:123456789012:task:ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def dms_rule_pattern(tasks: list[str]) -> EventPattern:
    """The DMS task rule's pattern as EventBridge would see it, ReplicationTaskArns = ``tasks``."""
    pattern: dict[str, Any] = json.loads(
        json.dumps(RESOURCES["ReplicationTaskStoppedRule"]["Properties"]["EventPattern"])
    )
    # ReplicationTaskArns is a CommaDelimitedList (a list of ARNs); empty ([""]) on a first deploy
    condition, given, placeholder = pattern["resources"]["If"]
    assert (condition, given) == ("HasReplicationTasks", {"Ref": "ReplicationTaskArns"})
    assert CONDITIONS["HasReplicationTasks"] == {
        "Not": [{"Equals": [{"Join": ["", {"Ref": "ReplicationTaskArns"}]}, ""]}]
    }
    none_yet = [p["Sub"].replace("${AWS::Partition}", "aws").replace("${AWS::Region}", "us-east-1").replace(
        "${AWS::AccountId}", "123456789012") for p in placeholder]  # fmt: skip
    pattern["resources"] = tasks if "".join(tasks) else none_yet
    return EventPattern.load(json.dumps(pattern))


def dms_event(event_type: str, task: str = TASK) -> dict[str, Any]:
    """A DMS task state change as the DMS user guide's EventBridge example shows it."""
    return {
        "source": "aws.dms",
        "detail-type": "DMS Replication Task State Change",
        "resources": [task],
        "detail": {"type": "REPLICATION_TASK", "category": "StateChange", "eventType": event_type,
                   "detailMessage": "Stopped Replication Task"},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("event_type", "task", "alerted"),
    [
        ("REPLICATION_TASK_STOPPED", TASK, True),
        ("REPLICATION_TASK_FAILED", TASK, True),
        ("REPLICATION_TASK_STARTED", TASK, False),
        ("REPLICATION_TASK_STOPPED", TASK.replace("ABC", "XYZ"), False),  # another stack's task
    ],
)
def test_a_stopped_or_failed_dms_task_of_the_stack_alerts(event_type: str, task: str, alerted: bool) -> None:
    other = "arn:aws:dms:us-east-1:123456789012:task:SECOND"
    assert dms_rule_pattern([TASK, other]).matches_event(dms_event(event_type, task)) is alerted
    assert dms_rule_pattern([TASK, other]).matches_event(dms_event("REPLICATION_TASK_FAILED", other))


def test_a_stack_that_names_no_task_yet_alerts_on_no_task() -> None:
    # GIVEN a first deploy: ReplicationTaskArns empty (CloudFormation passes [""])
    # THEN no task's stop matches the rule (an empty pattern list would be refused or match anything)
    for task in (TASK, "arn:aws:dms:us-east-1:123456789012:task:SECOND"):
        assert not dms_rule_pattern([""]).matches_event(dms_event("REPLICATION_TASK_STOPPED", task))
    assert PARAMETERS["ReplicationTaskArns"]["Default"] == ""


def test_the_dms_task_rule_publishes_to_the_alert_topic_which_admits_it_alone() -> None:
    [target] = RESOURCES["ReplicationTaskStoppedRule"]["Properties"]["Targets"]
    assert target["Arn"] == {"Ref": "AlertTopic"}
    statements = RESOURCES["AlertTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    [grant] = [s for s in statements if s["Sid"] == "ReplicationTaskStops"]
    assert grant == {
        "Sid": "ReplicationTaskStops", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sns:Publish", "Resource": {"Ref": "AlertTopic"},
        "Condition": {"ArnEquals": {"aws:SourceArn": {"GetAtt": "ReplicationTaskStoppedRule.Arn"}}},
    }  # fmt: skip
    # the topic's key admits EventBridge without a source condition (unsupported for encrypted topics): checked above


def test_a_silent_pipeline_alarms_on_missing_freshness_data() -> None:
    alarm = RESOURCES["FreshnessMissingAlarm"]["Properties"]
    assert (alarm["MetricName"], alarm["Namespace"]) == ("FreshnessLagSeconds", {"Ref": "MetricsNamespace"})
    assert alarm["Dimensions"] == [{"Name": "Environment", "Value": {"Ref": "EnvironmentName"}}]
    assert alarm["TreatMissingData"] == "breaching"
    # a datapoint in any minute is data (SampleCount >= 1): only the silence breaches, not a lag
    assert (alarm["Statistic"], alarm["ComparisonOperator"], alarm["Threshold"]) == (
        "SampleCount", "LessThanThreshold", 1,
    )  # fmt: skip
    minutes = {"Ref": "FreshnessMissingAlarmMinutes"}
    assert (alarm["Period"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (60, minutes, minutes)
    assert PARAMETERS["FreshnessMissingAlarmMinutes"]["MaxValue"] * 60 <= 86_400  # CloudWatch's evaluation range
    assert alarm["AlarmActions"] == [{"Ref": "AlertTopic"}]


def test_every_alarm_has_a_line_in_the_runbook_saying_what_it_means_and_what_to_do() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    section = runbook.split("\n## Alarms\n", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip().strip("`"): line for line in section.splitlines() if line.startswith("| `")}
    alarms = sorted(name for name, r in RESOURCES.items() if r["Type"] == "AWS::CloudWatch::Alarm")
    assert sorted(rows) == alarms
    for name, line in rows.items():
        meaning, action = (cell.strip() for cell in line.split("|")[2:4])
        assert len(meaning) > 30 and len(action) > 30, name
    assert "paused" in rows["FreshnessMissingAlarm"]  # the false alarm it can raise, and what to do then


def test_the_full_relisting_comes_inside_every_run_for_any_accepted_setting() -> None:
    arguments = RESOURCES["CdcJob"]["Properties"]["DefaultArguments"]
    assert arguments["--relist_seconds"] == {"Ref": "CdcRelistSeconds"}
    relist, longest = PARAMETERS["CdcRelistSeconds"], PARAMETERS["CdcMaxRunSeconds"]
    assert relist["Default"] == 900 and relist["MaxValue"] < longest["MinValue"]
    assert longest["MinValue"] <= longest["Default"]
    # and the job refuses the pair the template cannot (a run started by hand with its own arguments)
    common = ["cdc.py", "--config", "c", "--bronze", "b", "--warehouse", "w"]
    given = parse_arguments([*common, "--relist_seconds", "900", "--max_run_seconds", "3600"], "cdc")
    assert (given.cdc.follow.relist_seconds, given.cdc.follow.max_run_seconds) == (900, 3600)
    with pytest.raises(ConfigError, match=r"--relist_seconds \(3600\) must be shorter than --max_run_seconds"):
        parse_arguments([*common, "--relist_seconds", "3600", "--max_run_seconds", "3600"], "cdc")
    with pytest.raises(ConfigError, match="--relist_seconds must be positive"):
        parse_arguments([*common, "--relist_seconds", "0"], "cdc")


def test_the_cdc_job_is_given_the_alert_topic_and_reads_it() -> None:
    arguments = RESOURCES["CdcJob"]["Properties"]["DefaultArguments"]
    assert arguments["--alert_topic_arn"] == {"Ref": "AlertTopic"}
    topic = "arn:aws:sns:us-east-1:123456789012:cdclake-dev-alerts"
    common = ["cdc.py", "--config", "c", "--bronze", "b", "--warehouse", "w"]
    assert parse_arguments([*common, "--alert_topic_arn", topic], "cdc").cdc.alert_topic_arn == topic
    assert parse_arguments(common, "cdc").cdc.alert_topic_arn is None
    assert parse_arguments([*common, "--alert_topic_arn", topic], "full_load").cdc.alert_topic_arn is None
    for job in ("FullLoadJob", "MaintenanceJob", "GoldJob"):
        assert "--alert_topic_arn" not in RESOURCES[job]["Properties"]["DefaultArguments"], job


def test_a_sweep_run_starts_without_an_idle_wait_and_a_run_for_queued_files_with_it() -> None:
    states = json.loads(DEFINITION.read_text(encoding="utf-8"))["States"]
    sweep, follow = states["RunCdcSweep"], states["RunCdcJob"]
    assert sweep["Parameters"] == {"JobName": "${CdcJobName}", "Arguments": {"--idle_seconds": "0"}}
    assert follow["Parameters"] == {"JobName": "${CdcJobName}"}  # CdcIdleSeconds, its default argument
    # the same retries and alert, the same next state
    assert (sweep["Retry"], sweep["Catch"], sweep["Next"]) == (follow["Retry"], follow["Catch"], follow["Next"])
    [to_sweep, to_follow] = states["ShouldRunCdcJob"]["Choices"]
    assert to_sweep["Next"] == "RunCdcSweep" and to_follow["Next"] == "RunCdcJob"
    conditions = {(c["Variable"], next(v for k, v in c.items() if k != "Variable")) for c in to_sweep["And"]}
    assert conditions == {("$.work.start", True), ("$.work.sweep", True), ("$.work.visible", 0)}


def test_every_metric_of_the_stack_namespace_is_read_and_written_with_the_environment_dimension() -> None:
    # The alarms and the dashboard read the stack's metrics under Environment = EnvironmentName ...
    environment = [{"Name": "Environment", "Value": {"Ref": "EnvironmentName"}}]
    alarms = {n: r["Properties"] for n, r in RESOURCES.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    ours = {n: a for n, a in alarms.items() if a.get("Namespace") == {"Ref": "MetricsNamespace"}}
    assert ours and all(a["Dimensions"] == environment for a in ours.values()), sorted(ours)
    for alarm in alarms.values():
        for query in alarm.get("Metrics", []):
            metric = query.get("MetricStat", {}).get("Metric", {})
            if metric.get("Namespace") == {"Ref": "MetricsNamespace"}:
                assert metric["Dimensions"] == environment
    sub = RESOURCES["PipelineDashboard"]["Properties"]["DashboardBody"]["Sub"]
    body = sub[0] if isinstance(sub, list) else sub
    lines = re.findall(r'\["\$\{MetricsNamespace\}", "(\w+)", "(\w+)", "([^"]+)"', body)
    assert lines and all(line[1:] == ("Environment", "${EnvironmentName}") for line in lines), lines
    assert body.count('${MetricsNamespace}", ') == len(lines)  # no metric line of ours escaped the pattern
    # ... and every writer sets it: the Glue jobs (ops/metrics.py, verify/log.py: tests/unit/test_metrics.py,
    # test_verify_log.py) and the work check's Powertools metrics (its default dimension, from ENVIRONMENT_NAME)
    work_check = RESOURCES["WorkCheckFunction"]["Properties"]["Environment"]["Variables"]
    assert work_check["ENVIRONMENT_NAME"] == {"Ref": "EnvironmentName"}
    assert "set_default_dimensions(Environment=settings.environment)" in (
        ROOT / "functions" / "work_check" / "app.py"
    ).read_text(encoding="utf-8")
