"""A redeploy after `make destroy` reads and writes the warehouse the retained database points at.

The retained Glue database keeps LocationUri = the old silver bucket, and Iceberg's GlueCatalog puts a new table
under its database's location; the tables' metadata holds absolute paths, so copying the warehouse would not
help. The new stack therefore uses the retained silver bucket (ExistingSilverBucket): `make deploy`'s preflight
reads it from the database, and a plain `sam deploy` is stopped by the DeployGuard custom resource with one
sentence that names what to pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from conftest import REGION, FakeLambdaContext, load_handler_module
from moto import mock_aws
from test_deploy import a_configuration, a_wheel, preflight
from test_static import template

RESOURCES = template()["Resources"]
GUARD = load_handler_module("deploy_guard")


def retained(glue: Any, bucket: str = "cdclake-dev-silverbucket-1a2b3c") -> None:
    """The databases `make destroy` kept, as the deleted stack created them."""
    glue.create_database(DatabaseInput={"Name": "cdclake_dev", "LocationUri": f"s3://{bucket}/warehouse"})
    glue.create_database(DatabaseInput={"Name": "cdclake_dev_gold", "LocationUri": f"s3://{bucket}/gold"})


def test_the_preflight_reuses_the_silver_bucket_the_retained_database_points_at(tmp_path: Path) -> None:
    a_wheel(tmp_path)
    config = a_configuration(tmp_path)
    with mock_aws():
        glue = boto3.client("glue", region_name=REGION)
        # GIVEN no database: a first deploy creates its bucket
        assert "ExistingSilverBucket=" in preflight(tmp_path, config)
        # GIVEN the databases a destroyed stack kept WHEN the next deploy is prepared THEN it uses their bucket
        retained(glue)
        overrides = preflight(tmp_path, config)
        assert "ExistingSilverBucket=cdclake-dev-silverbucket-1a2b3c" in overrides
        assert "ExistingSilverDatabase=true" in overrides


def test_with_an_existing_silver_bucket_every_use_names_it_and_none_is_created() -> None:
    condition = template()["Conditions"]["CreateSilverBucket"]
    assert condition == {"Equals": [{"Ref": "ExistingSilverBucket"}, ""]}
    assert RESOURCES["SilverBucket"]["Condition"] == "CreateSilverBucket"
    assert RESOURCES["SilverBucket"]["DeletionPolicy"] == "Retain"
    chosen = {"If": ["CreateSilverBucket", {"Ref": "SilverBucket"}, {"Ref": "ExistingSilverBucket"}]}
    text = json.dumps({k: v for k, v in RESOURCES.items() if k != "SilverBucket"})
    # no bare reference to the conditional bucket survives (it would fail when the bucket is not created)
    assert '"SilverBucket.Arn"' not in text and "${SilverBucket" not in text
    assert json.dumps({"Ref": "SilverBucket"}) not in text.replace(json.dumps(chosen), "")
    # the warehouse, the database location, the role and the outputs all follow the choice
    for job in ("FullLoadJob", "CdcJob", "MaintenanceJob", "GoldJob"):
        arguments = RESOURCES[job]["Properties"]["DefaultArguments"]
        assert arguments["--warehouse"] == {"Sub": ["s3://${Bucket}/warehouse", {"Bucket": chosen}]}, job
        assert "warehouse=s3://${Bucket}/warehouse" in arguments["--conf"]["Sub"][0], job
    database = RESOURCES["GlueDatabase"]["Properties"]["DatabaseInput"]
    assert database["LocationUri"] == {"Sub": ["s3://${Bucket}/warehouse", {"Bucket": chosen}]}
    assert template()["Outputs"]["SilverBucketName"]["Value"] == chosen


def guard_event(request: str = "Create", **properties: str) -> dict[str, Any]:
    defaults = {"SilverDatabase": "cdclake_dev", "GoldDatabase": "cdclake_dev_gold", "ExistingSilverBucket": "",
                "ExistingSilverDatabase": "false", "ExistingGoldDatabase": "false"}  # fmt: skip
    return {"RequestType": request, "ResponseURL": "https://cloudformation-custom-resource-response.example/x",
            "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/cdclake-dev/1", "RequestId": "r",
            "LogicalResourceId": "DeployGuard", "ResourceProperties": {**defaults, **properties}}  # fmt: skip


@pytest.fixture
def responses(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """What the guard answered CloudFormation (the PUT to the response URL is not sent)."""
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(GUARD, "respond", lambda event, status, reason: sent.append((status, reason)))
    return sent


def test_a_plain_sam_deploy_after_destroy_stops_with_one_sentence_naming_what_to_pass(
    responses: list[tuple[str, str]],
) -> None:
    with mock_aws():
        retained(boto3.client("glue", region_name=REGION))
        # WHEN sam deploy creates the stack with the defaults (what the README's users run)
        GUARD.handler(guard_event(), FakeLambdaContext())
        # AND when only the databases are passed, not the bucket their tables live in
        GUARD.handler(guard_event(ExistingSilverDatabase="true", ExistingGoldDatabase="true"), FakeLambdaContext())
        # AND with everything make deploy would pass
        GUARD.handler(
            guard_event(ExistingSilverDatabase="true", ExistingGoldDatabase="true",
                        ExistingSilverBucket="cdclake-dev-silverbucket-1a2b3c"),
            FakeLambdaContext(),
        )  # fmt: skip
    [(status, reason), (status2, reason2), (status3, _)] = responses
    assert status == "FAILED" and reason.count(". ") == 0 and reason.endswith(".")
    assert (
        "--parameter-overrides ExistingSilverDatabase=true ExistingGoldDatabase=true "
        "ExistingSilverBucket=cdclake-dev-silverbucket-1a2b3c " in reason
    )
    assert status2 == "FAILED"
    assert "--parameter-overrides ExistingSilverBucket=cdclake-dev-silverbucket-1a2b3c" in reason2
    assert status3 == "SUCCESS"


def test_the_guard_lets_a_first_deploy_an_update_and_a_delete_through(responses: list[tuple[str, str]]) -> None:
    with mock_aws():
        GUARD.handler(guard_event(), FakeLambdaContext())  # no database yet
        retained(boto3.client("glue", region_name=REGION))
        GUARD.handler(guard_event("Update"), FakeLambdaContext())  # the stack's own databases
        GUARD.handler(guard_event("Delete"), FakeLambdaContext())
    assert [status for status, _ in responses] == ["SUCCESS", "SUCCESS", "SUCCESS"]


def test_nothing_the_stack_keeps_is_created_before_the_guard_answered() -> None:
    assert RESOURCES["DeployGuard"]["Properties"]["ServiceToken"] == {"GetAtt": "DeployGuardFunction.Arn"}
    for logical in ("AccessLogBucket", "GlueDatabase", "GoldDatabase"):
        assert RESOURCES[logical]["DependsOn"] == "DeployGuard", logical
    # every other retained bucket waits for the access-log bucket's policy, which waits for that bucket
    for logical in ("BronzeBucket", "SilverBucket", "ArtifactsBucket"):
        assert RESOURCES[logical]["DependsOn"] == "AccessLogBucketPolicy", logical
