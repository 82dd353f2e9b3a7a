"""identifiers.py: the rule names follow and the one way each SQL dialect quotes them (pure).

That Spark and Iceberg's procedures read these forms back as the same names is proven on real tables
by tests/spark/test_names_and_query.py.
"""

from __future__ import annotations

import pytest

from cdclake.identifiers import IDENTIFIER, name_problem, procedure_table, quote, quote_pg, sql_string


@pytest.mark.parametrize(
    ("name", "spark", "postgres"),
    [
        ("orders", "`orders`", '"orders"'),
        ("order-items", "`order-items`", '"order-items"'),
        ("we`ird", "`we``ird`", '"we`ird"'),
        ('say "hi"', '`say "hi"`', '"say ""hi"""'),
    ],
)
def test_each_dialect_doubles_only_its_own_quote(name: str, spark: str, postgres: str) -> None:
    assert quote(name) == spark
    assert quote_pg(name) == postgres


def test_a_sql_string_escapes_backslashes_before_quotes() -> None:
    # the backslash is escaped first: else the escape added for the quote would be doubled as well
    assert sql_string("it's") == "'it\\'s'"
    assert sql_string("a\\b") == "'a\\\\b'"
    assert sql_string("\\'") == "'\\\\\\''"


def test_a_procedure_table_is_a_string_of_backtick_quoted_parts() -> None:
    assert procedure_table("silver", "order-items") == "'`silver`.`order-items`'"
    assert procedure_table("db.x", "it's") == "'`db.x`.`it\\'s`'"


@pytest.mark.parametrize(
    ("name", "plain"),
    [("orders", True), ("_x1$", True), ("1st", False), ("order-items", False), ("a b", False), ("", False)],
)
def test_plain_identifiers_start_with_a_letter_or_underscore(name: str, plain: bool) -> None:
    assert bool(IDENTIFIER.match(name)) is plain


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("order-items", None),
        ("Größe #1", None),
        ("", "a name cannot be empty"),
        (" padded", "a name cannot start or end with a space"),
        ("padded ", "a name cannot start or end with a space"),
        ("s.t", "the character '.' (position 2) is not allowed in a name"),
        ("a/b", "the character '/' (position 2) is not allowed in a name"),
        ("ab\\", "the character '\\' (position 3) is not allowed in a name"),
        ("c:d", "the character ':' (position 2) is not allowed in a name"),
        ("tab\there", "the character U+0009 (position 4) is not allowed in a name"),
    ],
)
def test_name_problem_names_the_first_character_that_breaks_a_name_or_a_path(name: str, problem: str | None) -> None:
    assert name_problem(name) == problem
