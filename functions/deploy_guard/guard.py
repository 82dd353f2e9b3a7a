"""Why a stack cannot be created over what a deleted stack kept, in one sentence (or nothing).

`make destroy` keeps the Glue databases and the silver bucket (DeletionPolicy Retain). A new stack that
creates the databases again fails with CloudFormation's "Database already exists", and one that creates a
new silver bucket next to the retained database writes new tables into the old bucket (Iceberg's GlueCatalog
puts a table under its database's LocationUri), which the new role may not write. `make deploy`'s preflight
passes the right parameters; a plain `sam deploy` gets this check's sentence instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GuardRequest:
    """The custom resource's properties (CloudFormation sends every value as a string)."""

    silver_database: str
    gold_database: str
    existing_silver_database: bool
    existing_gold_database: bool
    existing_silver_bucket: str  # "" = the stack creates its silver bucket
    creating: bool  # RequestType Create: the stack's own databases do not exist yet

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> GuardRequest:
        properties = event["ResourceProperties"]
        return cls(
            silver_database=properties["SilverDatabase"],
            gold_database=properties["GoldDatabase"],
            existing_silver_database=properties["ExistingSilverDatabase"] == "true",
            existing_gold_database=properties["ExistingGoldDatabase"] == "true",
            existing_silver_bucket=properties.get("ExistingSilverBucket", ""),
            creating=event["RequestType"] == "Create",
        )


def database_location(glue: Any, name: str) -> str | None:
    """The database's LocationUri ("" when it has none); None when there is no such database."""
    try:
        database = glue.get_database(Name=name)["Database"]
    except glue.exceptions.EntityNotFoundException:
        return None
    return str(database.get("LocationUri", ""))


def bucket_of(location: str) -> str:
    """``s3://bucket/warehouse`` -> ``bucket`` ("" for anything else)."""
    return location[len("s3://") :].split("/", 1)[0] if location.startswith("s3://") else ""


def refusal(glue: Any, request: GuardRequest) -> str | None:
    """One sentence naming the parameters the deploy needs, or None when it can go on."""
    silver = database_location(glue, request.silver_database)
    gold = database_location(glue, request.gold_database)
    needed: dict[str, str] = {}
    if silver is not None and not request.existing_silver_database and request.creating:
        needed["ExistingSilverDatabase"] = "true"
    if gold is not None and not request.existing_gold_database and request.creating:
        needed["ExistingGoldDatabase"] = "true"
    adopted = request.existing_silver_database or "ExistingSilverDatabase" in needed
    kept_bucket = bucket_of(silver or "")
    if silver is not None and adopted and kept_bucket and request.existing_silver_bucket != kept_bucket:
        needed["ExistingSilverBucket"] = kept_bucket
    if not needed:
        return None
    kept = ((request.silver_database, silver), (request.gold_database, gold))
    found = " and ".join(name for name, location in kept if location is not None)
    overrides = " ".join(f"{k}={v}" for k, v in needed.items())
    return (
        f"The Glue database {found} of an earlier cdclake stack exists (kept when it was deleted): deploy with "
        f"--parameter-overrides {overrides} to use it and its silver bucket (make deploy passes these itself)."
    )


def update_refusal(glue: Any, event: dict[str, Any]) -> str | None:
    """On Update: the refusal of the new properties only when the old ones were not refused too.

    A refusal the stack already had is not this update's doing, and refusing it again would fail the rollback's
    own Update, which sends the old properties back (UPDATE_ROLLBACK_FAILED): let it through (the caller logs it).
    """
    sentence = refusal(glue, GuardRequest.from_event(event))
    if sentence is None:
        return None
    before = GuardRequest.from_event({**event, "ResourceProperties": event["OldResourceProperties"]})
    return sentence if refusal(glue, before) is None else None
