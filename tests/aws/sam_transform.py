"""Expand the SAM transform of a packaged template, as CloudFormation would, without an AWS account.

Run with the SAM CLI's own Python (.venv/tools/sam/bin/python), which ships samtranslator:
    python sam_transform.py packaged.yaml transformed.json
The boto3 session it uses for managed-policy lookups follows AWS_ENDPOINT_URL (the local emulator).
"""

from __future__ import annotations

import json
import sys

import boto3
from samcli.yamlhelper import yaml_parse
from samtranslator.translator.managed_policy_translator import ManagedPolicyLoader
from samtranslator.translator.transform import transform


def main(packaged: str, transformed: str) -> None:
    with open(packaged, encoding="utf-8") as source:
        template = yaml_parse(source.read())
    loader = ManagedPolicyLoader(boto3.client("iam"))
    expanded = transform(template, {}, loader)
    with open(transformed, "w", encoding="utf-8") as target:
        json.dump(expanded, target, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
