"""What `make deploy` and `make destroy` do around `sam deploy` / `sam delete`.

    preflight      before `sam deploy`: refuse a deploy that would leave the jobs without a table configuration,
                   and print the parameter overrides the deploy needs (the built wheel's key; the retained Glue
                   databases of a destroyed stack, which the new stack must use instead of creating them again,
                   and the retained silver bucket their tables live in)
    glue-wheels    dist/cdclake-<version>.gluewheels.zip: the cdclake wheel and the wheels of every dependency
                   (glue/requirements-glue.txt), which the jobs install with --no-index (no PyPI at job start)
    upload         the Glue entry points (glue/jobs/*.py), the cdclake wheel and its zip of wheels (dist/) to
                   s3://<artifacts>/glue/, and with --config the table configuration to s3://<artifacts>/<TableConfigKey>
    verify         after a deploy (make verify-deploy): a test file put into bronze must be matched and delivered
                   to the file queue by the new-file rule (its CloudWatch metrics: EventBridge, the queue's key;
                   the queue itself is never read), and the delivery alarm is set to ALARM so the alert topic
                   e-mails (CloudWatch, the alert topic's key); what only a real account can show
    stop-executions  stop the state machine's running executions (before the stack is deleted)
    delete-bucket  empty a versioned bucket (every version and delete marker) and delete it
    retained       list what deleting the stack kept

Runs with the SAM CLI's Python (boto3 is one of its dependencies), so deploying needs no `make setup`.
The stack outputs come from `sam list stack-outputs --output json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RETAINED = {
    "SilverBucketName": "the Iceberg warehouse",
    "BronzeBucketName": "the DMS files",
    "AccessLogBucketName": "S3 access logs",
    "GlueDatabaseName": "the silver tables' Glue database",
}


# The stack's Glue databases (DeletionPolicy Retain): logical id -> (the parameter that says it exists, its name).
DATABASES = {
    "GlueDatabase": ("ExistingSilverDatabase", "cdclake_{environment}"),
    "GoldDatabase": ("ExistingGoldDatabase", "cdclake_{environment}_gold"),
}
DEFAULT_ENVIRONMENT = "dev"  # template.yaml's EnvironmentName default


class DeployError(RuntimeError):
    """A deploy step that cannot go on; the message says what to do."""


def read_outputs(path: Path) -> dict[str, str]:
    """``sam list stack-outputs --output json`` as {OutputKey: OutputValue}."""
    try:
        listed = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DeployError(f"{path} is not what `sam list stack-outputs --output json` writes: {exc}") from None
    return {o["OutputKey"]: o["OutputValue"] for o in listed}


def built_wheel(root: Path) -> Path:
    """The one wheel `make deploy-wheel` built (it empties dist/ of cdclake wheels first)."""
    wheels = sorted((root / "dist").glob("cdclake-*.whl"))
    if not wheels:
        raise DeployError("no dist/cdclake-*.whl: build it first (make deploy-wheel).")
    if len(wheels) > 1:
        names = ", ".join(w.name for w in wheels)
        raise DeployError(f"{len(wheels)} wheels in dist/ ({names}): remove the old ones or run make deploy-wheel.")
    return wheels[0]


GLUE_REQUIREMENTS = Path("glue") / "requirements-glue.txt"
# Glue 5.1 runs Python 3.11 on x86_64 Linux (Amazon Linux 2023, glibc 2.34): wheels for these platforms.
GLUE_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")


def glue_wheels_name(wheel: Path) -> str:
    """``cdclake-0.1.0-py3-none-any.whl`` -> ``cdclake-0.1.0.gluewheels.zip`` (template.yaml derives the same key
    from LibraryWheelKey, so the two always agree)."""
    return wheel.name.removesuffix("-py3-none-any.whl") + ".gluewheels.zip"


def build_glue_wheels(root: Path, python: str = sys.executable) -> Path:
    """Write ``dist/<cdclake>.gluewheels.zip``: ``wheels/requirements.txt`` (the cdclake wheel's exact version and
    glue/requirements-glue.txt's pins) and ``wheels/*.whl`` for Glue 5.1's platform, the "zip of wheels" layout
    the AWS Glue guide describes (Using Python libraries with AWS Glue, Appendix A). Downloads from the package
    index the deploying machine uses; the Glue job then installs from the zip alone (--no-index).
    """
    wheel = built_wheel(root)
    pins = (root / GLUE_REQUIREMENTS).read_text(encoding="utf-8")
    version = wheel.name.split("-")[1]
    target = root / "dist" / glue_wheels_name(wheel)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp) / "wheels"
        wheels.mkdir()
        (wheels / "requirements.txt").write_text(f"cdclake=={version}\n{pins}", encoding="utf-8")
        platforms = [a for p in GLUE_PLATFORMS for a in ("--platform", p)]
        download = [python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
                    *platforms, "--python-version", "3.11", "--implementation", "cp", "--dest", str(wheels),
                    "-r", str(root / GLUE_REQUIREMENTS)]  # fmt: skip
        run = subprocess.run(download, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise DeployError(f"could not download the Glue job's wheels: {run.stderr.strip().splitlines()[-1:]}")
        (wheels / wheel.name).write_bytes(wheel.read_bytes())
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(wheels.iterdir()):
                archive.write(path, arcname=f"wheels/{path.name}")
    return target


def wheel_override(root: Path) -> str:
    """The LibraryWheelKey the jobs must install: the built wheel's own name (pip checks name against version)."""
    return f"LibraryWheelKey=glue/{built_wheel(root).name}"


def parameter(overrides: list[str], name: str) -> str | None:
    """The value of ``name`` in ``Key=Value`` parameter overrides (the last one wins, as in `sam deploy`)."""
    values = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{name}=")]
    return values[-1] if values else None


def environment_name(overrides: list[str]) -> str:
    """EnvironmentName from ``Key=Value`` parameter overrides (the last one wins, as in `sam deploy`)."""
    return parameter(overrides, "EnvironmentName") or DEFAULT_ENVIRONMENT


def database_overrides(existing: set[str], owned: set[str], environment: str) -> list[str]:
    """``Existing<X>Database=true`` for a database that exists but is not the stack's own resource.

    `make destroy` keeps the databases (DeletionPolicy Retain); a new stack that created them again would fail
    with AlreadyExists. A database the stack itself created stays in the stack (false).
    """
    overrides = []
    for logical, (parameter, pattern) in DATABASES.items():
        adopt = pattern.format(environment=environment) in existing and logical not in owned
        overrides.append(f"{parameter}={'true' if adopt else 'false'}")
    return overrides


class DeployedStack(NamedTuple):
    outputs: dict[str, str]
    owned: set[str]  # the logical ids of its resources
    parameters: dict[str, str]


def _stack(cfn: Any, stack_name: str) -> DeployedStack | None:
    """The stack's outputs, resources and parameter values; None when there is no such stack."""
    try:
        [stack] = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    except cfn.exceptions.ClientError as exc:
        if "does not exist" in str(exc):
            return None
        raise
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters", [])}
    owned = set()
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        owned |= {r["LogicalResourceId"] for r in page["StackResourceSummaries"]}
    return DeployedStack(outputs, owned, parameters)


def source_secret(overrides: list[str], stack: DeployedStack | None) -> str:
    """SourceSecretId as the deploy will set it: the overrides', else the stack's (sam deploy keeps a deployed
    stack's value for a parameter it is not given), else the template's default (empty)."""
    given = parameter(overrides, "SourceSecretId")
    if given is not None:
        return given
    return stack.parameters.get("SourceSecretId", "") if stack else ""


def _existing_databases(glue: Any, names: list[str]) -> dict[str, str]:
    """{name: LocationUri} of the databases in ``names`` that exist ("" for one without a location)."""
    existing = {}
    for name in names:
        try:
            database = glue.get_database(Name=name)["Database"]
        except glue.exceptions.EntityNotFoundException:
            continue
        existing[name] = database.get("LocationUri", "")
    return existing


def silver_bucket_override(existing: dict[str, str], owned: set[str], environment: str) -> str:
    """``ExistingSilverBucket=<bucket>``: the bucket a retained silver database keeps its tables in.

    Its LocationUri (s3://<bucket>/warehouse) is where Iceberg's GlueCatalog puts new tables, and its tables'
    metadata names their files by absolute path: the new stack must use that bucket, not a new one. Empty when
    the stack creates (or already owns) its bucket.
    """
    location = existing.get(DATABASES["GlueDatabase"][1].format(environment=environment), "")
    if "SilverBucket" in owned or not location.startswith("s3://"):
        return "ExistingSilverBucket="
    return f"ExistingSilverBucket={location[len('s3://') :].split('/', 1)[0]}"


def preflight(
    cfn: Any, glue: Any, s3: Any, stack_name: str, overrides: list[str], root: Path, config: Path | None
) -> list[str]:
    """Check a deploy can finish with a table configuration; the parameter overrides it needs.

    Without ``config`` the configuration must already be in the deployed stack's artifacts bucket, or the
    full-load job must be able to write it from the source catalog (SourceSecretId set, docs/deploy.md): else
    the first job run would fail (NoSuchKey).
    """
    if config is not None and not config.is_file():
        raise DeployError(f"CONFIG={config}: no such file.")
    wheel = wheel_override(root)
    stack = _stack(cfn, stack_name)
    if config is None and not source_secret(overrides, stack):
        if stack is None:
            raise DeployError(
                f"the first deploy needs the table configuration: make deploy CONFIG=cdclake.yaml, or let the "
                f'full-load job write it from the source catalog with PARAMS="SourceSecretId=..." (stack '
                f"{stack_name} does not exist yet, so there is no configuration to keep)."
            )
        outputs = stack.outputs
        bucket, key = outputs["ArtifactsBucketName"], outputs["TableConfigKey"]
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except s3.exceptions.ClientError:
            raise DeployError(
                f"s3://{bucket}/{key} does not exist: give the table configuration, make deploy CONFIG=cdclake.yaml "
                "(or SourceSecretId, for the full-load job to write it)."
            ) from None
    environment = environment_name(overrides)
    names = [pattern.format(environment=environment) for _, pattern in DATABASES.values()]
    owned = stack.owned if stack else set()
    existing = _existing_databases(glue, names)
    return [
        wheel,
        *database_overrides(set(existing), owned, environment),
        silver_bucket_override(existing, owned, environment),
    ]


def upload(
    s3: Any, outputs: dict[str, str], root: Path, config: Path | None, glue_wheels_required: bool = False
) -> list[str]:
    """Upload the Glue entry points, the wheel and (optionally) the table configuration; the s3:// URIs written.

    The wheel goes where the stack's jobs install it from (output LibraryWheelKey): a wheel of another version
    than the one the stack was deployed with is refused, not uploaded beside it.
    """
    bucket = outputs["ArtifactsBucketName"]
    wheel = built_wheel(root)
    wheel_key = outputs.get("LibraryWheelKey", f"glue/{wheel.name}")
    if wheel_key.rsplit("/", 1)[-1] != wheel.name:
        raise DeployError(
            f"the stack was deployed with LibraryWheelKey={wheel_key} but dist/ holds {wheel.name}: "
            "deploy again with make deploy (it passes the built wheel's key)."
        )
    # The jobs install the zip of wheels, not the wheel alone: `make deploy` (main) requires it. A caller that runs
    # the entry points without Glue's installer (tests/aws/test_deployed_stack.py, on local Spark) may go without.
    glue_wheels = root / "dist" / glue_wheels_name(wheel)
    if glue_wheels_required and not glue_wheels.is_file():
        raise DeployError(f"no dist/{glue_wheels.name}: build it first (make deploy-wheel).")
    uploads = [*((p, f"glue/{p.name}") for p in sorted((root / "glue" / "jobs").glob("*.py"))), (wheel, wheel_key)]
    if glue_wheels.is_file():
        uploads.append((glue_wheels, f"{wheel_key.rsplit('/', 1)[0]}/{glue_wheels.name}"))
    written = []
    for path, key in uploads:
        s3.upload_file(str(path), bucket, key)
        written.append(f"s3://{bucket}/{key}")
    if config is not None:
        if not config.is_file():
            raise DeployError(f"CONFIG={config}: no such file.")
        key = outputs["TableConfigKey"]
        s3.upload_file(str(config), bucket, key)
        written.append(f"s3://{bucket}/{key}")
    return written


def empty_and_delete_bucket(s3: Any, bucket: str) -> int:
    """Delete every object version and delete marker of ``bucket``, then the bucket; the number of versions removed.

    A versioned bucket cannot be deleted while it holds versions, and deleting the current objects leaves them.
    """
    removed = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        entries = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
        ]
        for start in range(0, len(entries), 1000):  # DeleteObjects takes at most 1,000 keys
            chunk = entries[start : start + 1000]
            response = s3.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True})
            if response.get("Errors"):
                raise DeployError(f"s3://{bucket}: {len(response['Errors'])} versions could not be deleted.")
            removed += len(chunk)
    s3.delete_bucket(Bucket=bucket)
    return removed


# A CDC file name (so the new-file rule queues it) of a table no configuration has: the CDC job deletes its message
# and logs it as unconfigured (engine/follow.py), and it never reaches silver.
VERIFY_KEY = "{prefix}/cdclake_verify/deploy_check/20000101-000000000.csv"
# The new-file rule's metrics (AWS/Events, dimension RuleName; each sent only when not zero, per minute).
DELIVERED = ("MatchedEvents", "Invocations")
UNDELIVERED = ("FailedInvocations", "InvocationsSentToDlq", "InvocationsFailedToBeSentToDlq", "RetryInvocationAttempts")


def rule_metrics(cloudwatch: Any, rule: str, since: Any, until: Any) -> dict[str, float]:
    """The sums of the rule's delivery metrics between ``since`` and ``until`` (datetimes), missing ones 0."""
    sums = {}
    for name in (*DELIVERED, *UNDELIVERED):
        points = cloudwatch.get_metric_statistics(
            Namespace="AWS/Events", MetricName=name, Dimensions=[{"Name": "RuleName", "Value": rule}],
            StartTime=since, EndTime=until, Period=60, Statistics=["Sum"],
        )["Datapoints"]  # fmt: skip
        sums[name] = sum(float(p["Sum"]) for p in points)
    return sums


def verify(
    s3: Any, cloudwatch: Any, outputs: dict[str, str], wait_seconds: float = 600, poll_seconds: float = 30
) -> list[str]:
    """Put a test file into bronze and prove from the new-file rule's CloudWatch metrics that EventBridge matched
    it and delivered it to the encrypted file queue; then set the new-file delivery alarm to ALARM (its action
    publishes to the alert topic: check the e-mail). The lines to print; raises DeployError when a delivery failed
    or nothing was matched in time.

    The file queue is never read: a receive would take a live message from the CDC job (and count towards its
    dead-letter limit). The metrics count every new file of the minute, the test file's and DMS's: a delivery
    without failure since the put is what is proved. EventBridge publishes them per minute, best effort, a few
    minutes late: hence the long wait.
    """
    import time
    from datetime import UTC, datetime, timedelta

    key = VERIFY_KEY.format(prefix=outputs["BronzePrefix"])
    rule = outputs["NewFileRuleName"]
    since = datetime.now(UTC).replace(second=0, microsecond=0)
    s3.put_object(Bucket=outputs["BronzeBucketName"], Key=key, Body=b"cdclake make verify-deploy\n")
    lines = [f"put s3://{outputs['BronzeBucketName']}/{key}"]
    deadline = time.monotonic() + wait_seconds
    while True:
        sums = rule_metrics(cloudwatch, rule, since, datetime.now(UTC) + timedelta(minutes=1))
        failed = {name: sums[name] for name in UNDELIVERED if sums[name] > 0}
        if failed:
            counts = ", ".join(f"{name} {value:.0f}" for name, value in failed.items())
            raise DeployError(
                f"the new-file rule {rule} could not deliver to the file queue ({counts}): check the file queue's "
                "policy and QueueKey's key policy (EventBridgeDelivers); undelivered events wait in the "
                "new-file-events dead-letter queue."
            )
        if all(sums[name] >= 1 for name in DELIVERED):
            break
        if time.monotonic() >= deadline:
            missing = " and ".join(name for name in DELIVERED if sums[name] < 1)
            raise DeployError(
                f"no {missing} for the new-file rule {rule} {wait_seconds:.0f} s after the test file was put: check "
                "that the bronze bucket sends events to EventBridge and that the rule is enabled; CloudWatch may "
                "also be late (run make verify-deploy again in a few minutes)."
            )
        time.sleep(poll_seconds)
    lines.append(
        f"the new-file rule matched and delivered to the file queue without a failure (MatchedEvents "
        f"{sums['MatchedEvents']:.0f}, Invocations {sums['Invocations']:.0f} since the put; the CDC job deletes the "
        "test file's event as an unconfigured table's)"
    )
    alarm = outputs["NewFileRuleDeliveryAlarmName"]
    cloudwatch.set_alarm_state(AlarmName=alarm, StateValue="ALARM", StateReason="make verify-deploy: a test alarm")
    lines.append(f"set {alarm} to ALARM: the alert topic's subscribers get an e-mail within minutes")
    return lines


def stop_executions(sfn: Any, state_machine_arn: str) -> list[str]:
    """Stop every running execution of the pipeline (its loop never ends by itself); the ARNs stopped."""
    stopped = []
    for page in sfn.get_paginator("list_executions").paginate(
        stateMachineArn=state_machine_arn, statusFilter="RUNNING"
    ):
        for execution in page["executions"]:
            sfn.stop_execution(executionArn=execution["executionArn"], cause="make destroy")
            stopped.append(execution["executionArn"])
    return stopped


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "action",
        choices=["preflight", "glue-wheels", "upload", "verify", "stop-executions", "delete-bucket", "retained"],
    )
    parser.add_argument("--outputs", type=Path, help="sam list stack-outputs --output json")
    parser.add_argument("--stack-name", help="preflight: the stack (samconfig.toml's stack_name)")
    parser.add_argument(
        "--region", help="the stack's region (samconfig.toml's region); every action that calls AWS needs it"
    )
    parser.add_argument("--parameters", default="", help="preflight: the Key=Value overrides sam deploy is given")
    parser.add_argument("--config", type=Path, help="upload: the table configuration (cdclake.yaml)")
    parser.add_argument("--output-key", help="delete-bucket: the stack output naming the bucket")
    args = parser.parse_args(argv)
    try:
        if args.action == "glue-wheels":
            print(f"built {build_glue_wheels(ROOT).relative_to(ROOT)}")
            return 0
        if args.action != "retained" and not args.region:
            # Never the shell's default region: a stack in another region is "not found" there, and make destroy
            # would stop before sam delete (which reads samconfig.toml's region) with nothing said about why.
            raise DeployError(f"{args.action} needs --region (samconfig.toml's region of the stack).")
        if args.action == "preflight":
            import boto3

            session = boto3.Session(region_name=args.region)
            overrides = preflight(
                session.client("cloudformation"), session.client("glue"), session.client("s3"),
                args.stack_name, args.parameters.split(), ROOT, args.config,
            )  # fmt: skip
            print(" ".join(overrides))
            return 0
        if args.outputs is None:
            raise DeployError(f"{args.action} needs --outputs (sam list stack-outputs --output json).")
        outputs = read_outputs(args.outputs)
        if args.action == "retained":
            for key, what in RETAINED.items():
                if key in outputs:
                    print(f"kept: {outputs[key]} ({what})")
            return 0
        import boto3

        session = boto3.Session(region_name=args.region)
        s3 = session.client("s3")
        if args.action == "upload":
            for uri in upload(s3, outputs, ROOT, args.config, glue_wheels_required=True):
                print(f"uploaded {uri}")
            if args.config is None:
                print(
                    f"no CONFIG given: the jobs read s3://{outputs['ArtifactsBucketName']}/{outputs['TableConfigKey']}"
                )
        elif args.action == "verify":
            for line in verify(s3, session.client("cloudwatch"), outputs):
                print(line)
        elif args.action == "stop-executions":
            for arn in stop_executions(session.client("stepfunctions"), outputs["StateMachineArn"]):
                print(f"stopped {arn}")
        else:
            bucket = outputs[args.output_key]
            print(f"deleted s3://{bucket} ({empty_and_delete_bucket(s3, bucket)} object versions)")
    except DeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
