"""Static IAM check: every AWS call the code makes is allowed by the role that runs it.

- the boto3 calls in functions/<name>/ (read from the code's syntax tree, named as botocore names the operations)
  against that function's policies in template.yaml;
- the boto3 calls in glue/ against the Glue job role, plus what the Java side (Iceberg's GlueCatalog and
  S3FileIO) does, which no Python syntax tree shows;
- every Task `Resource` of the state machine definition against the state machine's policies.

A call is allowed when a statement of the role lists its IAM action (wildcards as IAM reads them) on a resource
naming the logical resource the call reaches (or "*"). KMS is checked where a queue or topic is encrypted with
the stack's key: SQS and SNS need the key for the caller, not only the queue or topic permission.
This does not evaluate IAM (conditions, resource ARNs as created, key and bucket policies, what S3 answers a read
of a missing key): the deployed-stack tests do, for every call their principals make (tests/aws/iam_harness.py).
What this check adds: code paths no deployed test reaches, and the Java side of the Glue jobs (Iceberg's
GlueCatalog and S3FileIO on Glue), which local Spark never calls. SCPs stay a real account's to prove.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore import xform_name
from conftest import DEFINITION, ROOT
from test_static import template

RESOURCES = template()["Resources"]
SERVICES = ("sqs", "s3", "cloudwatch", "glue", "stepfunctions", "sns", "dms", "sts", "secretsmanager")
# boto3 operation -> the IAM action that authorises it, where the two names differ.
IAM_ACTION = {
    "s3:ListObjectsV2": "s3:ListBucket",
    "s3:ListObjects": "s3:ListBucket",
    "s3:HeadObject": "s3:GetObject",
    "s3:HeadBucket": "s3:ListBucket",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:SendMessageBatch": "sqs:SendMessage",
}
IAM_PREFIX = {"stepfunctions": "states", "sfn": "states", "databasemigration": "dms", "cloudwatch": "cloudwatch"}


@dataclass(frozen=True)
class Need:
    """An IAM action the code needs on one logical resource of the stack ("*": no resource type)."""

    action: str
    resource: str
    where: str


def _operations() -> dict[str, dict[str, str]]:
    """service -> {boto3 method name: operation}, for the services the code may call."""
    session = botocore.session.get_session()
    return {
        service: {xform_name(op): op for op in session.get_service_model(service).operation_names}
        for service in SERVICES
    }


OPERATIONS = _operations()


def clients_created(trees: list[ast.AST]) -> set[str]:
    """The services of every ``boto3.client("<service>")`` in the code: the only services it can call."""
    services = set()
    for tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "client"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "boto3"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                services.add(str(node.args[0].value))
    return services


def boto3_calls(paths: list[Path]) -> set[tuple[str, str, str]]:
    """(service, operation, file:line) of every boto3 client call in ``paths`` (paginators included).

    A method counts when botocore names it an operation of a service the code creates a client for.
    """
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in paths}
    services = clients_created(list(trees.values()))
    assert services <= set(SERVICES), services - set(SERVICES)
    calls = set()
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            name = node.func.attr
            if name == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                name = str(node.args[0].value)
            for service in services:
                if name in OPERATIONS[service]:
                    calls.add((service, OPERATIONS[service][name], f"{path.relative_to(ROOT)}:{node.lineno}"))
    return calls


def iam_action(service: str, operation: str) -> str:
    action = f"{IAM_PREFIX.get(service, service)}:{operation}"
    return IAM_ACTION.get(action, action)


def statements_of(policies: list[Any]) -> list[dict[str, Any]]:
    """A SAM ``Policies`` list (inline statements and policy templates) as plain statements."""
    statements: list[dict[str, Any]] = []
    for policy in policies:
        if "Statement" in policy:
            statements.extend(s for s in policy["Statement"] if isinstance(s, dict) and "Action" in s)
        elif "LambdaInvokePolicy" in policy:
            function = policy["LambdaInvokePolicy"]["FunctionName"]
            statements.append({"Action": "lambda:InvokeFunction", "Resource": function})
        elif "SNSPublishMessagePolicy" in policy:
            topic = policy["SNSPublishMessagePolicy"]["TopicName"]
            statements.append({"Action": "sns:Publish", "Resource": topic})
        else:
            raise AssertionError(f"a policy template this check does not know: {policy}")
    return statements


def role_statements(resource: str) -> list[dict[str, Any]]:
    properties = RESOURCES[resource]["Properties"]
    if RESOURCES[resource]["Type"].startswith("AWS::Serverless::"):
        return statements_of(properties["Policies"])
    statements = []
    for policy in properties["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            if "If" in statement:  # an optional statement: checked as present
                statement = statement["If"][1]
            statements.append(statement)
    return statements


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def allows(statements: list[dict[str, Any]], need: Need) -> bool:
    for statement in statements:
        if statement.get("Effect", "Allow") != "Allow":
            continue
        if not any(fnmatch.fnmatchcase(need.action, str(a)) for a in _listed(statement["Action"])):
            continue
        for resource in _listed(statement["Resource"]):
            if resource == "*" or re.search(rf"\b{re.escape(need.resource)}\b", json.dumps(resource)):
                return True
    return False


def missing(role: str, needs: list[Need]) -> list[Need]:
    statements = role_statements(role)
    return [need for need in needs if not allows(statements, need)]


def kms_needs(action: str, target: str, where: str) -> list[Need]:
    """SQS and SNS calls on a resource encrypted with one of the stack's keys need that key too."""
    if target not in RESOURCES:  # a resource the stack does not create (a database a deleted stack kept)
        return []
    key = RESOURCES[target]["Properties"].get("KmsMasterKeyId")
    if key is None:
        return []
    assert set(key) == {"Ref"}, f"{target}: encrypted with a key this check does not know: {key}"
    if action in ("sqs:ReceiveMessage",):
        return [Need("kms:Decrypt", key["Ref"], where)]
    if action in ("sqs:SendMessage", "sns:Publish"):
        return [Need("kms:GenerateDataKey", key["Ref"], where), Need("kms:Decrypt", key["Ref"], where)]
    return []


def environment_target(function: str, variable: str) -> str:
    """The logical resource a function's environment variable names (QUEUE_URL -> FileQueue)."""
    local = RESOURCES[function]["Properties"].get("Environment", {}).get("Variables", {})
    globals_ = template()["Globals"]["Function"]["Environment"]["Variables"]
    value = {**globals_, **local}[variable]
    if "Sub" in value:  # an S3 URI built from a bucket: s3://${Bucket}/key
        return str(re.search(r"\$\{(\w+)", value["Sub"]).group(1))  # type: ignore[union-attr]
    return str(value["Ref"])


# ---------------------------------------------------------------------------------------------- Lambdas
# Which environment variable names the resource each service's calls reach, per function directory.
FUNCTIONS = {
    "work_check": ("WorkCheckFunction", {"sqs": "QUEUE_URL", "glue": "CDC_JOB_NAME", "s3": "RELOAD_REQUESTS_URI"}),
    # the guard's databases come from its custom resource's properties, not its environment
    "deploy_guard": ("DeployGuardFunction", {"glue": "=database/cdclake_${EnvironmentName}"}),
}


def test_every_function_directory_is_checked() -> None:
    assert sorted(p.name for p in (ROOT / "functions").iterdir() if p.is_dir()) == sorted(FUNCTIONS)


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_every_boto3_call_of_a_function_is_allowed_by_its_role(function: str) -> None:
    logical, targets = FUNCTIONS[function]
    calls = boto3_calls(sorted((ROOT / "functions" / function).glob("*.py")))
    needs = []
    for service, operation, where in calls:
        action = iam_action(service, operation)
        named = targets[service]
        target = named[1:] if named.startswith("=") else environment_target(logical, named)
        needs.append(Need(action, target, where))
        needs.extend(kms_needs(action, target, where))
    assert needs, f"no boto3 call found in functions/{function}: the check would prove nothing"
    assert missing(logical, needs) == []


def test_the_checks_find_the_calls_the_functions_make() -> None:
    work = {iam_action(s, o) for s, o, _ in boto3_calls(sorted((ROOT / "functions" / "work_check").glob("*.py")))}
    # the paginator's operation counts; the reload request is listed (it may not exist yet), read, and marked once
    # its failing reload was alerted
    assert work == {"sqs:GetQueueAttributes", "glue:GetJobRuns", "s3:ListBucket", "s3:GetObject", "s3:PutObject"}


def test_the_work_check_function_may_do_nothing_else() -> None:
    # Least privilege: the depth of this queue, the runs of the CDC and full-load jobs, and the one reload
    # request object, nothing more (no message is read). Listing the bucket is narrowed to that one key: the
    # function lists it before reading it, since S3 answers a read of a missing key with 403 to a caller that may
    # not list (the deployed tests' IAM harness evaluates that condition; tests/aws/iam_harness.py).
    statements = role_statements("WorkCheckFunction")
    job = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}:job/${%s}"
    assert [(s["Action"], s["Resource"], s.get("Condition")) for s in statements] == [
        ("sqs:GetQueueAttributes", {"GetAtt": "FileQueue.Arn"}, None),
        ("glue:GetJobRuns", [{"Sub": job % "CdcJob"}, {"Sub": job % "FullLoadJob"}, {"Sub": job % "VerifyJob"}], None),
        (["s3:GetObject", "s3:PutObject"], {"Sub": "${ArtifactsBucket.Arn}/state/reloads.json"}, None),
        ("s3:ListBucket", {"GetAtt": "ArtifactsBucket.Arn"}, {"StringEquals": {"s3:prefix": "state/reloads.json"}}),
    ]


def test_a_missing_permission_is_found() -> None:
    # The check itself: a role without the queue's key may not receive from the encrypted queue.
    statements = [{"Effect": "Allow", "Action": ["sqs:ReceiveMessage"], "Resource": {"GetAtt": "FileQueue.Arn"}}]
    assert allows(statements, Need("sqs:ReceiveMessage", "FileQueue", "x"))
    assert not allows(statements, Need("sqs:ReceiveMessage", "FileDeadLetterQueue", "x"))
    assert not allows(statements, Need("kms:Decrypt", "QueueKey", "x"))
    assert kms_needs("sqs:ReceiveMessage", "FileQueue", "x") == [Need("kms:Decrypt", "QueueKey", "x")]


# ------------------------------------------------------------------------------------------------- Glue
# One role per job: the syntax tree cannot tell which job makes a call of the shared library, so each
# call's callers are declared here, from the jobs' arguments: every job reads its configuration (--config); only the
# full-load and CDC jobs read bronze (--bronze listings) and publish table metrics (--metrics_namespace); only the
# full-load job reads the source (--secret_id, --source_connection) and writes the configuration; only the CDC job
# follows the queue (--queue_url) and publishes alerts (--alert_topic_arn). The verify job reads the source as the
# full-load job does (--secret_id, --source_connection) and publishes its own metrics (--metrics_namespace).
JOB_ROLES = {"full_load": "FullLoadJobRole", "cdc": "CdcJobRole", "maintain": "MaintenanceJobRole",
             "gold": "GoldJobRole", "verify": "VerifyJobRole"}  # fmt: skip
EVERY_JOB = frozenset(JOB_ROLES)
BRONZE_READERS = frozenset({"full_load", "cdc"})
FULL_LOAD = frozenset({"full_load"})
CDC = frozenset({"cdc"})
SOURCE_READERS = frozenset({"full_load", "verify"})
METRICS_PUBLISHERS = frozenset({"full_load", "cdc", "verify"})
SILVER_WRITERS = EVERY_JOB - {"verify"}
# IAM action -> (the logical resource the call reaches, the jobs that make it).
GLUE_CALLS: dict[str, list[tuple[str, frozenset[str]]]] = {
    "s3:GetObject": [("ArtifactsBucket", EVERY_JOB), ("BronzeBucket", BRONZE_READERS)],
    # the verify job lists bronze (--bronze: the files not applied yet tell lag from difference), reads none
    "s3:ListBucket": [("BronzeBucket", BRONZE_READERS | {"verify"})],
    # The full-load job's source-catalog step (ops/source_catalog.py): the stack's configuration object, the
    # source secret and the Glue connection (optional statements, checked as present).
    # ... and the CDC lane's reload request (--reload_requests, ops/reload_requests.py), its failure episodes
    # (--failure_episodes, ops/failure_episodes.py: conditional writes, s3:PutObject with ReadArtifacts' GetObject)
    # and the tables it alerted as silent (--silent_tables, engine/silence.py).
    "s3:PutObject": [
        ("TableConfigKey", FULL_LOAD),
        ("state/reloads.json", CDC),
        ("state/failing-tables.json", CDC),
        ("state/silent.json", CDC),
    ],
    "secretsmanager:GetSecretValue": [("SourceSecretId", SOURCE_READERS)],
    "glue:GetConnection": [("SourceConnectionName", SOURCE_READERS)],
    "cloudwatch:PutMetricData": [("*", METRICS_PUBLISHERS)],  # no resource type (narrowed by namespace)
    "sqs:ReceiveMessage": [("FileQueue", CDC)],
    "sqs:DeleteMessage": [("FileQueue", CDC)],
    "sns:Publish": [("AlertTopic", CDC)],
    # The silence watch reads the DMS tasks' table statistics (--replication_task_arns, engine/silence.py).
    "dms:DescribeTableStatistics": [("ReplicationTaskArns", CDC)],
    # A reload (a full-load run given --tables) starts the verify job for the tables it loaded (--verify_job_name).
    "glue:StartJobRun": [("VerifyJob", FULL_LOAD)],
}
# What the Java side of the jobs does (Iceberg GlueCatalog + S3FileIO on the warehouse): no syntax tree shows it.
# Every job reads and writes the silver bucket (the marts live under its gold/ folder); the database ARNs are built
# from the environment name: the silver database for every job, the gold one for the jobs that write marts.
SILVER_FILES = [Need(a, "SilverBucket", "Iceberg S3FileIO")
                for a in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket")]  # fmt: skip
CATALOG_ACTIONS = ("GetDatabase", "GetTable", "GetTables", "CreateTable", "UpdateTable", "DeleteTable")


def catalog_needs(database: str) -> list[Need]:
    return [Need(f"glue:{a}", database, "Iceberg GlueCatalog") for a in CATALOG_ACTIONS]


SILVER_CATALOG = "EnvironmentName"  # any of the stack's databases (the ARNs are built from the name)
GOLD_CATALOG = "cdclake_${EnvironmentName}_gold"  # the gold database only
ICEBERG_NEEDS = {
    "full_load": [*SILVER_FILES, *catalog_needs(SILVER_CATALOG)],
    "cdc": [*SILVER_FILES, *catalog_needs(SILVER_CATALOG)],
    "maintain": [*SILVER_FILES, *catalog_needs(SILVER_CATALOG), *catalog_needs(GOLD_CATALOG)],
    "gold": [*SILVER_FILES, *catalog_needs(SILVER_CATALOG), *catalog_needs(GOLD_CATALOG)],
    # The verify job reads silver and writes its results table alone (files and catalog entry).
    "verify": [
        *(Need(a, "SilverBucket", "Iceberg S3FileIO") for a in ("s3:GetObject", "s3:ListBucket")),
        *(Need(a, "cdclake_verify", "Iceberg S3FileIO") for a in ("s3:PutObject", "s3:DeleteObject")),
        *(Need(f"glue:{a}", SILVER_CATALOG, "Iceberg GlueCatalog") for a in ("GetDatabase", "GetTable", "GetTables")),
        *(Need(f"glue:{a}", "cdclake_verify", "Iceberg GlueCatalog") for a in ("CreateTable", "UpdateTable")),
    ],
}
# The CDC job's interfaces, declared as well as read from the code so its role is checked before the job's code
# calls them: it follows the encrypted file queue (--queue_url) and alerts to the encrypted topic (--alert_topic_arn).
CDC_INTERFACE_NEEDS = [
    *(Need(f"sqs:{a}", "FileQueue", "CDC job --queue_url") for a in ("ReceiveMessage", "DeleteMessage")),
    Need("kms:Decrypt", "QueueKey", "CDC job --queue_url"),  # a consumer of an SSE-KMS queue needs only Decrypt
    Need("sns:Publish", "AlertTopic", "CDC job --alert_topic_arn"),
    *kms_needs("sns:Publish", "AlertTopic", "CDC job --alert_topic_arn"),
]  # fmt: skip


def glue_job_needs() -> dict[str, list[Need]]:
    """job -> what its role must allow: the boto3 calls of glue/ its job makes, Iceberg's, and its interfaces."""
    calls = boto3_calls(sorted((ROOT / "glue").rglob("*.py")))
    found = {iam_action(s, o) for s, o, _ in calls}
    # a call nobody declared the callers of would be checked against no role
    assert found <= set(GLUE_CALLS), found - set(GLUE_CALLS)
    assert {"s3:GetObject", "s3:ListBucket", "cloudwatch:PutMetricData", "secretsmanager:GetSecretValue"} <= found
    needs = {job: list(ICEBERG_NEEDS[job]) for job in JOB_ROLES}
    needs["cdc"] += CDC_INTERFACE_NEEDS
    for service, operation, where in calls:
        action = iam_action(service, operation)
        for target, jobs in GLUE_CALLS[action]:
            for job in jobs:
                needs[job].append(Need(action, target, where))
                needs[job].extend(kms_needs(action, target, where))
    return needs


def test_every_boto3_call_of_the_glue_jobs_is_allowed_by_its_jobs_role() -> None:
    for job, needs in glue_job_needs().items():
        assert missing(JOB_ROLES[job], needs) == [], job


def test_no_glue_job_role_allows_what_only_another_job_calls() -> None:
    # The source (secret, connection, configuration writes), the queue, the alerts and bronze, each only where used.
    exclusive = [
        (SOURCE_READERS, Need("secretsmanager:GetSecretValue", "SourceSecretId", "x")),
        (SOURCE_READERS, Need("glue:GetConnection", "SourceConnectionName", "x")),
        (FULL_LOAD, Need("s3:PutObject", "TableConfigKey", "x")),
        (SOURCE_READERS, Need("ec2:CreateNetworkInterface", "*", "x")),
        (SILVER_WRITERS, Need("glue:DeleteTable", SILVER_CATALOG, "x")),
        (CDC, Need("sqs:ReceiveMessage", "FileQueue", "x")),
        (CDC, Need("sqs:DeleteMessage", "FileQueue", "x")),
        (CDC, Need("sns:Publish", "AlertTopic", "x")),
        (CDC, Need("kms:GenerateDataKey", "AlertKey", "x")),
        (BRONZE_READERS, Need("s3:GetObject", "BronzeBucket", "x")),
        (BRONZE_READERS | {"verify"}, Need("s3:ListBucket", "BronzeBucket", "x")),
        (frozenset({"maintain", "gold"}), Need("glue:CreateTable", GOLD_CATALOG, "x")),
    ]
    for jobs, need in exclusive:
        for job, role in JOB_ROLES.items():
            assert (missing(role, [need]) == []) is (job in jobs), (role, need)


# Each role's statements by Sid and their actions, exactly: a statement one job needs and another role carries
# (as the CDC role once carried the full-load role's whole policy) fails here.
_SHARED_STATEMENTS = {
    "ReadArtifacts": ["s3:GetObject", "s3:ListBucket"],
    "WriteSilver": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"],
    "IcebergCatalog": ["glue:GetDatabase", "glue:GetTable", "glue:GetTables", "glue:CreateTable", "glue:UpdateTable",
                       "glue:DeleteTable", "glue:GetPartitions"],
    "JobLogs": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:AssociateKmsKey"],
    "SecurityConfigurationKey": ["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey"],
    "JobMetrics": ["cloudwatch:PutMetricData"],
}  # fmt: skip
EXPECTED_STATEMENTS = {
    "FullLoadJobRole": {
        **_SHARED_STATEMENTS,
        "ReadBronze": ["s3:GetObject", "s3:ListBucket"],
        "SourceConnection": ["glue:GetConnection"],
        "SourceSecret": ["secretsmanager:GetSecretValue"],
        "WriteTableConfiguration": ["s3:PutObject"],
        "StartVerifyAfterReload": ["glue:StartJobRun"],
        "ConnectionNetwork": ["ec2:DescribeVpcEndpoints", "ec2:DescribeRouteTables", "ec2:DescribeSubnets",
                              "ec2:DescribeSecurityGroups", "ec2:DescribeNetworkInterfaces",
                              "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:CreateTags"],
    },
    "CdcJobRole": {
        **_SHARED_STATEMENTS,
        "ReadBronze": ["s3:GetObject", "s3:ListBucket"],
        "FollowFileQueue": ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
        "FileQueueKey": ["kms:Decrypt"],
        "PublishAlerts": ["sns:Publish"],
        "AlertTopicKey": ["kms:Decrypt", "kms:GenerateDataKey"],
        "WriteReloadRequest": ["s3:PutObject"],
        "WriteFailureEpisodes": ["s3:PutObject"],
        "ReplicationTableStates": ["dms:DescribeTableStatistics"],
        "RecordSilentTables": ["s3:PutObject"],
    },
    "MaintenanceJobRole": _SHARED_STATEMENTS,
    "GoldJobRole": _SHARED_STATEMENTS,
    "VerifyJobRole": {
        "ReadArtifacts": ["s3:GetObject", "s3:ListBucket"],
        "ReadSilver": ["s3:GetObject", "s3:ListBucket"],
        "ListBronze": ["s3:ListBucket"],
        "WriteVerifyResults": ["s3:PutObject", "s3:DeleteObject"],
        "ReadCatalog": ["glue:GetDatabase", "glue:GetTable", "glue:GetTables", "glue:GetPartitions"],
        "WriteVerifyTable": ["glue:CreateTable", "glue:UpdateTable"],
        "SourceConnection": ["glue:GetConnection"],
        "SourceSecret": ["secretsmanager:GetSecretValue"],
        "JobLogs": _SHARED_STATEMENTS["JobLogs"],
        "SecurityConfigurationKey": _SHARED_STATEMENTS["SecurityConfigurationKey"],
        "JobMetrics": ["cloudwatch:PutMetricData"],
        "ConnectionNetwork": ["ec2:DescribeVpcEndpoints", "ec2:DescribeRouteTables", "ec2:DescribeSubnets",
                              "ec2:DescribeSecurityGroups", "ec2:DescribeNetworkInterfaces",
                              "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:CreateTags"],
    },
}  # fmt: skip


@pytest.mark.parametrize("role", sorted(EXPECTED_STATEMENTS))
def test_each_glue_job_has_a_role_of_its_own_with_exactly_what_it_calls(role: str) -> None:
    statements = {s["Sid"]: _listed(s["Action"]) for s in role_statements(role)}
    assert statements == EXPECTED_STATEMENTS[role]
    jobs = {name: r["Properties"]["Role"] for name, r in RESOURCES.items() if r["Type"] == "AWS::Glue::Job"}
    assert sorted(jobs.values(), key=str) == sorted(({"GetAtt": f"{r}.Arn"} for r in JOB_ROLES.values()), key=str)


def test_only_the_jobs_that_publish_table_metrics_may_use_their_namespace() -> None:
    for role in EXPECTED_STATEMENTS:
        [metrics] = [s for s in role_statements(role) if s["Sid"] == "JobMetrics"]
        namespaces = metrics["Condition"]["StringEquals"]["cloudwatch:namespace"]
        publishers = ("FullLoadJobRole", "CdcJobRole", "VerifyJobRole")
        expected = ["Glue", {"Ref": "MetricsNamespace"}] if role in publishers else "Glue"
        assert namespaces == expected, role


def test_the_verify_job_writes_its_results_table_and_nothing_else_of_silver() -> None:
    # Every write the verify role allows (S3 objects, catalog tables) names the results table: the rest of silver,
    # bronze and the configuration are read-only to it (IAM needs the catalog and database ARNs beside the table's).
    writes = ("s3:PutObject", "s3:DeleteObject", "glue:CreateTable", "glue:UpdateTable", "glue:DeleteTable")
    for statement in role_statements("VerifyJobRole"):
        actions = _listed(statement["Action"])
        if not any(fnmatch.fnmatchcase(w, str(a)) for w in writes for a in actions):
            continue
        resources = [json.dumps(r) for r in _listed(statement["Resource"])]
        tables_or_objects = [r for r in resources if ':catalog"' not in r and "database/" not in r]
        assert tables_or_objects and all("cdclake_verify" in r for r in tables_or_objects), statement["Sid"]
    # bronze: listed (the files not applied yet), never read
    assert missing("VerifyJobRole", [Need("s3:GetObject", "BronzeBucket", "x")]) != []
    [listing] = [s for s in role_statements("VerifyJobRole") if s["Sid"] == "ListBronze"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": {"Sub": "${BronzePrefix}/*"}}}


def test_the_role_check_finds_a_role_that_lacks_a_call() -> None:
    # The check itself: the maintenance role may not read bronze, so a call declared for it would be missing.
    need = Need("s3:ListBucket", "BronzeBucket", "x")
    assert missing("MaintenanceJobRole", [need]) == [need]
    assert missing("CdcJobRole", [need]) == []


# ---------------------------------------------------------------------------------------- state machine


def task_needs() -> list[Need]:
    """What each Task state of the definition needs, on the logical resource its parameters name."""
    definition = json.loads(DEFINITION.read_text(encoding="utf-8"))
    substitutions = RESOURCES["PipelineStateMachine"]["Properties"]["DefinitionSubstitutions"]

    def target(parameter: str) -> str:
        placeholder = re.fullmatch(r"\$\{(\w+)\}", parameter)
        assert placeholder, parameter
        value = substitutions[placeholder.group(1)]
        if "Ref" in value:
            return str(value["Ref"])
        if "GetAtt" in value:
            return str(value["GetAtt"].split(".")[0])
        return "EnvironmentName"  # an ARN built from the names (the state machine's own)

    needs = []

    def walk(states: dict[str, Any]) -> None:
        for name, state in states.items():
            for nested in (state.get("Iterator"), state.get("ItemProcessor")):
                if nested:
                    walk(nested["States"])
            if state["Type"] != "Task":
                continue
            resource = state["Resource"].split(":::", 1)[1]
            parameters = state.get("Parameters", {})
            where = f"state {name}"
            if resource.startswith("aws-sdk:"):
                _, service, api = resource.split(":")
                action = iam_action(service, api[:1].upper() + api[1:])
                named = ("QueueUrl", "StateMachineArn", "JobName")
                on = next((target(v) for k, v in parameters.items() if k in named), "*")
                needs.append(Need(action, on, where))
            elif resource == "lambda:invoke":
                needs.append(Need("lambda:InvokeFunction", target(parameters["FunctionName"]), where))
            elif resource == "glue:startJobRun.sync":
                job = target(parameters["JobName"])
                needs.extend(
                    Need(f"glue:{a}", job, where) for a in ("StartJobRun", "GetJobRun", "GetJobRuns", "BatchStopJobRun")
                )
            elif resource == "sns:publish":
                topic = target(parameters["TopicArn"])
                needs.append(Need("sns:Publish", topic, where))
                needs.extend(kms_needs("sns:Publish", topic, where))
            elif resource == "states:startExecution":
                needs.append(Need("states:StartExecution", target(parameters["StateMachineArn"]), where))
            else:
                raise AssertionError(f"{where}: a service integration this check does not know: {resource}")

    walk(definition["States"])
    return needs


def test_every_task_of_the_state_machine_is_allowed_by_its_role() -> None:
    needs = task_needs()
    actions = {n.action for n in needs}
    assert {"lambda:InvokeFunction", "glue:StartJobRun", "states:StartExecution", "states:ListExecutions",
            "dms:DescribeReplicationTasks", "sns:Publish", "kms:GenerateDataKey"} <= actions  # fmt: skip
    assert not any(a.startswith("sqs:") for a in actions)  # the CDC job and CheckWork reach the queue, not the ASL
    assert missing("PipelineStateMachine", needs) == []
