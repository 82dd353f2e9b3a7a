"""The AWS calls of the state machine's task states, answered as AWS answers them: the tests' own seam.

moto's Step Functions interpreter makes each task's call with a boto3 client built to try once and wait as
long as the task may (which tells its clients from those of the code under test). This seam sits on botocore's
public event hooks (``before-parameter-build``, ``before-call``, ``after-call``), registered for every session
as moto registers its own, so nothing of moto's interpreter or Lambda backend is patched for these gaps:

- ``lambda:invoke``: moto runs Lambda code only in Docker (absent here) and otherwise echoes a canned payload.
  The call is answered by our handler, in-process, with the event the state machine sent and the environment
  the function was created with (``TaskCalls.lambda_handlers``), as Lambda would.
- ``states:startExecution`` and ``aws-sdk:sfn:*``: moto hands boto3 the PascalCase names Step Functions uses
  (StateMachineArn), where boto3's stepfunctions client wants camelCase and answers in camelCase. The names
  are translated both ways. An execution started without a name is named "None" by moto (AWS generates a
  UUID), so a second hand-over in one test would fail with ExecutionAlreadyExists: it is named as AWS would.
- results holding timestamps (DescribeReplicationTasks, ListExecutions, StartExecution) fail in moto with
  "Object of type datetime is not JSON serializable" (AWS gives them as text): they are given as text.

Besides the gaps, a test may ask for two faults of the hand-over (``lose_first_start_response``,
``successor_ended_before_retry``), raised where AWS would raise them.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from botocore.response import StreamingBody

# The read timeout moto's interpreter gives its clients (TimeoutSeconds.DEFAULT_TIMEOUT_SECONDS).
_INTERPRETER_READ_TIMEOUT = 99999999
LambdaHandler = Callable[[dict[str, Any], Any], Any]
# The interpreter's calls whose results carry timestamps Step Functions gives as text.
_TIMESTAMPED = {
    ("sfn", "StartExecution"),
    ("sfn", "ListExecutions"),
    ("database-migration-service", "DescribeReplicationTasks"),
}


@contextmanager
def environment_set(variables: dict[str, str]) -> Iterator[None]:
    """``variables`` in the process environment for the block, as a Lambda's configuration sets them; each
    one's value (or absence) before it is restored after."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _client_error(code: str, message: str, status: int, request_id: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message},
         "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": request_id}},
        "StartExecution",
    )  # fmt: skip


@dataclass
class TaskCalls:
    """How the state machine's task calls are answered, and what a test reads back of them."""

    # Lambda function name -> our handler, run in-process for the state machine's lambda:invoke
    lambda_handlers: dict[str, LambdaHandler] = field(default_factory=dict)
    lambda_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (function, event) in order
    # The first states:startExecution reaches Step Functions but its answer is lost (StepFunctions.SdkClientException).
    lose_first_start_response: bool = False
    # ... and the successor it started has ended before the retry arrives (ExecutionAlreadyExists).
    successor_ended_before_retry: bool = False
    successor_starts: int = 0  # states:startExecution calls delivered to Step Functions
    # makes the Lambda-handler context object (function name -> context)
    lambda_context: Callable[[str], Any] = field(default=lambda name: None)

    def handlers(self) -> list[tuple[str, Callable[..., Any]]]:
        """The botocore event handlers that answer the task calls, for every session made from now on
        (``botocore.handlers.BUILTIN_HANDLERS``, where moto adds its own)."""
        return [
            ("before-parameter-build.lambda.Invoke", self._note_invoke),
            ("before-call.lambda.Invoke", self._invoke),
            ("before-parameter-build.sfn", self._camel_case),
            ("after-call.sfn.StartExecution", self._started),
            ("after-call", self._as_step_functions_gives_it),
        ]

    # ---------------------------------------------------------------------------------------- lambda:invoke

    def _note_invoke(self, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if _from_interpreter(context):
            context["task_invoke"] = dict(params)

    def _invoke(self, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        call = context.get("task_invoke")
        if call is None:
            return None
        lam = boto3.client("lambda", region_name=context["client_region"])
        configuration = lam.get_function_configuration(FunctionName=call["FunctionName"])
        name = configuration["FunctionName"]
        handler = self.lambda_handlers[name]
        payload = call.get("Payload") or b"{}"
        event = json.loads(payload) if isinstance(payload, str | bytes | bytearray) else payload
        self.lambda_calls.append((name, event))
        environment = configuration.get("Environment", {}).get("Variables", {})
        answer: dict[str, Any] = {"StatusCode": 200, "ExecutedVersion": "$LATEST"}
        with environment_set({key: str(value) for key, value in environment.items()}):
            try:
                body = json.dumps(handler(event, self.lambda_context(name)))
            except Exception as exc:  # reported to Step Functions the way Lambda reports an unhandled error
                body = json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)})
                answer["FunctionError"] = "Unhandled"
        data = body.encode("utf-8")
        answer["Payload"] = StreamingBody(io.BytesIO(data), len(data))
        answer["ResponseMetadata"] = {"HTTPStatusCode": 200, "RequestId": str(uuid.uuid4())}
        return AWSResponse("https://lambda.invalid/", 200, {}, None), answer

    # ------------------------------------------------------------------------- sfn names, start, timestamps

    def _camel_case(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if not _from_interpreter(context):
            return
        for key in [k for k in params if k[:1].isupper()]:
            params[key[:1].lower() + key[1:]] = params.pop(key)
        context["task_pascal_case"] = True
        if model.name == "StartExecution":
            self._start_execution(params)

    def _start_execution(self, params: dict[str, Any]) -> None:
        params.setdefault("name", str(uuid.uuid4()))
        self.successor_starts += 1
        if self.successor_ended_before_retry and self.successor_starts == 2:
            # What Step Functions answers when the execution of that name has ended (moto cannot stop an
            # execution from inside the interpreter).
            raise _client_error("ExecutionAlreadyExists", f"Execution Already Exists: {params['name']}", 400, "again")

    def _started(self, context: dict[str, Any], **_: Any) -> None:
        if _from_interpreter(context) and self.lose_first_start_response and self.successor_starts == 1:
            # The start was delivered; the caller never hears of it.
            raise _client_error("SdkClient", "Unable to execute HTTP request: Read timed out", 500, "lost")

    def _as_step_functions_gives_it(
        self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        if not _from_interpreter(context):
            return
        service = model.service_model.service_id.hyphenize()
        if context.get("task_pascal_case"):
            for key in [k for k in parsed if k != "ResponseMetadata" and k[:1].islower()]:
                parsed[key[:1].upper() + key[1:]] = parsed.pop(key)
        if (service, model.name) in _TIMESTAMPED:
            as_text = json.loads(json.dumps(parsed, default=str))
            parsed.clear()
            parsed.update(as_text)


def _from_interpreter(context: dict[str, Any]) -> bool:
    """Whether the call is a task's, made by moto's interpreter: its clients try once and wait "forever"
    (``boto_client_for``: one attempt in all, its default task timeout as the read timeout), which no client
    of the code under test does."""
    config = context.get("client_config")
    return (
        config is not None
        and config.read_timeout == _INTERPRETER_READ_TIMEOUT
        and (config.retries or {}).get("total_max_attempts") == 1
    )
