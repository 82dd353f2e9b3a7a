"""The stack as CloudFormation creates it, in a moto server on loopback: build, package, transform, create.

Used by tests/aws/test_deployed_stack.py and `make try-aws`. The steps are the deploy's own: `sam build`,
`sam package` (to a bucket in the emulator), the SAM transform expanded locally (the SAM CLI's translator,
sam_transform.py), `create-stack` from the transformed template, then the project's upload step
(scripts/stack_artifacts.py). What moto leaves as placeholders is created through the API from the same
transformed template, with its intrinsic functions resolved against the created stack: `complete_what_moto_skips`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

ROOT = Path(__file__).resolve().parents[2]
SAM_PYTHON = ROOT / ".venv" / "tools" / "sam" / "bin" / "python"
SAM = ROOT / ".venv" / "tools" / "sam" / "bin" / "sam"
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "SAM_CLI_TELEMETRY": "0",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server in this process (so the gap workarounds apply to it), on loopback; yields its endpoint.

    ``localhost``, not 127.0.0.1: moto parses a TemplateURL path-style only for that host name.
    """
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://localhost:{port}"
    # moto's Step Functions interpreter calls the other services through its own server, at MOTO_PORT
    saved_port = os.environ.get("MOTO_PORT")
    os.environ["MOTO_PORT"] = str(port)
    try:
        import urllib.request

        # moto's backends live in the process, not in the server: a server started after another module's begins
        # empty, as a new emulator would (the DMS task and the stacks of the last one would otherwise still exist).
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10).read()
        request = urllib.request.Request(
            f"{endpoint}/moto-api/config",
            data=json.dumps({"stepfunctions": {"execute_state_machine": True}}).encode(),
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).read()
        yield endpoint
    finally:
        server.stop()
        if saved_port is None:
            os.environ.pop("MOTO_PORT", None)
        else:
            os.environ["MOTO_PORT"] = saved_port


def run_sam_tool(arguments: list[str], environment: dict[str, str], cwd: Path = ROOT) -> None:
    run = subprocess.run(arguments, cwd=cwd, env=environment, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(arguments[:3])} failed:\n{run.stdout}\n{run.stderr}")


def build_and_transform(work: Path, endpoint: str) -> dict[str, Any]:
    """`sam build`, `sam package` to a bucket in the emulator, then the SAM transform: the template CloudFormation
    would create."""
    environment = {**os.environ, **FAKE_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}
    boto3.client("s3", endpoint_url=endpoint, region_name=REGION).create_bucket(Bucket="sam-packages")
    build = work / "build"
    run_sam_tool([str(SAM), "build", "--build-dir", str(build), "--region", REGION], environment)
    if not (build / "WorkCheckFunction" / "work.py").exists():  # the one `sam build` of the suite checks its output
        raise RuntimeError(f"sam build left no WorkCheckFunction handler in {build}")
    packaged = work / "packaged.yaml"
    run_sam_tool(
        [str(SAM), "package", "--template-file", str(build / "template.yaml"), "--s3-bucket", "sam-packages",
         "--output-template-file", str(packaged), "--region", REGION, "--no-progressbar"],
        environment,
    )  # fmt: skip
    transformed = work / "transformed.json"
    run_sam_tool(
        [str(SAM_PYTHON), str(Path(__file__).with_name("sam_transform.py")), str(packaged), str(transformed)],
        environment,
    )
    expanded: dict[str, Any] = json.loads(transformed.read_text(encoding="utf-8"))
    return expanded


# ----------------------------------------------------------------------------- intrinsic functions


@dataclass
class Resolver:
    """CloudFormation's intrinsic functions over the created stack: what a property's value became."""

    template: dict[str, Any]
    parameters: dict[str, str]
    physical: dict[str, str]  # logical id -> physical id (describe_stack_resources)
    attributes: dict[tuple[str, str], str] = field(default_factory=dict)  # (logical id, attribute) -> value

    def condition(self, name: str) -> bool:
        return bool(self.value(self.template["Conditions"][name]))

    def value(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.value(n) for n in node) if v is not _NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) != 1 or not next(iter(node)).startswith(("Fn::", "Ref", "Condition")):
            return {k: v for k, v in ((k, self.value(v)) for k, v in node.items()) if v is not _NO_VALUE}
        [(function, argument)] = node.items()
        if function == "Ref":
            return self.ref(argument)
        if function == "Fn::GetAtt":
            logical, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            return self.attributes[(logical, attribute)]
        if function == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            local = {k: self.value(v) for k, v in variables.items()}
            return re.sub(r"\$\{([A-Za-z0-9:._]+)\}", lambda m: str(self._sub(m.group(1), local)), text)
        if function == "Fn::Join":
            return argument[0].join(str(v) for v in self.value(argument[1]))
        if function == "Fn::Split":
            return str(self.value(argument[1])).split(argument[0])
        if function == "Fn::Select":
            return self.value(argument[1])[int(self.value(argument[0]))]
        if function == "Fn::If":
            return self.value(argument[1] if self.condition(argument[0]) else argument[2])
        if function == "Fn::Equals":
            return self.value(argument[0]) == self.value(argument[1])
        if function == "Fn::Not":
            return not self.value(argument[0])
        if function == "Fn::And":
            return all(self.value(a) for a in argument)
        if function == "Fn::Or":
            return any(self.value(a) for a in argument)
        if function == "Condition":
            return self.condition(argument)
        raise AssertionError(f"intrinsic function not resolved here: {function}")

    def _sub(self, name: str, local: dict[str, Any]) -> Any:
        if name in local:
            return local[name]
        if "." in name and not name.startswith("AWS::"):
            logical, attribute = name.split(".", 1)
            return self.attributes[(logical, attribute)]
        return self.ref(name)

    def ref(self, name: str) -> Any:
        pseudo = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": "aws", "AWS::NoValue": _NO_VALUE}
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            kind = str(self.template.get("Parameters", {}).get(name, {}).get("Type", "String"))
            if kind == "CommaDelimitedList" or kind.startswith("List<"):
                # CloudFormation: a Ref to a list parameter is the list (a Join over it joins its items)
                return [item.strip() for item in self.parameters[name].split(",")]
            return self.parameters[name]
        return self.physical[name]


_NO_VALUE: Any = object()


def _numbers(node: Any, keys: set[str]) -> Any:
    """``node`` with the values of ``keys`` as numbers, as CloudFormation converts a parameter's text."""
    if isinstance(node, list):
        return [_numbers(n, keys) for n in node]
    if isinstance(node, dict):
        return {k: float(v) if k in keys and isinstance(v, str) else _numbers(v, keys) for k, v in node.items()}
    return node


def parameter_values(template: dict[str, Any], given: dict[str, str]) -> dict[str, str]:
    values = {k: str(p["Default"]) for k, p in template["Parameters"].items() if "Default" in p}
    return {**values, **given}


# ------------------------------------------------------------------------------------- the stack


@dataclass
class LocalStack:
    """The created stack: its outputs, its resources' physical ids, and the resolver over them."""

    name: str
    outputs: dict[str, str]
    resolver: Resolver

    def physical(self, logical: str) -> str:
        return self.resolver.physical[logical]


def _attributes(template: dict[str, Any], physical: dict[str, str], endpoint: str) -> dict[tuple[str, str], str]:
    """The GetAtt values the template uses, read back from the emulator by resource type."""
    clients = {s: boto3.client(s, endpoint_url=endpoint, region_name=REGION) for s in ("sqs", "lambda", "kms")}
    attributes: dict[tuple[str, str], str] = {}
    for logical, resource in template["Resources"].items():
        if logical not in physical:
            continue
        ident, kind = physical[logical], resource["Type"]
        if kind == "AWS::S3::Bucket":
            attributes[(logical, "Arn")] = f"arn:aws:s3:::{ident}"
        elif kind == "AWS::SQS::Queue":
            arn = clients["sqs"].get_queue_attributes(QueueUrl=ident, AttributeNames=["QueueArn"])["Attributes"]
            attributes[(logical, "Arn")] = arn["QueueArn"]
            attributes[(logical, "QueueName")] = ident.rsplit("/", 1)[-1]
        elif kind == "AWS::Lambda::Function":
            attributes[(logical, "Arn")] = clients["lambda"].get_function(FunctionName=ident)["Configuration"][
                "FunctionArn"
            ]
        elif kind == "AWS::SNS::Topic":
            attributes[(logical, "TopicName")] = ident.rsplit(":", 1)[-1]
        elif kind == "AWS::KMS::Key":
            # (not DescribeKey: moto keeps a key policy from CloudFormation as a dict and fails to answer it)
            attributes[(logical, "Arn")] = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{ident}"
        elif kind == "AWS::Events::Rule":
            attributes[(logical, "Arn")] = f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{ident.rsplit('|', 1)[-1]}"
        elif kind == "AWS::Logs::LogGroup":
            attributes[(logical, "Arn")] = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{ident}:*"
        elif kind == "AWS::IAM::Role":
            attributes[(logical, "Arn")] = f"arn:aws:iam::{ACCOUNT}:role/{ident}"
    return attributes


def create_stack(
    template: dict[str, Any], name: str, given: dict[str, str], endpoint: str, timeout: float = 120
) -> LocalStack:
    """`create-stack` from the transformed template in the emulator, then what moto leaves as placeholders."""
    import time

    template = without_deploy_guard(template)
    cfn = boto3.client("cloudformation", endpoint_url=endpoint, region_name=REGION)
    cfn.create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in given.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    deadline = time.monotonic() + timeout
    while (status := cfn.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]).endswith("IN_PROGRESS"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"stack {name} still {status}")
        time.sleep(0.2)
    if status != "CREATE_COMPLETE":
        events = cfn.describe_stack_events(StackName=name)["StackEvents"]
        raise RuntimeError(f"stack {name}: {status}: {[e.get('ResourceStatusReason') for e in events][:5]}")
    physical = {
        r["LogicalResourceId"]: r["PhysicalResourceId"]
        for r in cfn.describe_stack_resources(StackName=name)["StackResources"]
        if "LogicalResourceId" in r and r.get("PhysicalResourceId") not in (None, "None")  # placeholders
    }
    resolver = Resolver(template, parameter_values(template, given), physical)
    resolver.attributes = _attributes(template, physical, endpoint)
    complete_what_moto_skips(template, resolver, endpoint)
    outputs = {
        key: str(resolver.value(output["Value"]))
        for key, output in template.get("Outputs", {}).items()
        if "Condition" not in output or resolver.condition(output["Condition"])
    }
    return LocalStack(name=name, outputs=outputs, resolver=resolver)


def without_deploy_guard(template: dict[str, Any]) -> dict[str, Any]:
    """The template without its DeployGuard custom resource (and the DependsOn on it).

    Moto gap: moto answers a custom resource only through its Lambda run in Docker (not available here), and
    the stack would wait for that answer. The guard's check is tested by calling its handler
    (tests/aws/test_redeploy.py); here a collision surfaces as Glue's AlreadyExists, as it did before the guard.
    """
    resources = {}
    for logical, resource in template["Resources"].items():
        if resource["Type"] == "Custom::DeployGuard":
            continue
        depends = resource.get("DependsOn")
        if depends is not None:
            kept = [d for d in ([depends] if isinstance(depends, str) else depends) if d != "DeployGuard"]
            resource = {k: v for k, v in resource.items() if k != "DependsOn"} | ({"DependsOn": kept} if kept else {})
        resources[logical] = resource
    return {**template, "Resources": resources}


def complete_what_moto_skips(template: dict[str, Any], resolver: Resolver, endpoint: str) -> None:
    """Create through the API what moto 5.2.5 leaves as placeholders or ignores, from the same template.

    - Glue databases and jobs are placeholders (a !Ref to a job resolves to "None"): created with the
      template's resolved properties; the jobs' names become their physical ids.
    - DefinitionS3Location / DefinitionSubstitutions are ignored: the definition the package step uploaded is
      read back from S3 and rendered with the resolved substitutions, as Step Functions would receive it.
    - S3 NotificationConfiguration is ignored: EventBridge delivery is switched on through the API.
    - A Lambda function's environment that names a Glue job got "None" (moto leaves the variable out):
      set again once the jobs exist.
    - CloudWatch alarms are placeholders: created with the template's resolved properties (an output names one).
    Bucket and queue policies, the SNS topic policy, alarms and the Glue security configuration stay
    placeholders: docs/deploy.md says how each is checked instead.
    """
    glue = boto3.client("glue", endpoint_url=endpoint, region_name=REGION)
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    sfn = boto3.client("stepfunctions", endpoint_url=endpoint, region_name=REGION)
    lam = boto3.client("lambda", endpoint_url=endpoint, region_name=REGION)
    cloudwatch = boto3.client("cloudwatch", endpoint_url=endpoint, region_name=REGION)
    resources = template["Resources"]
    # A job's name is its physical id, known before any job exists: one job may name another (the full-load job
    # names the verify job it starts), as CloudFormation orders them by their references.
    for logical, resource in resources.items():
        if resource["Type"] == "AWS::Glue::Job" and (
            "Condition" not in resource or resolver.condition(resource["Condition"])
        ):
            resolver.physical[logical] = resolver.value(resource["Properties"]["Name"])
    for logical, resource in resources.items():
        if "Condition" in resource and not resolver.condition(resource["Condition"]):
            continue
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::Glue::Database":
            database = resolver.value(properties["DatabaseInput"])
            glue.create_database(DatabaseInput=database)
            resolver.physical[logical] = database["Name"]
        elif resource["Type"] == "AWS::Glue::Job":
            job = resolver.value({k: v for k, v in properties.items() if k not in ("SecurityConfiguration",)})
            job.pop("Connections", None)
            job["Timeout"] = int(job["Timeout"])
            job["NumberOfWorkers"] = int(job["NumberOfWorkers"])
            glue.create_job(**job)
            resolver.physical[logical] = job["Name"]
    for logical, resource in resources.items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::StepFunctions::StateMachine":
            location = properties["DefinitionS3Location"]
            text = s3.get_object(Bucket=location["Bucket"], Key=location["Key"])["Body"].read().decode("utf-8")
            for placeholder, value in properties.get("DefinitionSubstitutions", {}).items():
                text = text.replace("${" + placeholder + "}", str(resolver.value(value)))
            # moto records the state machine in the stack but, without a definition it can read, creates none
            name, role = resolver.value(properties["StateMachineName"]), resolver.value(properties["RoleArn"])
            existing = {m["name"]: m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"]}
            if name in existing:
                sfn.update_state_machine(stateMachineArn=existing[name], definition=text)
            else:
                created = sfn.create_state_machine(name=name, definition=text, roleArn=role, type="STANDARD")
                resolver.physical[logical] = created["stateMachineArn"]
        elif resource["Type"] == "AWS::CloudWatch::Alarm" and logical not in resolver.physical:
            alarm = _numbers(resolver.value(properties), {"Threshold"})
            # counts are whole numbers for the API (a parameter's text such as "120" resolves to a string)
            alarm.update({k: int(float(alarm[k])) for k in ("EvaluationPeriods", "DatapointsToAlarm", "Period")
                          if k in alarm})  # fmt: skip
            alarm.setdefault("AlarmName", f"{logical}-{resolver.ref('AWS::AccountId')}")
            cloudwatch.put_metric_alarm(**alarm)
            resolver.physical[logical] = alarm["AlarmName"]
        elif resource["Type"] == "AWS::Lambda::Function" and "Environment" in properties:
            variables = {k: str(resolver.value(v)) for k, v in properties["Environment"]["Variables"].items()}
            lam.update_function_configuration(
                FunctionName=resolver.physical[logical], Environment={"Variables": variables}
            )
        elif resource["Type"] == "AWS::S3::Bucket" and "EventBridgeConfiguration" in properties.get(
            "NotificationConfiguration", {}
        ):
            s3.put_bucket_notification_configuration(
                Bucket=resolver.physical[logical], NotificationConfiguration={"EventBridgeConfiguration": {}}
            )
