"""Typed reading of a YAML document whose every error names the file and the line."""

from __future__ import annotations

import math
from collections.abc import Callable

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cdclake.errors import ConfigError
from cdclake.identifiers import IDENTIFIER, name_problem
from cdclake.types import normalise_type


class YamlDoc:
    """Typed access to YAML nodes that reports errors with the file name and line."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: Node, message: str) -> ConfigError:
        return ConfigError(f"{self.source}, line {node.start_mark.line + 1}: {message}")

    def mapping(self, node: Node, what: str, allowed: set[str]) -> dict[str, Node]:
        if not isinstance(node, MappingNode):
            raise self.fail(node, f"{what} must be a mapping")
        result: dict[str, Node] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node, f"a key in {what}")
            if allowed and key not in allowed:
                raise self.fail(key_node, f"unknown key '{key}' in {what} (allowed: {', '.join(sorted(allowed))})")
            if key in result:
                raise self.fail(key_node, f"duplicate key '{key}' in {what}")
            result[key] = value_node
        return result

    def free_mapping(self, node: Node, what: str) -> dict[str, Node]:
        return self.mapping(node, what, set())

    def scalar(self, node: Node, what: str) -> str:
        if not isinstance(node, ScalarNode):
            raise self.fail(node, f"{what} must be a single value")
        return str(node.value)

    def boolean(self, node: Node, what: str) -> bool:
        value = self.scalar(node, what).lower()
        if value in ("true", "yes", "on"):
            return True
        if value in ("false", "no", "off"):
            return False
        raise self.fail(node, f"{what} must be true or false, not '{value}'")

    def number(self, node: Node, what: str, accept: Callable[[float], bool], expected: str) -> float:
        """A finite number that ``accept`` takes; else the error says ``what`` must be ``expected``."""
        value = self.scalar(node, what)
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and accept(number)):
            raise self.fail(node, f"{what} must be {expected}, not '{value}'")
        return number

    def integer(self, node: Node, what: str, minimum: int = 1) -> int:
        value = self.scalar(node, what)
        if not (value.isascii() and value.isdigit()) or int(value) < minimum:
            raise self.fail(node, f"{what} must be an integer >= {minimum}, not '{value}'")
        return int(value)

    def identifier(self, node: Node, what: str, plain: bool = False) -> str:
        """A schema, table or column name as DMS may write it (``plain``: letters, digits and ``_``
        only, for names cdclake itself makes up, such as a mart's)."""
        value = self.scalar(node, what)
        if plain and not IDENTIFIER.match(value):
            raise self.fail(node, f"{what} '{value}' is not a valid name (letters, digits and _, not first a digit)")
        problem = name_problem(value)
        if problem:
            raise self.fail(node, f"{what} '{value}' is not a valid column or table name: {problem}")
        return value

    def identifiers(self, node: Node, what: str) -> tuple[str, ...]:
        if isinstance(node, ScalarNode):
            return (self.identifier(node, what),)
        if not isinstance(node, SequenceNode):
            raise self.fail(node, f"{what} must be a name or a list of names")
        return tuple(self.identifier(item, what) for item in node.value)

    def type_name(self, node: Node, what: str) -> str:
        try:
            return normalise_type(self.scalar(node, what))
        except ValueError as exc:
            raise self.fail(node, f"{what}: {exc}") from None

    def typed_columns(self, node: Node, what: str) -> dict[str, str]:
        result: dict[str, str] = {}
        for name, type_node in self.free_mapping(node, what).items():
            problem = name_problem(name)
            if problem:
                raise self.fail(type_node, f"column name '{name}' in {what} is not valid: {problem}")
            result[name] = self.type_name(type_node, f"type of column '{name}'")
        return result
