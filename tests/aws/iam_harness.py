"""Every AWS call a principal of the stack makes, checked against that principal's policies as AWS would check it.

moto enforces no IAM for these tests (its own check is opt-in, for users' access keys only, and does not model the
rules below), so a policy AWS would refuse passes every emulated test. This harness closes that gap for the
deployed-stack tests (test_deployed_stack.py, test_deployed_verify.py):

- RECORD (``CallRecorder``): botocore event hooks, registered for every session as task_calls.py registers its own,
  see each call (service, operation, parameters) before it is sent. The principal making it is the state
  machine's role for the calls of moto's Step Functions interpreter (``_from_interpreter``), else the principal
  the running code acts as: ``acting_as(role)`` is set around each Lambda handler (``TaskCalls._invoke``) and each
  Glue job run (``run_glue_entry_point``), and every thread started while it is set inherits it (the engine runs
  tables in thread pools). Calls made as no principal (the deployer, the test's own clients) are not checked.
- EVALUATE (``StackPolicies``): each call becomes the IAM requests AWS makes of it (``authorizations``: the action,
  the resource ARN, the request's condition keys), evaluated against the role's policies as CloudFormation created
  them (the transformed template, intrinsic functions resolved against the created stack: local_stack's
  ``Resolver``), the resource policies that can deny (bucket, queue and topic policies) and, for a customer
  managed key, the key policy. A request that is not allowed is answered as AWS answers it (AccessDenied; the
  code under test sees what it would see on AWS) and recorded: ``CallRecorder.denied`` names principal, action
  and ARN, and the deployed modules fail on any.
- REPORT (``least_privilege_report``): every grant (statement, action, resource) of every role, and whether a
  recorded call used it; docs/iam.md is that report, kept equal to what the harness produces.

Why a policy evaluator of our own (``evaluate``): moto's ``moto.iam.access_control.IAMPolicyStatement`` was
checked first. It turns a failing Condition of an Allow statement into an explicit DENY (AWS: the statement
simply does not apply), matches only ``*`` (not ``?``, which the source secret's ARN ``name-??????`` uses) and
puts the pattern into a regular expression unescaped; its conditions are those of trust policies. No maintained
Python library evaluates identity policies with conditions: policyuniverse and policy_sentry parse and write
policies, parliament and cloudsplaining lint them; the one full simulator found (@cloud-copilot/iam-simulate) is
an npm package. What is evaluated here is the part of AWS's policy evaluation logic these policies use, each rule
with the AWS page it comes from; anything else (an unknown condition operator, an operation with no mapping)
fails loudly instead of passing.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from botocore.awsrequest import AWSResponse
from task_calls import _from_interpreter

REGION = "us-east-1"
ACCOUNT = "123456789012"

# --------------------------------------------------------------------------------------- who is calling

_acting = threading.local()


def current_principal() -> str | None:
    return getattr(_acting, "principal", None)


@contextmanager
def acting_as(principal: str | None) -> Iterator[None]:
    """The calls made in this thread (and the threads it starts) are ``principal``'s (a role's logical id)."""
    before = current_principal()
    _acting.principal = principal
    try:
        yield
    finally:
        _acting.principal = before


def inherit_principal_in_threads(patch: Any) -> None:
    """A thread started while a principal is set acts as that principal (Glue's executors, the engine's pools).

    Patched on ``threading.Thread.start`` for the fixture's lifetime: the new thread's ``run`` is wrapped in the
    starter's principal. Threads started by moto's server (its request threads, the interpreter's executions)
    start from threads that act as nobody, so they act as nobody until a handler or job sets its own."""
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        principal = current_principal()
        if principal is not None:
            run = self.run

            def run_as() -> None:
                with acting_as(principal):
                    run()

            self.run = run_as  # type: ignore[method-assign]
        original(self)

    patch.setattr(threading.Thread, "start", start)


# ------------------------------------------------------------------------------- API call -> IAM requests


@dataclass(frozen=True)
class Request:
    """One authorization AWS makes of a call: an action on a resource, with the request's condition keys."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()


@dataclass
class ApiCall:
    principal: str
    service: str  # botocore's service name (s3, sqs, stepfunctions, ...)
    operation: str
    params: dict[str, Any]
    key_exists: bool | None = None  # GetObject/HeadObject: whether the key existed when it was called
    requests: list[Request] = field(default_factory=list)
    denied: list[tuple[Request, str]] = field(default_factory=list)  # (request, why)

    def describe(self) -> str:
        return f"{self.principal}: {self.service}:{self.operation}"


def _param(params: dict[str, Any], name: str) -> Any:
    """A parameter by its boto3 name; moto's interpreter passes Step Functions' casing (either first letter)."""
    for candidate in (name, name[:1].lower() + name[1:]):
        if candidate in params:
            return params[candidate]
    return None


def s3_object(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


def queue_arn(url: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{url.rstrip('/').rsplit('/', 1)[-1]}"


def glue_job(name: str) -> str:
    return f"arn:aws:glue:{REGION}:{ACCOUNT}:job/{name}"


def _function_arn(name: str) -> str:
    return name if name.startswith("arn:") else f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"


def _secret_arn(secret_id: str) -> str:
    # Secrets Manager appends "-" and six random characters to a secret's name in its ARN (Secrets Manager user
    # guide, "Secret ARN"); a policy names it as name-??????.
    return (
        secret_id
        if secret_id.startswith("arn:")
        else f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{secret_id}-AbC123"
    )


# What needs no permission at all (STS API reference, GetCallerIdentity: "No permissions are required").
NO_PERMISSION = {("sts", "GetCallerIdentity")}


def authorizations(call: ApiCall) -> list[Request]:
    """The IAM requests AWS makes for one API call: its action(s), resource ARN(s) and condition keys.

    Sources: the Service Authorization Reference ("Actions, resources, and condition keys for <service>") for the
    action names and resource types; where an operation's name is not its action's, the comment says why.
    """
    service, operation, p = call.service, call.operation, call.params
    if (service, operation) in NO_PERMISSION:
        return []
    if service == "s3":
        bucket = _param(p, "Bucket")
        if operation in ("GetObject", "HeadObject"):
            # HeadObject is authorized as s3:GetObject (S3 API reference, HeadObject, "Permissions"); a read of
            # one version needs s3:GetObjectVersion.
            action = "s3:GetObjectVersion" if _param(p, "VersionId") else "s3:GetObject"
            return [Request(action, s3_object(bucket, _param(p, "Key")))]
        if operation == "PutObject":
            # A conditional write (If-None-Match / If-Match) is still s3:PutObject (S3 user guide, "Conditional
            # writes": the s3:if-none-match / s3:if-match keys let a policy require it, no other action).
            context = tuple((k, "*") for k, n in (("s3:if-none-match", "IfNoneMatch"), ("s3:if-match", "IfMatch"))
                            if _param(p, n) is not None)  # fmt: skip
            return [Request("s3:PutObject", s3_object(bucket, _param(p, "Key")), context)]
        if operation == "DeleteObject":
            return [Request("s3:DeleteObject", s3_object(bucket, _param(p, "Key")))]
        if operation == "DeleteObjects":
            # One s3:DeleteObject per key (S3 API reference, DeleteObjects, "Permissions").
            keys = [o["Key"] for o in (_param(p, "Delete") or {}).get("Objects", [])]
            return [Request("s3:DeleteObject", s3_object(bucket, k)) for k in keys]
        if operation == "CopyObject":
            source = _param(p, "CopySource")
            source = source if isinstance(source, str) else f"{source['Bucket']}/{source['Key']}"
            return [Request("s3:GetObject", f"arn:aws:s3:::{source.lstrip('/')}"),
                    Request("s3:PutObject", s3_object(bucket, _param(p, "Key")))]  # fmt: skip
        if operation in ("ListObjectsV2", "ListObjects"):
            # Listing is s3:ListBucket on the bucket, with the request's prefix as s3:prefix (the empty string
            # when none is given) and its delimiter and max-keys (S3 service authorization reference).
            context = [("s3:prefix", str(_param(p, "Prefix") or ""))]
            if _param(p, "Delimiter") is not None:
                context.append(("s3:delimiter", str(_param(p, "Delimiter"))))
            if _param(p, "MaxKeys") is not None:
                context.append(("s3:max-keys", str(_param(p, "MaxKeys"))))
            return [Request("s3:ListBucket", f"arn:aws:s3:::{bucket}", tuple(context))]
        if operation == "ListObjectVersions":
            return [Request("s3:ListBucketVersions", f"arn:aws:s3:::{bucket}")]
        if operation == "HeadBucket":
            return [Request("s3:ListBucket", f"arn:aws:s3:::{bucket}")]  # (S3 API reference, HeadBucket)
    if service == "sqs":
        queue = queue_arn(_param(p, "QueueUrl"))
        # The batch operations are authorized as their single forms (SQS API permissions reference).
        action = {"DeleteMessageBatch": "DeleteMessage", "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
                  "SendMessageBatch": "SendMessage"}.get(operation, operation)  # fmt: skip
        return [Request(f"sqs:{action}", queue)]
    if service == "sns" and operation == "Publish":
        return [Request("sns:Publish", _param(p, "TopicArn"))]
    if service == "glue":
        if operation in ("StartJobRun", "GetJobRun", "GetJobRuns", "BatchStopJobRun", "GetJob"):
            return [Request(f"glue:{operation}", glue_job(_param(p, "JobName")))]
        if operation == "GetConnection":
            # Glue checks the catalog and the connection ARN (Glue developer guide, "Specifying AWS Glue resource
            # ARNs": connection actions name both).
            catalog = f"arn:aws:glue:{REGION}:{ACCOUNT}:catalog"
            connection = f"arn:aws:glue:{REGION}:{ACCOUNT}:connection/{_param(p, 'Name')}"
            return [Request("glue:GetConnection", catalog), Request("glue:GetConnection", connection)]
    if service == "stepfunctions":
        if operation in ("StartExecution", "ListExecutions", "DescribeStateMachine"):
            return [Request(f"states:{operation}", _param(p, "StateMachineArn"))]
        if operation in ("DescribeExecution", "StopExecution", "GetExecutionHistory"):
            return [Request(f"states:{operation}", _param(p, "ExecutionArn"))]
    if service == "lambda" and operation == "Invoke":
        return [Request("lambda:InvokeFunction", _function_arn(_param(p, "FunctionName")))]
    if service == "dms" and operation == "DescribeReplicationTasks":
        return [Request("dms:DescribeReplicationTasks", "*")]  # no resource-level permissions for it
    if service == "dms" and operation == "DescribeTableStatistics":
        # Resource type task (DMS service authorization reference): the task whose tables are described.
        return [Request("dms:DescribeTableStatistics", str(_param(p, "ReplicationTaskArn")))]
    if service == "cloudwatch" and operation == "PutMetricData":
        # No resource type; the namespace is the condition key cloudwatch:namespace.
        return [Request("cloudwatch:PutMetricData", "*", (("cloudwatch:namespace", str(_param(p, "Namespace"))),))]
    if service == "secretsmanager" and operation == "GetSecretValue":
        return [Request("secretsmanager:GetSecretValue", _secret_arn(_param(p, "SecretId")))]
    return [Request(f"{service}:{operation}", "UNMAPPED")]


# ------------------------------------------------------------------------------------ policy evaluation


@functools.lru_cache(maxsize=4096)
def _pattern(text: str, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards: * any run of characters, ? exactly one (IAM JSON policy reference, "Resource", "Action")."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)
    return re.compile(f"^{body}$", (re.IGNORECASE if ignore_case else 0) | re.DOTALL)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def matches(patterns: Any, value: str, ignore_case: bool) -> bool:
    return any(_pattern(str(p), ignore_case).match(value) for p in _listed(patterns))


# Condition operators (IAM JSON policy reference, "Condition operators"). Each: (negated, compare).
_OPERATORS: dict[str, tuple[bool, Callable[[str, str], bool]]] = {
    "StringEquals": (False, lambda v, p: v == p),
    "StringNotEquals": (True, lambda v, p: v == p),
    "StringEqualsIgnoreCase": (False, lambda v, p: v.lower() == p.lower()),
    "StringLike": (False, lambda v, p: bool(_pattern(p, False).match(v))),
    "StringNotLike": (True, lambda v, p: bool(_pattern(p, False).match(v))),
    "ArnEquals": (False, lambda v, p: v == p),
    "ArnLike": (False, lambda v, p: bool(_pattern(p, False).match(v))),
    "ArnNotEquals": (True, lambda v, p: v == p),
    "ArnNotLike": (True, lambda v, p: bool(_pattern(p, False).match(v))),
    "Bool": (False, lambda v, p: v.lower() == str(p).lower()),
}


def conditions_hold(conditions: dict[str, Any], context: dict[str, str]) -> bool:
    """Every operator block holds, each key's value matching any of the listed values.

    A key missing from the request: a positive operator does not match, a negated one (…Not…) matches, and
    ...IfExists matches (IAM JSON policy reference, "Condition operators": "...IfExists", and "negated matching
    condition operators"). An operator not listed here fails the test rather than being guessed."""
    for operator, block in conditions.items():
        name, if_exists = (operator[: -len("IfExists")], True) if operator.endswith("IfExists") else (operator, False)
        if name not in _OPERATORS:
            raise AssertionError(f"condition operator not evaluated by the IAM harness: {operator}")
        negated, compare = _OPERATORS[name]
        for key, values in block.items():
            value = context.get(key)
            if value is None:
                if not (negated or if_exists):
                    return False
                continue
            hit = any(compare(value, str(v)) for v in _listed(values))
            if hit == negated:
                return False
    return True


@dataclass(frozen=True)
class Grant:
    """One (statement, action pattern, resource pattern) of a role's policies: the unit of the report."""

    role: str
    statement: str  # its Sid, or its policy name and position
    action: str
    resource: str


def statement_applies(statement: dict[str, Any], action: str, resource: str, context: dict[str, str]) -> bool:
    if "NotAction" in statement:
        if matches(statement["NotAction"], action, ignore_case=True):
            return False
    elif not matches(statement.get("Action", []), action, ignore_case=True):
        return False
    if "NotResource" in statement:
        if matches(statement["NotResource"], resource, ignore_case=False):
            return False
    elif "Resource" in statement and not matches(statement["Resource"], resource, ignore_case=False):
        return False
    return conditions_hold(statement.get("Condition", {}), context)


def evaluate(statements: list[dict[str, Any]], request: Request, context: dict[str, str]) -> tuple[str, list[int]]:
    """'deny' if an applicable Deny statement exists, else 'allow' if an Allow does, else 'implicit deny'
    (IAM user guide, "Policy evaluation logic"); with the indices of the Allow statements that apply."""
    allows = []
    for index, statement in enumerate(statements):
        if statement_applies(statement, request.action, request.resource, context):
            if statement["Effect"] == "Deny":
                return "deny", []
            allows.append(index)
    return ("allow" if allows else "implicit deny"), allows


def _names_principal(statement: dict[str, Any], role_arn: str) -> bool:
    principal = statement.get("Principal")
    if principal == "*":
        return True
    aws = _listed((principal or {}).get("AWS", [])) if isinstance(principal, dict) else []
    return "*" in aws or role_arn in aws


@dataclass
class Role:
    name: str  # logical id
    arn: str
    statements: list[dict[str, Any]]
    labels: list[str]  # each statement's Sid or "<policy name> #n"
    managed: list[str] = field(default_factory=list)  # managed policy ARNs (the report lists them)


@dataclass
class StackPolicies:
    """The created stack's policies: each role's, the resource policies, the keys' policies and who uses which key."""

    roles: dict[str, Role]  # logical id -> role
    resource_policies: dict[str, list[dict[str, Any]]]  # bucket / queue / topic ARN -> statements
    key_policies: dict[str, list[dict[str, Any]]]  # key ARN -> statements
    queue_keys: dict[str, str]  # queue ARN -> key ARN (a customer managed key)
    topic_keys: dict[str, str]  # topic ARN -> key ARN
    bucket_keys: dict[str, str]  # bucket name -> key ARN, when a bucket's default encryption names a key
    names: dict[str, str] = field(default_factory=dict)  # physical id -> logical id (the report's placeholders)

    def role_of_arn(self, arn: str) -> str:
        [logical] = [r.name for r in self.roles.values() if r.arn == arn]
        return logical

    def without(self, role: str, sid: str) -> StackPolicies:
        """The same policies with one statement of one role removed (what a policy was before a change)."""
        before = self.roles[role]
        kept = [(s, label) for s, label in zip(before.statements, before.labels, strict=True) if s.get("Sid") != sid]
        assert len(kept) == len(before.statements) - 1, f"{role} has no statement {sid}"
        changed = Role(before.name, before.arn, [s for s, _ in kept], [label for _, label in kept], before.managed)
        return StackPolicies({**self.roles, role: changed}, self.resource_policies, self.key_policies,
                             self.queue_keys, self.topic_keys, self.bucket_keys, self.names)  # fmt: skip

    def key_requests(self, request: Request, call: ApiCall) -> list[Request]:
        """The KMS requests a call makes on the caller's behalf, for a customer managed key.

        - SQS with SSE-KMS: a producer needs kms:GenerateDataKey and kms:Decrypt, a consumer kms:Decrypt (SQS
          developer guide, "Configuring KMS permissions for producers / consumers").
        - SNS with SSE: a publisher needs kms:GenerateDataKey and kms:Decrypt (SNS developer guide, "Key management":
          "Allow a user to send messages to a topic with SSE").
        - S3 with SSE-KMS: reading an object needs kms:Decrypt, writing one kms:GenerateDataKey (S3 user guide,
          "Using server-side encryption with AWS KMS keys", "Permissions"). A bucket encrypted with the AWS managed
          key aws/s3 (BucketEncryption with no KMSMasterKeyID, as every bucket here) needs none in the caller's
          policy: that key's policy allows every principal of the account to use it through S3 (KMS developer
          guide, "AWS managed keys"), so nothing is added for it.
        """
        action, resource = request.action, request.resource
        key = None
        actions: list[str] = []
        if action in ("sqs:SendMessage", "sqs:ReceiveMessage"):
            key = self.queue_keys.get(resource)
            actions = ["kms:GenerateDataKey", "kms:Decrypt"] if action == "sqs:SendMessage" else ["kms:Decrypt"]
        elif action == "sns:Publish":
            key = self.topic_keys.get(resource)
            actions = ["kms:GenerateDataKey", "kms:Decrypt"]
        elif action in ("s3:GetObject", "s3:GetObjectVersion", "s3:PutObject") and call.operation != "HeadObject":
            key = self.bucket_keys.get(resource.removeprefix("arn:aws:s3:::").split("/", 1)[0])
            actions = ["kms:GenerateDataKey"] if action == "s3:PutObject" else ["kms:Decrypt"]
        return [Request(a, key) for a in actions] if key else []

    def check(self, call: ApiCall, on_grant: Callable[[Grant], None]) -> None:
        """Evaluate ``call`` (its ``requests`` set here), appending each refusal to ``call.denied``."""
        role = self.roles[call.principal]
        requests = authorizations(call)
        if call.key_exists is False:
            # S3 answers a GetObject/HeadObject of a key that does not exist with 404 only to a caller allowed
            # s3:ListBucket on the bucket; any other caller gets 403 AccessDenied (S3 API reference, GetObject and
            # HeadObject, "Permissions"). Which s3:prefix S3 evaluates for that is not documented: a ListBucket
            # grant narrowed by a condition on s3:prefix is not counted (the request carries no prefix here).
            bucket = _param(call.params, "Bucket")
            requests = [*requests, Request("s3:ListBucket", f"arn:aws:s3:::{bucket}")]
        for request in list(requests):
            requests.extend(self.key_requests(request, call))
        call.requests = requests
        for request in requests:
            if request.resource == "UNMAPPED":
                call.denied.append((request, "no mapping from this operation to IAM actions in the IAM harness"))
                continue
            context = {"aws:SecureTransport": "true", "aws:PrincipalArn": role.arn, "aws:RequestedRegion": REGION,
                       **dict(request.context)}  # fmt: skip
            # The SDKs call AWS over HTTPS: aws:SecureTransport is true (the stack's buckets deny it false).
            decision, allows = evaluate(role.statements, request, context)
            key_policy = self.key_policies.get(request.resource) if request.action.startswith("kms:") else None
            if key_policy is not None:
                decision = self._with_key_policy(key_policy, role, request, context, decision)
            if decision == "allow":
                for deny in self.resource_policies.get(_resource_policy_owner(request.resource), []):
                    if (
                        deny["Effect"] == "Deny"
                        and _names_principal(deny, role.arn)
                        and statement_applies(deny, request.action, request.resource, context)
                    ):
                        decision = f"denied by the resource policy's {deny.get('Sid', 'statement')}"
            if decision != "allow":
                call.denied.append((request, decision))
                continue
            for index in allows:
                statement = role.statements[index]
                for action in _listed(statement.get("Action", [])):
                    for resource in _listed(statement.get("Resource", "*")):
                        if matches(action, request.action, True) and matches(resource, request.resource, False):
                            on_grant(Grant(role.name, role.labels[index], str(action), str(resource)))

    @staticmethod
    def _with_key_policy(
        statements: list[dict[str, Any]], role: Role, request: Request, context: dict[str, str], identity: str
    ) -> str:
        """A KMS key is usable when its key policy allows the role itself, or allows the account (its root
        principal: the key policy then defers to IAM policies) and the role's policies allow it (KMS developer
        guide, "Key policies": "Allows access to the AWS account and enables IAM policies")."""
        account = f"arn:aws:iam::{ACCOUNT}:root"
        applicable = [s for s in statements if statement_applies(s, request.action, request.resource, context)]
        if any(s["Effect"] == "Deny" and _names_principal(s, role.arn) for s in applicable):
            return "denied by the key policy"
        allows = [s for s in applicable if s["Effect"] == "Allow"]
        if any(_names_principal(s, role.arn) for s in allows):
            return "allow"
        if any(
            account in _listed(s.get("Principal", {}).get("AWS", []))
            for s in allows
            if isinstance(s.get("Principal"), dict)
        ):
            return identity
        return "not allowed by the key policy"


def _resource_policy_owner(resource: str) -> str:
    """The ARN whose resource policy governs ``resource`` (an object's bucket; else itself)."""
    if resource.startswith("arn:aws:s3:::"):
        return resource.split("/", 1)[0]
    return resource


def stack_policies(stack: Any) -> StackPolicies:
    """The policies of the created stack (a local_stack.LocalStack), as CloudFormation rendered them."""
    resolver = stack.resolver
    resources = resolver.template["Resources"]

    def created(resource: dict[str, Any]) -> bool:
        return "Condition" not in resource or resolver.condition(resource["Condition"])

    roles: dict[str, Role] = {}
    resource_policies: dict[str, list[dict[str, Any]]] = {}
    key_policies: dict[str, list[dict[str, Any]]] = {}
    queue_keys: dict[str, str] = {}
    topic_keys: dict[str, str] = {}
    bucket_keys: dict[str, str] = {}

    def key_arn(node: Any) -> str:
        value = str(resolver.value(node))
        return value if value.startswith("arn:") else f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{value}"

    for logical, resource in resources.items():
        if not created(resource):
            continue
        properties = resource.get("Properties", {})
        kind = resource["Type"]
        if kind == "AWS::IAM::Role":
            statements, labels = [], []
            for policy in properties.get("Policies", []):
                document = resolver.value(policy["PolicyDocument"])
                for number, statement in enumerate(_listed(document["Statement"])):
                    statements.append(statement)
                    labels.append(statement.get("Sid") or f"{policy['PolicyName']} #{number + 1}")
            if logical not in resolver.physical:
                continue
            arn = f"arn:aws:iam::{ACCOUNT}:role/{resolver.physical[logical]}"
            managed = [str(resolver.value(m)) for m in properties.get("ManagedPolicyArns", [])]
            roles[logical] = Role(logical, arn, statements, labels, managed)
        elif kind == "AWS::S3::BucketPolicy":
            bucket = str(resolver.value(properties["Bucket"]))
            statements = _listed(resolver.value(properties["PolicyDocument"])["Statement"])
            resource_policies.setdefault(f"arn:aws:s3:::{bucket}", []).extend(statements)
        elif kind == "AWS::SQS::QueuePolicy":
            statements = _listed(resolver.value(properties["PolicyDocument"])["Statement"])
            for url in resolver.value(properties["Queues"]):
                resource_policies.setdefault(queue_arn(str(url)), []).extend(statements)
        elif kind == "AWS::SNS::TopicPolicy":
            statements = _listed(resolver.value(properties["PolicyDocument"])["Statement"])
            for topic in resolver.value(properties["Topics"]):
                resource_policies.setdefault(str(topic), []).extend(statements)
        elif kind == "AWS::KMS::Key" and logical in resolver.physical:
            key_policies[key_arn({"Ref": logical})] = _listed(resolver.value(properties["KeyPolicy"])["Statement"])
        elif kind == "AWS::SQS::Queue" and "KmsMasterKeyId" in properties:
            queue_keys[queue_arn(resolver.physical[logical])] = key_arn(properties["KmsMasterKeyId"])
        elif kind == "AWS::SNS::Topic" and "KmsMasterKeyId" in properties:
            topic_keys[resolver.physical[logical]] = key_arn(properties["KmsMasterKeyId"])
        elif kind == "AWS::S3::Bucket":
            rules = properties.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
            for rule in rules:
                default = rule.get("ServerSideEncryptionByDefault", {})
                if default.get("SSEAlgorithm", "").startswith("aws:kms") and "KMSMasterKeyID" in default:
                    bucket_keys[resolver.physical[logical]] = key_arn(default["KMSMasterKeyID"])
    # Physical names CloudFormation makes up (random suffixes, key ids): the report writes them as logical ids.
    made_up = ("AWS::S3::Bucket", "AWS::KMS::Key", "AWS::IAM::Role", "AWS::Lambda::Function")
    names = {str(physical): logical for logical, physical in resolver.physical.items()
             if resources.get(logical, {}).get("Type") in made_up}  # fmt: skip
    for logical in ("FullLoadJob", "CdcJob", "MaintenanceJob", "GoldJob", "VerifyJob"):  # named from the environment
        if logical in resolver.physical:
            names[f"job/{resolver.physical[logical]}"] = f"job/<{logical}>"
    return StackPolicies(roles, resource_policies, key_policies, queue_keys, topic_keys, bucket_keys, names)


# ----------------------------------------------------------------------------------------- the recorder

# What S3 and the other services answer a refused call with (their API references' error lists).
_DENIED_CODE = {"s3": "AccessDenied", "sqs": "AccessDenied", "sns": "AuthorizationError"}


@dataclass
class CallRecorder:
    """Sees every AWS call made in this process, checks the stack principals' ones, refuses what AWS would."""

    policies: StackPolicies | None = None  # set once the stack is created; calls before are the deployer's
    state_machine_role: str = ""  # the principal of moto's interpreter calls
    calls: list[ApiCall] = field(default_factory=list)
    used: set[Grant] = field(default_factory=set)
    enforce: bool = True  # answer a refused call with AccessDenied, as AWS would
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def denied(self) -> list[str]:
        with self.lock:
            return [
                f"{call.principal} may not {request.action} on {request.resource} ({why}; {call.service}:"
                f"{call.operation}{'' if call.key_exists is not False else ' of a missing key'})"
                for call in self.calls
                for request, why in call.denied
            ]

    def handlers(self) -> list[tuple[str, Callable[..., Any]]]:
        """botocore event handlers; registered BEFORE task_calls.py's, so the interpreter's lambda:invoke is checked
        before TaskCalls answers it."""
        # botocore calls the handlers of the most specific event name first: TaskCalls answers lambda.Invoke on
        # "before-call.lambda.Invoke", so the check is registered there too (before it), and runs once per call.
        return [
            ("before-parameter-build", self._params),
            ("before-call.lambda.Invoke", self._check),
            ("before-call", self._check),
        ]

    def _params(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["iam_params"] = params  # the same dict: task_calls renames the interpreter's keys in place later

    def _principal(self, context: dict[str, Any]) -> str | None:
        if self.policies is None:
            return None
        if _from_interpreter(context):
            return self.state_machine_role
        return current_principal()

    def _check(self, model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        principal = self._principal(context)
        if principal is None or self.policies is None or context.get("iam_checked"):
            return None
        context["iam_checked"] = True
        service = model.service_model.service_name
        if service == "states":
            service = "stepfunctions"
        call = ApiCall(principal, service, model.name, dict(context.get("iam_params") or {}))
        if service == "s3" and call.operation in ("GetObject", "HeadObject"):
            call.key_exists = _key_exists(_param(call.params, "Bucket"), _param(call.params, "Key"))
        grants: list[Grant] = []
        self.policies.check(call, grants.append)
        with self.lock:
            self.calls.append(call)
            if not call.denied:
                self.used.update(grants)
        if not call.denied or not self.enforce:
            return None
        request, why = call.denied[0]
        code = "403" if call.operation == "HeadObject" else _DENIED_CODE.get(service, "AccessDeniedException")
        message = (
            f"User: {principal} is not authorized to perform: {request.action} on resource: {request.resource} ({why})"
        )
        parsed = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 403}}
        return AWSResponse("https://iam-harness.invalid/", 403, {}, None), parsed

    def calls_of(self, principal: str) -> list[ApiCall]:
        with self.lock:
            return [c for c in self.calls if c.principal == principal]


def _key_exists(bucket: str, key: str) -> bool:
    """Whether the object exists right now in moto's S3 (the backend of this process, which the server uses)."""
    from moto.s3.models import s3_backends

    backend = s3_backends[ACCOUNT]["aws"]
    try:
        return key in backend.get_bucket(bucket).keys
    except Exception:  # no such bucket: S3 answers NoSuchBucket, not a missing-key 404
        return True


def install(patch: Any) -> CallRecorder:
    """The recorder, its hooks in every botocore session made from now on, and principals inherited by threads."""
    import boto3
    import botocore.handlers

    recorder = CallRecorder()
    patch.setattr(botocore.handlers, "BUILTIN_HANDLERS", [*recorder.handlers(), *botocore.handlers.BUILTIN_HANDLERS])
    patch.setattr(boto3, "DEFAULT_SESSION", None)
    inherit_principal_in_threads(patch)
    return recorder


# --------------------------------------------------------------------------------- least-privilege report

# Grants no recorded call uses, and who uses them: callers that are not Python code run here (the Java side of the
# jobs on Glue, the AWS services acting with the role), or code paths the deployed tests do not reach (each checked
# statically by tests/aws/test_iam.py, or by the test named). (role, statement, action, resource, why); the first
# match wins; a grant that matches none is "UNUSED" and fails the report test.
JAVA_FILES = "Iceberg S3FileIO (Java, on Glue): local Spark writes a local warehouse"
JAVA_CATALOG = "Iceberg GlueCatalog (Java, on Glue): local Spark uses a Hadoop catalog"
NOT_REACHED = "called by code the deployed tests do not reach: "
OUTSIDE_THE_TESTS = [
    ("*JobRole", "WriteSilver", "*", "*", JAVA_FILES),
    ("*JobRole", "ReadSilver", "*", "*", JAVA_FILES),
    ("*JobRole", "WriteVerifyResults", "*", "*", JAVA_FILES),
    ("*JobRole", "IcebergCatalog", "*", "*", JAVA_CATALOG),
    ("*JobRole", "ReadCatalog", "*", "*", JAVA_CATALOG),
    ("*JobRole", "WriteVerifyTable", "*", "*", JAVA_CATALOG),
    ("*JobRole", "JobLogs", "*", "*", "Glue continuous logging (the Glue service, with the job's role)"),
    (
        "*JobRole",
        "SecurityConfigurationKey",
        "*",
        "*",
        "Glue's security configuration: logs and bookmarks under QueueKey",
    ),
    ("*JobRole", "ConnectionNetwork", "*", "*", "Glue's JDBC connection: its network interfaces (the Glue service)"),
    ("*JobRole", "JobMetrics", "*", "*", "Glue's own job metrics (--enable-metrics, namespace Glue; the Glue service)"),
    (
        "*JobRole",
        "ReadArtifacts",
        "s3:ListBucket",
        "*",
        "S3's 404 for a configuration not uploaded yet (read_text takes it for none; without ListBucket: 403)",
    ),
    (
        "CdcJobRole",
        "PublishAlerts",
        "*",
        "*",
        NOT_REACHED + "a table's failure alert (glue/cdclake/alerts.py); test_iam.py",
    ),
    (
        "CdcJobRole",
        "AlertTopicKey",
        "*",
        "*",
        NOT_REACHED + "a table's failure alert (glue/cdclake/alerts.py); test_iam.py",
    ),
    (
        "FullLoadJobRole",
        "SourceSecret",
        "*",
        "*",
        NOT_REACHED + "the source catalog step when no configuration was uploaded (ops/source_catalog.py); test_iam.py",
    ),
    (
        "FullLoadJobRole",
        "WriteTableConfiguration",
        "*",
        "*",
        NOT_REACHED + "the source catalog step when no configuration was uploaded (ops/source_catalog.py); test_iam.py",
    ),
    ("PipelineStateMachineRole", "ExecutionLogs", "*", "*", "Step Functions execution logging (the service)"),
    ("PipelineStateMachineRole", "Tracing", "*", "*", "Step Functions X-Ray tracing (the service)"),
    (
        "PipelineStateMachineRole",
        "RunGlueJobs",
        "glue:GetJobRuns",
        "*",
        "Step Functions' documented policy for glue:startJobRun.sync (moto's resolver polls with GetJobRun only)",
    ),
    (
        "PipelineStateMachineRole",
        "RunGlueJobs",
        "glue:BatchStopJobRun",
        "*",
        "Step Functions stops a .sync job run when its execution is stopped (the service)",
    ),
    (
        "PipelineStateMachineRole",
        "RunGlueJobs",
        "*",
        "*:job/<MaintenanceJob>",
        NOT_REACHED + "RunMaintenance (MaintenanceEveryHours=0 here; the test starts the job); test_state_machine.py",
    ),
    (
        "PipelineStateMachineRole",
        "RunGlueJobs",
        "*",
        "*:job/<GoldJob>",
        NOT_REACHED + "RunGoldJob (GoldEveryIterations=0 here); test_state_machine.py",
    ),
    (
        "PipelineStateMachineRole",
        "RunGlueJobs",
        "glue:GetJobRun",
        "*:job/<VerifyJob>",
        "not called: StartVerifyJob starts the verify job without waiting (the grant is the statement's, shared)",
    ),
    (
        "PipelineStateMachineRole",
        "RunGlueJobs",
        "glue:StartJobRun",
        "*:job/<VerifyJob>",
        NOT_REACHED + "StartVerifyJob, with a source secret only (VerifyAfterFullLoad); test_deployed_verify.py",
    ),
    (
        "GoldJobRole",
        "*",
        "*",
        "*",
        NOT_REACHED + "the gold job (GoldEveryIterations=0 here); tests/aws/test_gold_job.py",
    ),
    (
        "CdcJobRole",
        "WriteFailureEpisodes",
        "s3:PutObject",
        "*",
        NOT_REACHED + "a table's failure episode (no table fails alone here); tests/aws/test_follow_queue.py",
    ),
    (
        "VerifyJobRole",
        "*",
        "*",
        "*",
        NOT_REACHED + "the verify job, with a source secret only; test_deployed_verify.py",
    ),
    (
        "WorkCheckFunctionRole",
        "*",
        "s3:PutObject",
        "*",
        NOT_REACHED + "mark_alerted, after a reload failed three times (tests/aws/test_reload_check.py)",
    ),
    (
        "DeployGuardFunctionRole",
        "*",
        "*",
        "*",
        "the DeployGuard custom resource at deploy (moto cannot run it; tests/aws/test_redeploy.py calls its handler)",
    ),
]


def _why_unused(grant: Grant, resource: str) -> str:
    for role, statement, action, resources, why in OUTSIDE_THE_TESTS:
        if (
            _pattern(role, False).match(grant.role)
            and _pattern(statement, False).match(grant.statement)
            and _pattern(action, True).match(grant.action)
            and _pattern(resources, False).match(resource)
        ):
            return why
    return "UNUSED"


_OBJECT_ACTIONS = ("s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject")
_BUCKET_ACTIONS = ("s3:ListBucket", "s3:ListBucketVersions")


def _applicable(action: str, resource: str) -> bool:
    """Whether an S3 action can ever be granted by that resource: object actions by object ARNs, bucket actions by
    bucket ARNs (a statement listing both actions on both ARNs grants only those two pairs)."""
    if not resource.startswith("arn:aws:s3:::"):
        return True
    is_object = "/" in resource
    return not ((action in _OBJECT_ACTIONS and not is_object) or (action in _BUCKET_ACTIONS and is_object))


def least_privilege_report(policies: StackPolicies, used: set[Grant], title: str) -> str:
    """Markdown: every grant of every role, used by a recorded call or why not (stable across runs: physical
    names are written as their logical ids)."""

    def named(text: str) -> str:
        for physical in sorted(policies.names, key=len, reverse=True):
            logical = policies.names[physical]
            text = text.replace(physical, logical if logical.startswith("job/") else f"<{logical}>")
        return text.replace(ACCOUNT, "<account>").replace(REGION, "<region>")

    lines = [f"### {title}", ""]
    for role in sorted(policies.roles.values(), key=lambda r: r.name):
        lines += [
            f"#### {role.name}",
            "",
            "| statement | action | resource | used by a recorded call |",
            "|---|---|---|---|",
        ]
        for statement, label in zip(role.statements, role.labels, strict=True):
            if statement.get("Effect") != "Allow":
                continue
            for action in _listed(statement.get("Action", [])):
                for resource in _listed(statement.get("Resource", "*")):
                    if not _applicable(str(action), str(resource)):
                        continue
                    grant = Grant(role.name, label, str(action), str(resource))
                    verdict = "yes" if grant in used else _why_unused(grant, named(str(resource)))
                    lines.append(f"| {label} | {action} | `{named(str(resource))}` | {verdict} |")
        for managed in role.managed:
            lines.append(f"| (managed) | | `{named(managed)}` | the service's own (Lambda logs, X-Ray) |")
        lines.append("")
    return "\n".join(lines)


def grant_rows(report: str) -> list[tuple[str, ...]]:
    """Each grant row's role heading, statement, action and resource, without its verdict."""
    rows, role = [], ""
    for line in report.splitlines():
        if line.startswith("#### "):
            role = line[5:]
        elif line.startswith("| ") and not line.startswith(("| statement", "|---")):
            rows.append((role, *(cell.strip() for cell in line.strip("|").split("|")[:3])))
    return rows


def unused_grants(report: str) -> list[str]:
    return [line for line in report.splitlines() if line.endswith("| UNUSED |")]


REPORT = __import__("pathlib").Path(__file__).resolve().parents[2] / "docs" / "iam.md"
WRITE_REPORT = "CDCLAKE_WRITE_IAM_REPORT"  # set to 1: the deployed modules write their sections of docs/iam.md


def _markers(section: str) -> tuple[str, str]:
    return f"<!-- harness report: {section} -->", f"<!-- end of harness report: {section} -->"


def committed_section(section: str, path: Any = REPORT) -> str | None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    start, end = _markers(section)
    if start not in text or end not in text:
        return None
    return str(text.split(start, 1)[1].split(end, 1)[0].strip("\n"))


def write_section(section: str, report: str, path: Any = REPORT) -> None:
    text = path.read_text(encoding="utf-8")
    start, end = _markers(section)
    if start in text:
        before, rest = text.split(start, 1)
        text = before + start + "\n" + report + "\n" + end + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + start + "\n" + report + "\n" + end + "\n"
    path.write_text(text, encoding="utf-8")


def dump(calls: CallRecorder, section: str) -> None:
    """With CDCLAKE_IAM_DUMP=<dir>: the policies and the used grants pickled, to write the report's labels again
    without another run of the stack (``least_privilege_report`` over the loaded pair)."""
    import os
    import pickle
    from pathlib import Path

    folder = os.environ.get("CDCLAKE_IAM_DUMP")
    if folder:
        Path(folder, f"{section}.pickle").write_bytes(pickle.dumps((calls.policies, calls.used)))
