"""Toolkit plugins with hostile schemas, installed through the real entry point group.

Only tests/adversarial/test_hostile_schemas.py puts this directory on the path. Every plugin
here must be left out with one log line, except `hostile_slow_regex`: its catastrophic
pattern is valid RE2, so it registers, and validation must still run in linear time.
"""

from __future__ import annotations

from typing import Any, ClassVar


def _definition(name: str, schema: Any) -> dict[str, Any]:
    return {"name": name, "schema": schema, "tools": ["noop"], "category": "hostile"}


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"child": schema}}
    return schema


class _Plugin:
    definition: ClassVar[Any]

    def initialize(self, config: dict[str, Any]) -> None:
        return None


class RemoteRef(_Plugin):
    definition = _definition(
        "hostile_remote_ref",
        {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/schema.json"}}},
    )


class RefCycle(_Plugin):
    definition = _definition(
        "hostile_ref_cycle",
        {
            "type": "object",
            "$defs": {
                "a": {"anyOf": [{"$ref": "#/$defs/b"}]},
                "b": {"allOf": [{"$ref": "#/$defs/a"}]},
            },
            "properties": {"x": {"$ref": "#/$defs/a"}},
        },
    )


class EnormousEnum(_Plugin):
    definition = _definition(
        "hostile_enum",
        {"type": "object", "properties": {"a": {"enum": [f"v{i}" for i in range(100_000)]}}},
    )


class TenThousandProperties(_Plugin):
    definition = _definition(
        "hostile_properties",
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}},
    )


class Backreference(_Plugin):
    definition = _definition(
        "hostile_backreference",
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+\\1$"}}},
    )


class DeeplyNested(_Plugin):
    definition = _definition("hostile_deep", _nested(5_000))


class NotADefinition(_Plugin):
    definition: ClassVar[Any] = ["not", "a", "mapping"]


class CatastrophicRegex(_Plugin):
    definition = _definition(
        "hostile_slow_regex",
        {
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "^(a+)+$", "x-secret": True}},
            "patternProperties": {"^(b+)+$": {"type": "string"}},
            "propertyNames": {"pattern": "^(a|aa)+$|^(b+)+$"},
        },
    )
