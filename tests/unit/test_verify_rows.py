"""``verify.rows``: the row-by-row comparison, pure (no Spark, no source): each differing key names the columns
that differ between its own two rows, and no column that differs only in other rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdclake.verify.rows import RowShape, compare_digests, digest_rows, unlogged_digests

SHAPE = RowShape(columns=("id", "name", "price", "note"), types={"id": "int", "name": "string",
                 "price": "decimal(12,2)", "note": "string"}, key=("id",))  # fmt: skip
SILVER = [(1, "a", "1.50", "n1"), (2, "b", "2.00", "n2"), (3, "c", "3.00", None), (4, "d", "4.00", "n4")]


def _compare(source: Sequence[tuple[Any, ...]], silver: Sequence[tuple[Any, ...]], shape: RowShape = SHAPE) -> Any:
    named: dict[bytes, str] = {}
    return compare_digests(shape, digest_rows(shape, source, named), digest_rows(shape, silver, named), named=named)


def test_two_rows_changed_in_different_columns_each_name_only_their_own_column() -> None:
    # GIVEN a source whose row 1 changed its name and row 3 its note (NULL in silver, '' at the source)
    source = [(1, "changed", "1.50", "n1"), (2, "b", "2.00", "n2"), (3, "c", "3.00", ""), (4, "d", "4.00", "n4")]
    # WHEN the two sides are compared row by row
    found = _compare(source, SILVER)
    # THEN each differing key names exactly its own column, in the columns' order
    assert found.different == ["id=1", "id=3"]
    assert found.differing_columns == {"id=1": ["name"], "id=3": ["note"]}
    assert not (found.missing or found.unexpected or found.unlogged_defaults)
    # AND each key's source digest is kept, to tell whether its source row moves before it is confirmed
    assert set(found.source_digests) == {"id=1", "id=3"} and all(found.source_digests.values())


def test_a_row_with_two_changed_columns_names_both_and_its_neighbours_name_theirs() -> None:
    # GIVEN row 2 changed in two columns, row 4 in one of them, row 1 in another
    source = [(1, "a", "9.99", "n1"), (2, "B", "2.01", "n2"), (3, "c", "3.00", None), (4, "D", "4.00", "n4")]
    # WHEN compared
    found = _compare(source, SILVER)
    # THEN each row names its own columns: no column of another row leaks into it
    assert found.differing_columns == {"id=1": ["price"], "id=2": ["name", "price"], "id=4": ["name"]}


def test_missing_and_unexpected_keys_and_a_composite_key() -> None:
    # GIVEN a table keyed by two columns, with a row only at the source, one only in silver and one changed
    shape = RowShape(("region", "id", "v"), {"region": "string", "id": "int", "v": "string"}, ("region", "id"))
    silver = [("eu", 1, "x"), ("eu", 2, "y"), ("us", 1, "z")]
    source = [("eu", 1, "x"), ("eu", 2, "Y"), ("us", 2, "z")]
    # WHEN compared
    found = _compare(source, silver, shape)
    # THEN the keys are named by every key column, and the changed row by its one column
    assert found.missing == ["region=us, id=2"] and found.unexpected == ["region=us, id=1"]
    assert found.differing_columns == {"region=eu, id=2": ["v"]}
    assert found.source_digests["region=us, id=1"] is None  # not at the source


def test_a_row_differing_only_by_an_unlogged_default_is_told_apart_and_another_change_is_not() -> None:
    # GIVEN a column added with DEFAULT 5 at the source: silver holds NULL for the rows written before
    shape = RowShape(("id", "v", "score"), {"id": "int", "v": "string", "score": "int"}, ("id",))
    silver = [(1, "a", None), (2, "b", None), (3, "c", 7)]
    source = [(1, "a", 5), (2, "changed", 5), (3, "c", 7)]
    defaults = unlogged_digests(shape, {"score": [5]})
    named: dict[bytes, str] = {}
    # WHEN compared
    found = compare_digests(shape, digest_rows(shape, source, named), digest_rows(shape, silver, named), defaults)
    # THEN row 1 differs only by the default (told apart); row 2 changed too, and names both of its columns
    assert found.unlogged_defaults == ["id=1"]
    assert found.differing_columns == {"id=2": ["v", "score"]}


def test_keyless_rows_are_compared_as_multisets_and_named_by_their_values() -> None:
    # GIVEN a keyless table whose row (1, 'a') is twice at the source and once in silver
    shape = RowShape(("id", "note"), {"id": "int", "note": "string"})
    # WHEN compared
    found = _compare([(1, "a"), (1, "a"), (2, None)], [(1, "a"), (2, None), (3, "c")], shape)
    # THEN the extra copy is missing from silver and silver's own row is unexpected, each named by its values
    assert [name.split(" md5:")[0] for name in found.missing] == ["row (id=1, note=a)"]
    assert found.missing[0].endswith(" x1") and found.unexpected[0].startswith("row (id=3, note=c) md5:")
    assert not found.different and not found.differing_columns
