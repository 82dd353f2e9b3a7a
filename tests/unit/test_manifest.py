"""The CDC batch manifest: JSON round trip and clear errors for malformed documents."""

from __future__ import annotations

import json
import re

import pytest

from cdclake.dms.manifest import ManifestEntry, read_manifest, write_manifest
from cdclake.errors import BadInputError

ENTRIES = [
    ManifestEntry("s3://bucket/dms/public/hosts/20240301-1200000000.csv", 123),
    ManifestEntry("public/hosts/20240301-1300000000.csv.gz", 0),
]


def test_round_trip() -> None:
    # GIVEN / WHEN entries are written and read back
    # THEN they are the same entries in the same order
    assert read_manifest(write_manifest(ENTRIES)) == ENTRIES


def test_written_document_shape() -> None:
    # GIVEN / WHEN entries are written
    # THEN the JSON is {"files": [{"key", "size"}]}
    assert json.loads(write_manifest(ENTRIES[:1])) == {
        "files": [{"key": "s3://bucket/dms/public/hosts/20240301-1200000000.csv", "size": 123}]
    }


def test_empty_manifest() -> None:
    # GIVEN / WHEN an empty batch is written and read / THEN it has no entries
    assert read_manifest(write_manifest([])) == []


def test_size_defaults_to_zero() -> None:
    # GIVEN an entry without size
    # WHEN / THEN the size is 0
    assert read_manifest('{"files": [{"key": "s/t/20240301-1200000000.csv"}]}') == [
        ManifestEntry("s/t/20240301-1200000000.csv", 0)
    ]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "",
        "{}",
        "[]",
        '{"files": 3}',
        '{"files": "abc"}',
        '{"files": [{"size": 1}]}',
        '{"files": [{"key": "k", "size": "big"}]}',
        '{"files": ["s/t/20240301-1200000000.csv"]}',
    ],
)
def test_malformed_manifest(text: str) -> None:
    # GIVEN a malformed manifest
    # WHEN / THEN BadInputError names its source and the expected shape
    with pytest.raises(BadInputError, match=re.escape("The manifest s3://b/m.json is not valid (")):
        read_manifest(text, "s3://b/m.json")


def test_malformed_manifest_names_expected_shape() -> None:
    # GIVEN / WHEN a manifest without files is read
    # THEN the error shows the expected document
    with pytest.raises(BadInputError, match=re.escape('expected {"files": [{"key": ...}]}.')):
        read_manifest("{}")


def test_null_key_is_malformed() -> None:
    # GIVEN an entry whose key is null
    # WHEN / THEN the manifest is rejected rather than naming a file called "None"
    with pytest.raises(BadInputError):
        read_manifest('{"files": [{"key": null}]}')
