"""Lambda handler: the DeployGuard custom resource (see guard)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext
from guard import GuardRequest, refusal

logger = Logger()


def respond(event: dict[str, Any], status: str, reason: str) -> None:
    """The custom-resource response CloudFormation waits for (a PUT to the pre-signed ResponseURL)."""
    body = json.dumps({
        "Status": status,
        "Reason": reason,
        "PhysicalResourceId": event.get("PhysicalResourceId") or "cdclake-deploy-guard",
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
    }).encode()  # fmt: skip
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": ""})
    with urllib.request.urlopen(request, timeout=30):  # CloudFormation's own pre-signed https URL
        pass


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> None:
    """Fails the stack's creation or update with one sentence when it would collide with a deleted stack's lake."""
    if event["RequestType"] == "Delete":
        respond(event, "SUCCESS", "nothing to check")
        return
    try:
        sentence = refusal(boto3.client("glue"), GuardRequest.from_event(event))
    except Exception as exc:  # an answer is owed in every case, or the stack waits an hour
        logger.exception("deploy guard failed")
        respond(event, "FAILED", f"the deploy guard could not check the Glue databases: {exc}")
        return
    if sentence:
        logger.warning("deploy refused", extra={"reason": sentence})
        respond(event, "FAILED", sentence)
    else:
        respond(event, "SUCCESS", "no database of a deleted stack in the way")
