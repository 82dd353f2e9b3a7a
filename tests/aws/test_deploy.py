"""The deploy path: samconfig.toml, `make deploy` / `make destroy` (dry runs) and scripts/stack_artifacts.py (moto)."""

from __future__ import annotations

import inspect
import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import boto3
import pytest
from conftest import REGION, ROOT
from moto import mock_aws
from test_static import SAM, needs, template

from file_modules import module_at

SAMCONFIG = tomllib.loads((ROOT / "samconfig.toml").read_text())
ENVIRONMENTS = [name for name in SAMCONFIG if name != "version"]


stack_artifacts = module_at(ROOT / "scripts" / "stack_artifacts.py", "stack_artifacts")


def make_dry_run(*arguments: str) -> list[str]:
    # --no-print-directory: under `make test` this make is nested and would announce its directory.
    command = ["make", "-n", "--no-print-directory", *arguments]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    return run.stdout.replace("\\\n", " ").splitlines()


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_every_sam_command_reads_the_region_and_stack_from_global_parameters(environment: str) -> None:
    sections = SAMCONFIG[environment]
    assert set(sections["global"]["parameters"]) >= {"region", "stack_name"}
    # Nowhere else: a per-command region is how `sam list stack-outputs` ended up without one.
    for command, section in sections.items():
        if command != "global":
            assert "region" not in section["parameters"], command


def test_environment_names_in_samconfig_are_valid_parameter_values() -> None:
    pattern = template()["Parameters"]["EnvironmentName"]["AllowedPattern"]
    for environment in ENVIRONMENTS:
        overrides = dict(
            kv.split("=", 1) for kv in SAMCONFIG[environment]["deploy"]["parameters"]["parameter_overrides"].split()
        )
        assert re.fullmatch(pattern, overrides["EnvironmentName"])


def deploy_overrides(lines: list[str]) -> list[str]:
    [deploy] = [line for line in lines if " deploy --config-env" in line]
    tokens = shlex.split(deploy)
    return tokens[tokens.index("--parameter-overrides") + 1 :]


@pytest.mark.stack
def test_make_deploy_passes_the_environments_parameters_and_then_params() -> None:
    needs(SAM)  # the Makefile reads samconfig.toml with the SAM CLI's own Python
    lines = make_dry_run("deploy", "SAM_ENV=prod", "PARAMS=AlertEmail=ops@example.com CdcWorkers=6")
    overrides = deploy_overrides(lines)
    assert overrides[:6] == SAMCONFIG["prod"]["deploy"]["parameters"]["parameter_overrides"].split()
    assert overrides[6:8] == ["$(cat", "build/deploy-overrides.txt)"]  # the preflight's (wheel, databases)
    assert overrides[8:] == ["AlertEmail=ops@example.com", "CdcWorkers=6"]
    # and the built template's directory has no samconfig.toml: the project's is named explicitly
    [deploy] = [shlex.split(line) for line in lines if " deploy --config-env" in line]
    assert deploy[deploy.index("--config-file") + 1] == str(ROOT / "samconfig.toml")


@pytest.mark.stack
def test_sam_merges_them_with_the_later_value_winning() -> None:
    needs(SAM)
    overrides = deploy_overrides(make_dry_run("deploy", "SAM_ENV=prod", "PARAMS=CdcWorkers=6 AlertEmail=a@b.example"))
    # what the preflight would print, in place of the shell's $(cat build/deploy-overrides.txt)
    at = overrides.index("$(cat")
    overrides[at : at + 2] = ["LibraryWheelKey=glue/cdclake-0.2.0-py3-none-any.whl", "ExistingSilverDatabase=true"]
    code = (
        "import json, sys; from samcli.cli.types import CfnParameterOverridesType as T; "
        "print(json.dumps(T().convert(sys.argv[1:], None, None)))"
    )
    run = subprocess.run(
        [str(SAM.parent / "python"), "-c", code, *overrides], capture_output=True, text=True, check=True
    )
    merged = json.loads(run.stdout)
    assert merged["EnvironmentName"] == "prod"  # the prod stack keeps prod names
    assert merged["FullLoadWorkers"] == "10"
    assert merged["CdcWorkers"] == "6"  # PARAMS wins over samconfig's 4
    assert merged["AlertEmail"] == "a@b.example"
    assert merged["ExistingSilverDatabase"] == "true"


def test_make_deploy_needs_no_setup_and_uploads_the_config() -> None:
    lines = make_dry_run("deploy", "CONFIG=my/cdclake.yaml")
    text = "\n".join(lines)
    assert "install-system-deps" not in text and "apt-get" not in text
    assert ".venv/bin/" not in text  # the project environment (Spark, Java) is not needed, only .venv/tools/sam
    assert lines[-1].endswith("--outputs build/stack-outputs.json --config my/cdclake.yaml")
    assert "scripts/stack_artifacts.py upload --region" in lines[-1]
    assert any(" -m pip wheel " in line for line in lines)


def test_make_destroy_stops_the_pipeline_deletes_the_stack_then_the_artifacts_bucket() -> None:
    steps = ("stop-executions", " delete --config-env prod --no-prompts", "delete-bucket", "retained")
    lines = make_dry_run("destroy", "SAM_ENV=prod")
    order = [step for line in lines for step in steps if step in line]
    assert order == list(steps)
    [delete_bucket] = [line for line in lines if "delete-bucket" in line]
    assert delete_bucket.endswith("--output-key ArtifactsBucketName")


# --------------------------------------------------------------------------------- stack_artifacts (moto)


def outputs_file(tmp_path: Path, outputs: dict[str, str]) -> Path:
    path = tmp_path / "stack-outputs.json"
    path.write_text(json.dumps([{"OutputKey": k, "OutputValue": v} for k, v in outputs.items()]))
    return path


def test_upload_writes_the_entry_points_the_wheel_and_the_config(tmp_path: Path) -> None:
    (tmp_path / "glue" / "jobs").mkdir(parents=True)
    (tmp_path / "dist").mkdir()
    for name in ("cdc.py", "full_load.py", "maintain.py"):
        (tmp_path / "glue" / "jobs" / name).write_text("# job")
    (tmp_path / "dist" / "cdclake-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "dist" / "cdclake-0.1.0.gluewheels.zip").write_bytes(b"zip of wheels")
    config = a_configuration(tmp_path)
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="artifacts")
        outputs = stack_artifacts.read_outputs(
            outputs_file(tmp_path, {"ArtifactsBucketName": "artifacts", "TableConfigKey": "config/cdclake.yaml"})
        )
        stack_artifacts.upload(s3, outputs, tmp_path, config)
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="artifacts")["Contents"])
        body = s3.get_object(Bucket="artifacts", Key="config/cdclake.yaml")["Body"].read()
    assert keys == [
        "config/cdclake.yaml", "glue/cdc.py", "glue/cdclake-0.1.0-py3-none-any.whl",
        "glue/cdclake-0.1.0.gluewheels.zip", "glue/full_load.py", "glue/maintain.py",
    ]  # fmt: skip
    assert body == config.read_bytes()


def test_upload_without_a_wheel_or_with_a_missing_config_says_what_to_do(tmp_path: Path) -> None:
    outputs = {"ArtifactsBucketName": "artifacts", "TableConfigKey": "config/cdclake.yaml"}
    with pytest.raises(stack_artifacts.DeployError, match="make deploy-wheel"):
        stack_artifacts.upload(None, outputs, tmp_path, None)
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "cdclake-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "dist" / "cdclake-0.1.0.gluewheels.zip").write_bytes(b"zip of wheels")
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="artifacts")
        with pytest.raises(stack_artifacts.DeployError, match=r"CONFIG=.*no such file"):
            stack_artifacts.upload(s3, outputs, tmp_path, tmp_path / "missing.yaml")


def test_a_versioned_bucket_is_emptied_of_every_version_and_deleted() -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="artifacts")
        s3.put_bucket_versioning(Bucket="artifacts", VersioningConfiguration={"Status": "Enabled"})
        for body in (b"1", b"2"):
            s3.put_object(Bucket="artifacts", Key="glue/cdc.py", Body=body)
        s3.delete_object(Bucket="artifacts", Key="glue/cdc.py")  # a delete marker on top of two versions
        removed = stack_artifacts.empty_and_delete_bucket(s3, "artifacts")
        assert removed == 3
        assert "artifacts" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def a_running_pipeline(sfn: Any) -> tuple[str, str]:
    """A state machine named as the stack's, with an execution that waits ten minutes: (its ARN, the execution's)."""
    arn: str = sfn.create_state_machine(
        name="cdclake-dev-pipeline",
        definition=json.dumps({"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 600, "End": True}}}),
        roleArn="arn:aws:iam::123456789012:role/x",
    )["stateMachineArn"]
    return arn, sfn.start_execution(stateMachineArn=arn)["executionArn"]


def test_stop_executions_stops_the_running_pipeline() -> None:
    with mock_aws():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn, running = a_running_pipeline(sfn)
        assert stack_artifacts.stop_executions(sfn, arn) == [running]
        assert sfn.describe_execution(executionArn=running)["status"] == "ABORTED"


def test_retained_lists_what_the_stack_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = outputs_file(tmp_path, {"SilverBucketName": "silver-1", "GlueDatabaseName": "cdclake_dev", "X": "y"})
    assert stack_artifacts.main(["retained", "--outputs", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "kept: silver-1 (the Iceberg warehouse)",
        "kept: cdclake_dev (the silver tables' Glue database)",
    ]


# ------------------------------------------------------------------------------------ sam local invoke


def test_env_json_points_every_function_at_a_scratch_queue_and_sets_what_it_reads() -> None:
    env = json.loads((ROOT / "events" / "env.json").read_text())
    resources = template()["Resources"]
    functions = {n for n, r in resources.items() if r["Type"] == "AWS::Serverless::Function"}
    assert set(env) == functions
    for name, variables in env.items():
        assert "scratch" in variables["QUEUE_URL"]
        assert not variables["QUEUE_URL"].endswith("-files.fifo")  # never the stack's queue
        declared = set(resources[name]["Properties"].get("Environment", {}).get("Variables", {}))
        assert declared <= set(variables), name


# ----------------------------------------------------------- preflight (configuration, databases, wheel)


def a_wheel(root: Path, name: str = "cdclake-0.1.0-py3-none-any.whl") -> None:
    (root / "dist").mkdir(exist_ok=True)
    (root / "dist" / name).write_bytes(b"wheel")
    (root / "dist" / stack_artifacts.glue_wheels_name(root / "dist" / name)).write_bytes(b"zip of wheels")


def a_configuration(root: Path) -> Path:
    """A configuration file in ``root`` (what it says does not matter to the preflight); its path."""
    config = root / "cdclake.yaml"
    config.write_text("silver: {database: x}\n")
    return config


def deployed_stack(stack_name: str = "cdclake-dev") -> None:
    """A stack with the outputs the preflight reads (moto's CloudFormation, a stand-in for the real one)."""
    body = {
        "Resources": {"ArtifactsBucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "artifacts"}}},
        "Outputs": {
            "ArtifactsBucketName": {"Value": {"Ref": "ArtifactsBucket"}},
            "TableConfigKey": {"Value": "config/cdclake.yaml"},
        },
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(StackName=stack_name, TemplateBody=json.dumps(body))


def preflight(root: Path, config: Path | None, overrides: tuple[str, ...] = ("EnvironmentName=dev",)) -> list[str]:
    result: list[str] = stack_artifacts.preflight(
        boto3.client("cloudformation", region_name=REGION), boto3.client("glue", region_name=REGION),
        boto3.client("s3", region_name=REGION), "cdclake-dev", list(overrides), root, config,
    )  # fmt: skip
    return result


def test_a_first_deploy_without_a_configuration_is_refused_before_anything_is_deployed(tmp_path: Path) -> None:
    a_wheel(tmp_path)
    with mock_aws(), pytest.raises(stack_artifacts.DeployError, match=r"first deploy needs .*CONFIG="):
        preflight(tmp_path, None)


def test_a_deploy_without_a_configuration_is_refused_while_the_stack_has_none(tmp_path: Path) -> None:
    a_wheel(tmp_path)
    with mock_aws():
        deployed_stack()
        with pytest.raises(stack_artifacts.DeployError, match=r"s3://artifacts/config/cdclake.yaml .*CONFIG="):
            preflight(tmp_path, None)
        # once the stack's bucket holds a configuration, CONFIG may be left out (the one there is kept)
        boto3.client("s3", region_name=REGION).put_object(Bucket="artifacts", Key="config/cdclake.yaml", Body=b"x")
        assert "LibraryWheelKey=glue/cdclake-0.1.0-py3-none-any.whl" in preflight(tmp_path, None)
        with pytest.raises(stack_artifacts.DeployError, match=r"CONFIG=.*no such file"):
            preflight(tmp_path, tmp_path / "missing.yaml")


def test_a_redeploy_after_destroy_adopts_the_retained_glue_databases(tmp_path: Path) -> None:
    # GIVEN the databases a destroyed stack kept (DeletionPolicy Retain), and no stack
    a_wheel(tmp_path)
    config = a_configuration(tmp_path)
    with mock_aws():
        glue = boto3.client("glue", region_name=REGION)
        for name in ("cdclake_eu_prod", "cdclake_eu_prod_gold"):
            glue.create_database(DatabaseInput={"Name": name})
        # WHEN the next deploy is prepared THEN the stack is told to use them instead of creating them again
        overrides = preflight(tmp_path, config, ("EnvironmentName=dev", "EnvironmentName=eu_prod"))
        assert "ExistingSilverDatabase=true" in overrides and "ExistingGoldDatabase=true" in overrides
        # AND another environment's databases are not taken for this one's
        overrides = preflight(tmp_path, config, ("EnvironmentName=dev",))
        assert "ExistingSilverDatabase=false" in overrides and "ExistingGoldDatabase=false" in overrides


def test_a_database_the_stack_itself_created_is_kept_in_the_stack() -> None:
    owned = {"GlueDatabase", "GoldDatabase"}
    existing = {"cdclake_dev", "cdclake_dev_gold"}
    assert stack_artifacts.database_overrides(existing, owned, "dev") == [
        "ExistingSilverDatabase=false", "ExistingGoldDatabase=false",
    ]  # fmt: skip
    assert stack_artifacts.database_overrides(existing, {"GlueDatabase"}, "dev") == [
        "ExistingSilverDatabase=false", "ExistingGoldDatabase=true",
    ]  # fmt: skip


def test_with_existing_databases_the_stack_creates_none_and_names_them_everywhere() -> None:
    resources, conditions = template()["Resources"], template()["Conditions"]
    for logical, parameter, condition, name in (
        ("GlueDatabase", "ExistingSilverDatabase", "CreateSilverDatabase", "cdclake_${EnvironmentName}"),
        ("GoldDatabase", "ExistingGoldDatabase", "CreateGoldDatabase", "cdclake_${EnvironmentName}_gold"),
    ):
        assert template()["Parameters"][parameter]["Default"] == "false"
        assert conditions[condition] == {"Equals": [{"Ref": parameter}, "false"]}
        assert resources[logical]["Condition"] == condition
        # every other use of the database goes through the condition (a Ref alone would fail without the resource)
        chosen = {"If": [condition, {"Ref": logical}, {"Sub": name}]}
        text = json.dumps({k: v for k, v in resources.items() if k != logical})
        assert json.dumps({"Ref": logical}) not in text.replace(json.dumps(chosen), "")
        assert json.dumps(template()["Outputs"]).count(json.dumps(chosen)) == 1


def test_the_wheel_is_uploaded_under_the_key_the_stack_was_given(tmp_path: Path) -> None:
    a_wheel(tmp_path, "cdclake-0.2.0-py3-none-any.whl")
    outputs = {"ArtifactsBucketName": "artifacts", "TableConfigKey": "config/cdclake.yaml",
               "LibraryWheelKey": "glue/cdclake-0.1.0-py3-none-any.whl"}  # fmt: skip
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="artifacts")
        with pytest.raises(stack_artifacts.DeployError, match=r"LibraryWheelKey=glue/cdclake-0.1.0.*0.2.0"):
            stack_artifacts.upload(s3, outputs, tmp_path, None)
        outputs["LibraryWheelKey"] = "glue/cdclake-0.2.0-py3-none-any.whl"
        assert "s3://artifacts/glue/cdclake-0.2.0-py3-none-any.whl" in stack_artifacts.upload(
            s3, outputs, tmp_path, None
        )
    assert template()["Outputs"]["LibraryWheelKey"]["Value"] == {"Ref": "LibraryWheelKey"}


def test_the_preflight_names_the_one_built_wheel_and_refuses_several(tmp_path: Path) -> None:
    with pytest.raises(stack_artifacts.DeployError, match="make deploy-wheel"):
        stack_artifacts.wheel_override(tmp_path)
    a_wheel(tmp_path)
    assert stack_artifacts.wheel_override(tmp_path) == "LibraryWheelKey=glue/cdclake-0.1.0-py3-none-any.whl"
    a_wheel(tmp_path, "cdclake-0.2.0-py3-none-any.whl")
    with pytest.raises(stack_artifacts.DeployError, match="2 wheels"):
        stack_artifacts.wheel_override(tmp_path)


@pytest.mark.stack
def test_make_deploy_runs_the_preflight_before_the_stack_and_passes_its_overrides() -> None:
    needs(SAM)
    lines = make_dry_run("deploy", "CONFIG=cdclake.yaml")
    [preflight_at] = [i for i, line in enumerate(lines) if "stack_artifacts.py preflight" in line]
    [deploy_at] = [i for i, line in enumerate(lines) if " deploy --config-env" in line]
    assert preflight_at < deploy_at
    assert "--config cdclake.yaml" in lines[preflight_at]
    assert any("rm -f dist/cdclake-*.whl" in line for line in lines[:preflight_at])


# ------------------------------------------------------------------------------------- the stack's region


@pytest.mark.stack
@pytest.mark.parametrize(("target", "environment"), [("deploy", "default"), ("destroy", "prod")])
def test_every_step_that_calls_aws_is_given_the_region_of_samconfig(target: str, environment: str) -> None:
    needs(SAM)  # the Makefile reads samconfig.toml with the SAM CLI's own Python
    region = SAMCONFIG[environment]["global"]["parameters"]["region"]
    lines = make_dry_run(target, f"SAM_ENV={environment}", "CONFIG=cdclake.yaml")
    steps = [shlex.split(line) for line in lines if "scripts/stack_artifacts.py" in line]
    calling_aws = [s for s in steps if s[s.index("scripts/stack_artifacts.py") + 1] not in ("retained", "glue-wheels")]
    assert len(calling_aws) == 2  # preflight and upload, or stop-executions and delete-bucket
    for step in calling_aws:
        assert step[step.index("--region") + 1] == region, step


def test_the_region_given_wins_over_the_shells_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a running pipeline in us-east-1 and a shell whose default region is another one
    with mock_aws():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn, running = a_running_pipeline(sfn)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
        monkeypatch.setenv("AWS_REGION", "eu-west-1")
        path = outputs_file(tmp_path, {"StateMachineArn": arn})
        # WHEN make destroy stops it, THEN it is found in the stack's region and stopped
        assert stack_artifacts.main(["stop-executions", "--region", REGION, "--outputs", str(path)]) == 0
        assert sfn.describe_execution(executionArn=running)["status"] == "ABORTED"
        # AND without a region the step refuses to guess (one sentence, no traceback)
        assert stack_artifacts.main(["stop-executions", "--outputs", str(path)]) == 1


# ------------------------------------------------- a first deploy whose full-load job writes the configuration


def test_a_first_deploy_with_a_source_secret_needs_no_configuration(tmp_path: Path) -> None:
    # GIVEN no stack, no CONFIG, and the source credentials: the full-load job writes the configuration from the
    # source catalog (docs/deploy.md, "The source catalog in the full-load job")
    a_wheel(tmp_path)
    with mock_aws():
        # WHEN the deploy is prepared THEN it goes on
        overrides = preflight(tmp_path, None, ("EnvironmentName=dev", "SourceSecretId=cdclake/source"))
        assert "LibraryWheelKey=glue/cdclake-0.1.0-py3-none-any.whl" in overrides
        # AND an empty value given later (the last one wins) is no secret
        with pytest.raises(stack_artifacts.DeployError, match=r"first deploy needs .*CONFIG=.*SourceSecretId"):
            preflight(tmp_path, None, ("SourceSecretId=cdclake/source", "SourceSecretId="))


def test_a_redeploy_keeps_the_stacks_source_secret_when_not_given_again(tmp_path: Path) -> None:
    a_wheel(tmp_path)
    with mock_aws():
        body = {
            "Parameters": {"SourceSecretId": {"Type": "String", "Default": ""}},
            "Resources": {"ArtifactsBucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "artifacts"}}},
            "Outputs": {
                "ArtifactsBucketName": {"Value": {"Ref": "ArtifactsBucket"}},
                "TableConfigKey": {"Value": "config/cdclake.yaml"},
            },
        }
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName="cdclake-dev", TemplateBody=json.dumps(body),
            Parameters=[{"ParameterKey": "SourceSecretId", "ParameterValue": "cdclake/source"}],
        )  # fmt: skip
        # sam deploy keeps a deployed stack's value for a parameter it is not given: the job still writes it
        assert preflight(tmp_path, None)[0].startswith("LibraryWheelKey=")


# ----------------------------------------------------------------------- what only a real account can show


def rule_datapoint(cloudwatch: Any, name: str, value: float, rule: str = "cdclake-dev-new-files") -> None:
    """What EventBridge publishes for the rule (moto's EventBridge publishes no metric)."""
    cloudwatch.put_metric_data(
        Namespace="AWS/Events",
        MetricData=[{"MetricName": name, "Dimensions": [{"Name": "RuleName", "Value": rule}], "Value": value}],
    )


def test_verify_deploy_proves_the_delivery_from_the_rules_metrics_and_never_reads_the_queue(tmp_path: Path) -> None:
    with mock_aws():
        s3, cloudwatch = (boto3.client(s, region_name=REGION) for s in ("s3", "cloudwatch"))
        s3.create_bucket(Bucket="bronze")
        cloudwatch.put_metric_alarm(
            AlarmName="delivery", Namespace="AWS/Events", MetricName="FailedInvocations", Statistic="Sum",
            Period=300, EvaluationPeriods=1, Threshold=1, ComparisonOperator="GreaterThanOrEqualToThreshold",
        )  # fmt: skip
        outputs = {"BronzeBucketName": "bronze", "BronzePrefix": "dms", "NewFileRuleName": "cdclake-dev-new-files",
                   "NewFileRuleDeliveryAlarmName": "delivery"}  # fmt: skip
        key = stack_artifacts.VERIFY_KEY.format(prefix="dms")
        assert re.fullmatch(r"dms/[^/]+/[^/]+/2\d{7}-\d+\.csv", key)  # a CDC name: the rule's pattern queues it
        # GIVEN no event matched (moto's S3 sends none): verify says where to look, after its wait
        with pytest.raises(stack_artifacts.DeployError, match="no MatchedEvents and Invocations for the new-file"):
            stack_artifacts.verify(s3, cloudwatch, outputs, wait_seconds=0.1, poll_seconds=0.05)
        assert s3.get_object(Bucket="bronze", Key=key)["Body"].read() == b"cdclake make verify-deploy\n"
        # GIVEN the rule matched the test file and invoked its target without a failure
        rule_datapoint(cloudwatch, "MatchedEvents", 1)
        rule_datapoint(cloudwatch, "Invocations", 1)
        # WHEN verify runs THEN it proves the delivery and sets the alarm, whose action reaches the alert topic
        lines = stack_artifacts.verify(s3, cloudwatch, outputs, wait_seconds=5, poll_seconds=0.05)
        assert lines[1].startswith("the new-file rule matched and delivered to the file queue without a failure")
        [alarm] = cloudwatch.describe_alarms(AlarmNames=["delivery"])["MetricAlarms"]
        assert alarm["StateValue"] == "ALARM"
        # GIVEN deliveries that are retried (the queue or its key refuses EventBridge) THEN verify fails at once
        rule_datapoint(cloudwatch, "RetryInvocationAttempts", 3)
        with pytest.raises(
            stack_artifacts.DeployError, match=r"could not deliver .*RetryInvocationAttempts 3.*QueueKey"
        ):
            stack_artifacts.verify(s3, cloudwatch, outputs, wait_seconds=60, poll_seconds=0.05)
    # AND it is given no SQS client at all: it cannot take a live message from the CDC job
    assert "sqs" not in inspect.signature(stack_artifacts.verify).parameters
    assert "receive_message" not in inspect.getsource(stack_artifacts.verify)
    template_outputs = template()["Outputs"]
    assert template_outputs["NewFileRuleDeliveryAlarmName"]["Value"] == {"Ref": "NewFileRuleDeliveryAlarm"}
    assert template_outputs["BronzePrefix"]["Value"] == {"Ref": "BronzePrefix"}
