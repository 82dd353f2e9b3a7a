"""What EventBridge puts on the queue for S3 events, as tests of the Lambdas and the loop need it."""

from __future__ import annotations

import json

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account


def object_created_event(bucket: str, key: str, size: int) -> str:
    """The body EventBridge puts on the queue for an S3 "Object Created" event."""
    return json.dumps(
        {
            "version": "0",
            "id": f"evt-{key}",
            "detail-type": "Object Created",
            "source": "aws.s3",
            "account": ACCOUNT,
            "time": "2024-03-01T12:00:00Z",
            "region": REGION,
            "resources": [f"arn:aws:s3:::{bucket}"],
            "detail": {
                "version": "0",
                "bucket": {"name": bucket},
                "object": {"key": key, "size": size, "etag": "0", "sequencer": "0"},
                "request-id": "0",
                "requester": ACCOUNT,
                "reason": "PutObject",
            },
        }
    )
