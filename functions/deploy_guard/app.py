"""Lambda handler: the DeployGuard custom resource (see guard)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext
from guard import GuardRequest, refusal, update_refusal

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
    """Answers CloudFormation in every case, so the stack never waits for the guard (ServiceTimeout).

    Create: FAILED with one sentence when the stack would collide with a deleted stack's lake, or when the check
    cannot run. Update: FAILED only for a collision the update brings; an unexpected error answers SUCCESS with the
    reason logged (a FAILED Update is sent again by the rollback, which would then fail too). Delete: SUCCESS.
    """
    request = event.get("RequestType")
    if request == "Delete":
        respond(event, "SUCCESS", "nothing to check")
        return
    glue = boto3.client("glue")
    try:
        sentence = refusal(glue, GuardRequest.from_event(event)) if request == "Create" else update_refusal(glue, event)
    except Exception as exc:  # an answer is owed in every case, or the stack waits for ServiceTimeout
        if request == "Create":
            logger.exception("deploy guard could not check; the stack is not created")
            respond(event, "FAILED", f"The deploy guard could not read the Glue databases ({type(exc).__name__}: "
                                     f"{exc}); see its log, fix the cause and deploy again.")  # fmt: skip
        else:
            logger.exception("deploy guard could not check; the update goes on", extra={"request": request})
            respond(event, "SUCCESS", f"not checked ({type(exc).__name__}; see the deploy guard's log)")
        return
    if sentence:
        logger.warning("deploy refused", extra={"reason": sentence})
        respond(event, "FAILED", sentence)
    else:
        respond(event, "SUCCESS", "no database of a deleted stack in the way")
