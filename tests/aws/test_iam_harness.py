"""The IAM harness's own rules (iam_harness.py), on small policies: what it allows and refuses must be what AWS
does, or the deployed tests that rely on it prove nothing."""

from __future__ import annotations

from typing import Any

import pytest
from iam_harness import ApiCall, Grant, Request, Role, StackPolicies, authorizations, conditions_hold, evaluate

ACCOUNT = "123456789012"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/check"
ARTIFACTS = "arn:aws:s3:::artifacts"
QUEUE = f"arn:aws:sqs:us-east-1:{ACCOUNT}:files.fifo"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234"
READ_REQUEST = {
    "Effect": "Allow",
    "Action": ["s3:GetObject", "s3:PutObject"],
    "Resource": f"{ARTIFACTS}/state/reloads.json",
}
LIST_REQUEST = {"Sid": "ListReloadRequest", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": ARTIFACTS,
                "Condition": {"StringEquals": {"s3:prefix": "state/reloads.json"}}}  # fmt: skip
DENY_INSECURE = {"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
                 "Resource": [ARTIFACTS, f"{ARTIFACTS}/*"],
                 "Condition": {"Bool": {"aws:SecureTransport": "false"}}}  # fmt: skip
ACCOUNT_ADMINISTERS = {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "kms:*",
                       "Resource": "*"}  # fmt: skip


def policies(*statements: dict[str, Any], bucket_policy: list[dict[str, Any]] | None = None) -> StackPolicies:
    role = Role("check", ROLE_ARN, list(statements), [s.get("Sid", f"#{n}") for n, s in enumerate(statements)])
    return StackPolicies(
        roles={"check": role}, resource_policies={ARTIFACTS: bucket_policy or [DENY_INSECURE]},
        key_policies={KEY: [ACCOUNT_ADMINISTERS]}, queue_keys={QUEUE: KEY}, topic_keys={}, bucket_keys={},
    )  # fmt: skip


def refusals(stack: StackPolicies, call: ApiCall) -> list[str]:
    used: list[Grant] = []
    stack.check(call, used.append)
    return [f"{request.action} {request.resource}" for request, _ in call.denied]


def read(key_exists: bool) -> ApiCall:
    return ApiCall("check", "s3", "GetObject", {"Bucket": "artifacts", "Key": "state/reloads.json"}, key_exists)


def test_a_read_of_a_missing_key_is_refused_without_list_bucket_on_the_bucket() -> None:
    # GIVEN the work check's old policy: GetObject on the one key, no ListBucket
    stack = policies(READ_REQUEST)
    # WHEN the key exists THEN the read is allowed; WHEN it does not THEN S3 answers 403 (ListBucket is missing)
    assert refusals(stack, read(key_exists=True)) == []
    assert refusals(stack, read(key_exists=False)) == [f"s3:ListBucket {ARTIFACTS}"]
    # AND a ListBucket narrowed by s3:prefix is not counted for that rule (S3 does not document the prefix it uses)
    assert refusals(policies(READ_REQUEST, LIST_REQUEST), read(key_exists=False)) == [f"s3:ListBucket {ARTIFACTS}"]
    # AND an unconditional ListBucket on the bucket makes it S3's 404
    unconditional = {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": ARTIFACTS}
    assert refusals(policies(READ_REQUEST, unconditional), read(key_exists=False)) == []


def test_a_listing_is_allowed_only_for_the_prefix_its_condition_names() -> None:
    stack = policies(READ_REQUEST, LIST_REQUEST)

    def listing(**params: Any) -> ApiCall:
        return ApiCall("check", "s3", "ListObjectsV2", {"Bucket": "artifacts", **params})

    assert refusals(stack, listing(Prefix="state/reloads.json", MaxKeys=1)) == []
    assert refusals(stack, listing(Prefix="state/")) == [f"s3:ListBucket {ARTIFACTS}"]
    assert refusals(stack, listing()) == [f"s3:ListBucket {ARTIFACTS}"]  # s3:prefix is "" without a Prefix
    # AND the old policy (no ListReloadRequest) refuses even the one key's listing
    assert refusals(stack.without("check", "ListReloadRequest"), listing(Prefix="state/reloads.json")) != []


def test_an_encrypted_queue_needs_its_key_for_the_consumer() -> None:
    receive = {"Effect": "Allow", "Action": "sqs:ReceiveMessage", "Resource": QUEUE}
    call = ApiCall("check", "sqs", "ReceiveMessage", {"QueueUrl": f"https://sqs/{ACCOUNT}/files.fifo"})
    assert refusals(policies(receive), call) == [f"kms:Decrypt {KEY}"]
    key = {"Effect": "Allow", "Action": "kms:Decrypt", "Resource": KEY}
    assert refusals(policies(receive, key), ApiCall(call.principal, call.service, call.operation, call.params)) == []


def test_a_key_policy_that_does_not_delegate_to_iam_refuses_the_role() -> None:
    stack = policies({"Effect": "Allow", "Action": ["sqs:SendMessage", "kms:*"], "Resource": "*"})
    stack.key_policies[KEY] = [{"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                                "Action": "kms:*", "Resource": "*"}]  # fmt: skip
    call = ApiCall("check", "sqs", "SendMessage", {"QueueUrl": f"https://sqs/{ACCOUNT}/files.fifo"})
    assert refusals(stack, call) == [f"kms:GenerateDataKey {KEY}", f"kms:Decrypt {KEY}"]


def test_a_bucket_policy_deny_refuses_what_the_role_allows() -> None:
    deny_puts = {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": f"{ARTIFACTS}/state/*"}
    stack = policies(READ_REQUEST, bucket_policy=[DENY_INSECURE, deny_puts])
    put = ApiCall("check", "s3", "PutObject", {"Bucket": "artifacts", "Key": "state/reloads.json"})
    assert refusals(stack, put) == [f"s3:PutObject {ARTIFACTS}/state/reloads.json"]
    # AND the stack's DenyInsecureTransport does not apply: the SDKs call over HTTPS
    assert refusals(policies(READ_REQUEST), ApiCall("check", "s3", "PutObject", dict(put.params))) == []


def test_wildcards_not_action_and_conditions_are_read_as_iam_reads_them() -> None:
    secret = "arn:aws:secretsmanager:us-east-1:1:secret:cdclake/source-??????"
    read_secret = [{"Effect": "Allow", "Action": "secretsmanager:Get*", "Resource": secret}]
    get = "secretsmanager:GetSecretValue"
    assert evaluate(read_secret, Request(get, secret.replace("??????", "AbC123")), {})[0] == "allow"
    assert evaluate(read_secret, Request(get, secret.replace("??????", "AbC1234")), {})[0] != "allow"
    # a "." in a pattern is a dot, not any character
    one_object = [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"{ARTIFACTS}/a.json"}]
    assert evaluate(one_object, Request("s3:GetObject", f"{ARTIFACTS}/aXjson"), {})[0] != "allow"
    everything_but_s3 = [{"Effect": "Allow", "NotAction": "s3:*", "Resource": "*"}]
    assert evaluate(everything_but_s3, Request("sqs:SendMessage", QUEUE), {})[0] == "allow"
    assert evaluate(everything_but_s3, Request("s3:GetObject", ARTIFACTS), {})[0] == "implicit deny"
    # A failing condition makes an Allow statement not apply; it is no explicit deny (moto's evaluator says DENIED)
    both = [LIST_REQUEST, {"Effect": "Allow", "Action": "s3:ListBucket", "Resource": ARTIFACTS}]
    assert evaluate(both, Request("s3:ListBucket", ARTIFACTS), {"s3:prefix": "other/"})[0] == "allow"
    assert conditions_hold({"StringNotEquals": {"aws:SourceAccount": "1"}}, {})  # a negated operator, key absent
    assert not conditions_hold({"StringLike": {"s3:prefix": "state/*"}}, {})
    assert conditions_hold({"StringLikeIfExists": {"s3:prefix": "state/*"}}, {})
    with pytest.raises(AssertionError, match="not evaluated"):
        conditions_hold({"DateGreaterThan": {"aws:CurrentTime": "2020-01-01"}}, {})


def test_every_operation_the_stack_calls_maps_to_its_iam_action() -> None:
    cases = {
        ("s3", "HeadObject", (("Bucket", "b"), ("Key", "k"))): [Request("s3:GetObject", "arn:aws:s3:::b/k")],
        ("s3", "ListObjectsV2", (("Bucket", "b"), ("Prefix", "dms/"))): [
            Request("s3:ListBucket", "arn:aws:s3:::b", (("s3:prefix", "dms/"),))],
        ("s3", "PutObject", (("Bucket", "b"), ("Key", "k"), ("IfNoneMatch", "*"))): [
            Request("s3:PutObject", "arn:aws:s3:::b/k", (("s3:if-none-match", "*"),))],
        ("sqs", "DeleteMessageBatch", (("QueueUrl", "https://q/1/files.fifo"),)): [
            Request("sqs:DeleteMessage", "arn:aws:sqs:us-east-1:123456789012:files.fifo")],
        ("stepfunctions", "StartExecution", (("StateMachineArn", "arn:sm"),)): [
            Request("states:StartExecution", "arn:sm")],
        ("glue", "GetJobRuns", (("JobName", "j"),)): [
            Request("glue:GetJobRuns", "arn:aws:glue:us-east-1:123456789012:job/j")],
        ("ec2", "RunInstances", ()): [Request("ec2:RunInstances", "UNMAPPED")],  # unknown: refused, named
    }  # fmt: skip
    for (service, operation, params), expected in cases.items():
        assert authorizations(ApiCall("check", service, operation, dict(params))) == expected, operation
