"""Refusals an author can act on, and keywords a dialect would ignore, honoured or refused.

Each class of refused schema names what it refuses, the exact JSON pointer and what to
write instead (tests/test_schema.py checks the hostile vectors are refused in time; this
checks the messages say enough). Then the keywords of one draft written under the other:
`dependencies` is honoured under 2020-12 (validation and the secret split), the others
are refused with a hint rather than silently ignored.
"""

from __future__ import annotations

from typing import Any

import pytest

from toolkit_vault.errors import ConfigInvalid, SchemaRefused
from toolkit_vault.schema import CompiledSchema, compile_schema

DRAFT7 = "http://json-schema.org/draft-07/schema#"


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def draft7(schema: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": DRAFT7, **schema}


def refusal(schema: Any) -> str:
    with pytest.raises(SchemaRefused) as caught:
        compile_schema(schema)
    return caught.value.message


def details(schema: CompiledSchema, config: Any) -> list[dict[str, Any]]:
    with pytest.raises(ConfigInvalid) as caught:
        schema.split(config)
    return caught.value.details


REFUSALS = {
    "remote $ref": (
        obj(a={"$ref": "https://x.example/s.json"}),
        ["$ref at '/properties/a/$ref' is not local", "never fetches", "'#/$defs/<name>'"],
    ),
    "nested $id": (
        obj(a={"$id": "https://x.example/a", "type": "string"}),
        ["nested $id at '/properties/a/$id'", "refer to this subschema as '#/properties/a'"],
    ),
    "$dynamicRef": (
        {**obj(x={"$dynamicRef": "#a"}), "$defs": {"a": {"$dynamicAnchor": "a"}}},
        ["dynamic references at '/properties/x/$dynamicRef'", "use a local '$ref'"],
    ),
    "big integer": (
        obj(a={"maximum": 2**64}),
        ["integer beyond 2**53 at '/properties/a/maximum'", "write a float"],
    ),
    "not finite": (obj(a={"maximum": float("inf")}), ["not finite at '/properties/a/maximum'"]),
    "lone surrogate": (
        obj(a={"description": "x\ud800"}),
        ["lone surrogate at '/properties/a/description'"],
    ),
    "not JSON at all": (obj(a={"enum": [{1, 2}]}), ["a Python set at '/properties/a/enum/0'"]),
    "lookahead": (
        obj(p={"pattern": "^(?=x)"}),
        ["pattern at '/properties/p/pattern' uses a lookahead '(?='", "linear-time engine"],
    ),
    "lookbehind under a patternProperties key": (
        {"type": "object", "patternProperties": {"a/(?<!b)": {}}},
        ["pattern at '/patternProperties/a~1(?<!b)' uses a lookbehind '(?<!'"],
    ),
    "backreference": (obj(p={"pattern": "(a)\\1"}), ["uses a backreference '\\1'"]),
    "named backreference": (obj(p={"pattern": "(?<n>a)\\k<n>"}), ["named backreference"]),
    "too many repetitions": (obj(p={"pattern": "a{2000}"}), ["repetition count above 1000"]),
    "inline flags": (obj(p={"pattern": "(?i)a"}), ["not an ECMA-262 regex (inline flags"]),
    "Python group": (obj(p={"pattern": "(?P<n>a)"}), ["not an ECMA-262 regex (Python's"]),
    "non-ECMA escape": (obj(p={"pattern": "\\Z"}), ["(the escape '\\Z')"]),
    "unknown format": (
        obj(c={"type": "string", "format": "color"}),
        ["format 'color' at '/properties/c/format' is not one the vault checks", "uri,"],
    ),
    "cycle": (
        {"type": "object", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}},
        ["$ref cycle", "'properties' or 'items'"],
    ),
    "unevaluatedProperties with patternProperties": (
        {
            **obj(a={"patternProperties": {"^x": {}}}),
            "unevaluatedProperties": False,
        },
        ["unevaluatedProperties (at '')", "patternProperties (at '/properties/a')"],
    ),
    "items array in 2020-12": (
        obj(pair={"items": [{"type": "string"}]}),
        ["at '/properties/pair/items'", "'prefixItems'"],
    ),
    "anchor as $id in 2020-12": (
        {"type": "object", "$defs": {"a": {"$id": "#a"}}},
        ["at '/$defs/a/$id'", "'$anchor'"],
    ),
    "additionalItems in 2020-12": (
        obj(pair={"prefixItems": [{}], "additionalItems": False}),
        ["'additionalItems' at '/properties/pair'", "2020-12 does not define", "'items'"],
    ),
    "prefixItems in draft-07": (
        draft7(obj(pair={"prefixItems": [{}]})),
        ["'prefixItems' at '/properties/pair'", "draft-07 does not define", "'items'"],
    ),
    "dependentRequired in draft-07": (
        draft7({"type": "object", "dependentRequired": {"a": ["b"]}}),
        ["'dependentRequired' at ''", "use 'dependencies'"],
    ),
    "unevaluatedProperties in draft-07": (
        draft7({"type": "object", "unevaluatedProperties": False}),
        ["'unevaluatedProperties' at ''", "'additionalProperties'"],
    ),
    "$defs in draft-07": (
        draft7({**obj(a={"$ref": "#/$defs/s"}), "$defs": {"s": {}}}),
        ["$ref '#/$defs/s' does not point at a subschema", "'definitions'"],
    ),
    "media type draft-07 cannot check": (
        draft7(obj(img={"contentMediaType": "image/png", "contentEncoding": "base64"})),
        ["contentMediaType 'image/png' at '/properties/img/contentMediaType'", "annotation"],
    ),
}


@pytest.mark.parametrize(("schema", "expected"), REFUSALS.values(), ids=list(REFUSALS))
def test_refusals_name_the_construct_the_pointer_and_the_fix(
    schema: Any, expected: list[str]
) -> None:
    message = refusal(schema)
    for text in expected:
        assert text in message


def test_dependencies_is_honoured_under_2020_12() -> None:
    """The issue's example: silently ignored, it let `user` in without `password`."""
    schema = compile_schema({"type": "object", "dependencies": {"user": ["password"]}})
    assert details(schema, {"user": "u"}) == [{"pointer": "", "keyword": "dependencies"}]
    schema.split({"user": "u", "password": "p"})
    schema.split({"other": 1})


@pytest.mark.parametrize("dialect", [None, DRAFT7])
def test_a_dependency_schema_marks_secrets_in_both_dialects(dialect: str | None) -> None:
    """The split follows `dependencies` in place, as the validator does: a secret marked
    there stays secret and a property declared there is public (undeclared, it would be a
    secret: fail closed)."""
    schema: dict[str, Any] = {
        **obj(db={"type": "string"}, host={"type": "string"}),
        "dependencies": {"db": obj(password={"writeOnly": True}, port={"type": "integer"})},
    }
    if dialect:
        schema["$schema"] = dialect
    compiled = compile_schema(schema)
    assert compiled.split({"db": "d", "password": "pw", "port": 1}) == (
        {"db": "d", "port": 1},
        {"/password": "pw"},
    )
    assert details(compiled, {"db": "d", "port": "x"}) == [{"pointer": "/port", "keyword": "type"}]


def test_draft7_content_keywords_assert_json_and_base64() -> None:
    schema = compile_schema(
        draft7(
            obj(
                doc={"type": "string", "contentMediaType": "application/json"},
                blob={"contentEncoding": "base64", "contentMediaType": "application/json"},
            )
        )
    )
    schema.split({"doc": '{"a": [1]}', "blob": "eyJhIjogMX0="})
    assert details(schema, {"doc": "{:}"}) == [{"pointer": "/doc", "keyword": "contentMediaType"}]
    assert details(schema, {"doc": "[" * 100_000}) == [
        {"pointer": "/doc", "keyword": "contentMediaType"}
    ]
    assert details(schema, {"doc": "NaN"}) == [{"pointer": "/doc", "keyword": "contentMediaType"}]
    assert details(schema, {"blob": "e%J9"}) == [{"pointer": "/blob", "keyword": "contentEncoding"}]


def test_2020_12_content_keywords_stay_annotations() -> None:
    schema = compile_schema(obj(doc={"contentMediaType": "image/png"}))
    schema.split({"doc": "not a png"})


@pytest.mark.parametrize(
    ("value", "pointer"),
    [
        ({"n": 2**53}, "/n"),
        ({"list": [1, -(2**60)]}, "/list/1"),
        ({"deep": {"a~b": 10**30}}, "/deep/a~0b"),
    ],
)
def test_configs_canonical_json_cannot_carry_are_invalid_not_a_crash(
    value: dict[str, Any], pointer: str
) -> None:
    """The public half is digested as canonical JSON (RFC 8785): a big integer there used
    to raise out of `crypto.public_digest` after validation had passed."""
    schema = compile_schema(obj(n={"type": "integer"}))
    assert details(schema, value) == [{"pointer": pointer, "keyword": "i-json"}]
    schema.split({"n": 2**53 - 1, "list": [-(2**53) + 1]})
