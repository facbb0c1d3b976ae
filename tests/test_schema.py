"""toolkit_vault.schema: hostile schemas are refused, configs validated, secrets split out."""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit_vault.errors import ConfigInvalid, SchemaRefused
from toolkit_vault.schema import (
    CompiledSchema,
    canonical_json,
    compile_schema,
    merge_secrets,
    schema_digest,
)
from toolkit_vault.schema import split as split_module
from toolkit_vault.schema.split import MEMO_ENTRIES

VECTORS = json.loads((Path(__file__).parent / "vectors" / "schemas_hostile.json").read_text())
DRAFT7 = "http://json-schema.org/draft-07/schema#"
FILESYSTEM = {
    "type": "object",
    "properties": {
        "root_dir": {"type": "string", "description": "Root directory for file operations"}
    },
    "required": ["root_dir"],
}


@contextmanager
def within(seconds: float) -> Iterator[None]:
    start = time.perf_counter()
    yield
    assert time.perf_counter() - start < seconds


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def details(schema: CompiledSchema, config: Any) -> list[dict[str, Any]]:
    with pytest.raises(ConfigInvalid) as caught:
        schema.validate(config)
    assert caught.value.message == "config does not match the toolkit schema"
    return caught.value.details


def round_trip(schema: dict[str, Any], config: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """Split, check the inverse and that the input was left alone, return both halves."""
    before = copy.deepcopy(config)
    public, secrets = compile_schema(schema).split(config)
    assert config == before
    assert merge_secrets(public, secrets) == config
    return public, secrets


# --- the spec's example -------------------------------------------------------------------


def test_filesystem_schema_from_the_spec() -> None:
    schema = compile_schema(FILESYSTEM)
    schema.validate({"root_dir": "/tmp"})
    assert details(schema, {}) == [{"pointer": "/root_dir", "keyword": "required"}]
    assert schema.split({"root_dir": "/tmp"}) == ({"root_dir": "/tmp"}, {})
    assert schema.secret_pointers({"root_dir": "/tmp"}) == []
    assert schema.digest == schema_digest(FILESYSTEM)
    assert dict(schema.schema) == FILESYSTEM


# --- canonical JSON and digests -------------------------------------------------------------


def test_canonical_json_is_rfc8785() -> None:
    assert canonical_json({"b": 1, "a": [1.0, "x", None]}) == b'{"a":[1,"x",null],"b":1}'
    assert canonical_json({"\u00e9": 1e21}) == '{"\u00e9":1e+21}'.encode()


def test_digest_is_sha256_of_canonical_json_and_ignores_key_order() -> None:
    reordered = {"required": ["root_dir"], "properties": FILESYSTEM["properties"], "type": "object"}
    expected = "sha256:" + hashlib.sha256(canonical_json(FILESYSTEM)).hexdigest()
    assert schema_digest(FILESYSTEM) == schema_digest(reordered) == expected


def test_compile_is_cached_per_digest() -> None:
    reordered = dict(reversed(list(copy.deepcopy(FILESYSTEM).items())))
    assert compile_schema(FILESYSTEM) is compile_schema(reordered)
    assert compile_schema(FILESYSTEM) is not compile_schema({**FILESYSTEM, "title": "other"})


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["refused"], ids=lambda v: v["name"])
def test_hostile_schema_vectors_are_refused(vector: dict[str, Any]) -> None:
    with within(1.0), pytest.raises(SchemaRefused) as caught:
        compile_schema(vector["schema"])
    assert vector["refusal"] in caught.value.message


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = obj(child=schema)
    return schema


@pytest.mark.parametrize(
    ("schema", "refusal"),
    [
        (obj(**{f"p{i}": {"type": "string"} for i in range(10_000)}), "properties"),
        (obj(a={"enum": list(range(5_000))}), "enum"),
        (nested(100), "deeper"),
        (nested(10_000), "deeper"),
        ({"type": "object", "description": "x" * 300_000}, "larger"),
        (obj(a={"maximum": float("nan")}), "plain JSON"),
        (obj(a={"maximum": 2**60}), "plain JSON"),
    ],
    ids=["10k-properties", "huge-enum", "depth-100", "depth-10k", "oversize", "nan", "bigint"],
)
def test_oversized_schemas_are_refused_quickly(schema: dict[str, Any], refusal: str) -> None:
    with within(1.0), pytest.raises(SchemaRefused) as caught:
        compile_schema(schema)
    assert refusal in caught.value.message


def test_too_many_subschemas_are_refused_quickly() -> None:
    """The meta-schema check costs ~0.5 ms per subschema, so their number is bounded: 20,000
    unchecked would cost about 10 s; refused by their count, a small fraction of a second
    (the bound leaves room for a busy CI worker, where 6,000 once took 1.2 s)."""
    with within(2.0), pytest.raises(SchemaRefused) as caught:
        compile_schema({"type": "object", "allOf": [{} for _ in range(20_000)]})
    assert "JSON objects" in caught.value.message


def test_many_spellings_of_one_ref_cost_nothing_extra() -> None:
    """Percent-encoded spellings all land on one subschema, which is audited once."""
    spellings = {
        "#/"
        + "".join(f"%{ord(c):02X}" if (i >> j) & 1 else c for j, c in enumerate("$defs"))
        + "/"
        + "".join(f"%{ord(c):02X}" if (i >> (j + 5)) & 1 else c for j, c in enumerate("big"))
        for i in range(256)
    }
    assert len(spellings) == 256
    schema = {
        "type": "object",
        "$defs": {"big": obj(**{f"q{i}": {"type": "string"} for i in range(400)})},
        "properties": {f"r{i}": {"$ref": ref} for i, ref in enumerate(sorted(spellings))},
    }
    with within(3.0):
        compile_schema(schema)


def test_bounds_admit_schemas_just_inside_them() -> None:
    """Each schema at its bound compiles and then does its job: it validates and splits."""
    wide = compile_schema(obj(**{f"p{i}": {"type": "string"} for i in range(2_000)}))
    assert wide.split({"p0": "a", "p1999": "b"}) == ({"p0": "a", "p1999": "b"}, {})
    assert details(wide, {"p1999": 5}) == [{"pointer": "/p1999", "keyword": "type"}]
    enum = compile_schema(obj(a={"enum": list(range(1_000))}))
    enum.validate({"a": 999})
    assert details(enum, {"a": 1_000}) == [{"pointer": "/a", "keyword": "enum"}]
    deep = compile_schema(nested(31))  # 63 nested JSON containers
    config: Any = "leaf"
    for _ in range(31):
        config = {"child": config}
    deep.validate(config)
    inner: Any = config
    for _ in range(30):
        inner = inner["child"]
    inner["child"] = 5
    assert details(deep, config) == [{"pointer": "/child" * 31, "keyword": "type"}]


def test_meta_schema_error_names_the_pointer_and_keyword() -> None:
    with pytest.raises(SchemaRefused) as caught:
        compile_schema(obj(a=obj(b={"type": 5})))
    assert "'/properties/a/properties/b/type'" in caught.value.message
    assert "keyword" in caught.value.message


def test_non_mapping_schema_is_refused() -> None:
    with pytest.raises(SchemaRefused):
        compile_schema([{"type": "object"}])  # type: ignore[arg-type]


# --- validation ------------------------------------------------------------------------------


def test_catastrophic_patterns_run_in_linear_time() -> None:
    evil = "(a+)+$"
    schema = compile_schema(
        {
            "type": "object",
            "properties": {"p": {"type": "string", "pattern": evil}},
            "patternProperties": {evil: {"type": "string"}},
            "propertyNames": {"pattern": f"^p$|{evil}|^b"},
            "additionalProperties": False,
        }
    )
    attack = "a" * 50_000 + "!"
    with within(0.5):
        found = details(schema, {"p": attack, attack: "x", "b" + attack: 1})
    assert {"pointer": "/p", "keyword": "pattern"} in found
    assert {"pointer": "/b" + attack, "keyword": "additionalProperties"} in found


def test_regex_format_and_patterns_compile_with_re2_not_re() -> None:
    """Python's `re` parser raises RecursionError on deep groups; RE2 compiles them in linear
    time and, without capture spans, in linear memory (with them: 1.5 GB for these 10,000)."""
    deep_groups = "(" * 10_000 + "a" + ")" * 10_000
    schema = compile_schema(
        obj(p={"type": "string", "pattern": deep_groups}, r={"type": "string", "format": "regex"})
    )
    with within(1.0):
        schema.validate({"p": "xa", "r": deep_groups})
    schema.validate({"r": "^[a-z]+(?:-[a-z]+)*$"})
    assert details(schema, {"p": "x"}) == [{"pointer": "/p", "keyword": "pattern"}]
    for bad in ("(?=x)", "(unclosed", "a{1,5000}"):
        assert details(schema, {"r": bad}) == [{"pointer": "/r", "keyword": "format"}]


def test_root_schema_reached_by_ref_keeps_the_re2_validator() -> None:
    """A root `$schema` must not let jsonschema swap in its stock `re` keywords via `$ref`."""
    schema = compile_schema(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"p": {"type": "string", "pattern": "(a+)+$"}, "child": {"$ref": "#"}},
        }
    )
    with within(0.5):
        found = details(schema, {"child": {"child": {"p": "a" * 50_000 + "!"}}})
    assert found == [{"pointer": "/child/child/p", "keyword": "pattern"}]


@pytest.mark.parametrize("dialect", [None, DRAFT7])
@pytest.mark.parametrize(
    ("fmt", "good", "bad"), [("ipv4", "10.0.0.1", "10.0.0"), ("date", "2024-02-29", "2023-02-29")]
)
def test_format_is_asserted(dialect: str | None, fmt: str, good: str, bad: str) -> None:
    schema: dict[str, Any] = obj(v={"type": "string", "format": fmt})
    if dialect:
        schema["$schema"] = dialect
    compiled = compile_schema(schema)
    compiled.validate({"v": good})
    assert details(compiled, {"v": bad}) == [{"pointer": "/v", "keyword": "format"}]


def test_unique_items_is_linear_and_uses_json_equality() -> None:
    schema = compile_schema(obj(list={"type": "array", "uniqueItems": True}))
    with within(5.0):  # linear: 0.3-1.6 s on loaded 2-core VMs; pairwise: minutes
        schema.validate({"list": [{"n": i, "tags": [i]} for i in range(20_000)]})
    schema.validate({"list": [1, True, "1", [1], {"a": 1}]})
    for duplicated in (
        [{"a": 1, "b": 2}, {"b": 2, "a": 1.0}],
        [[1, {"x": None}], [1.0, {"x": None}]],
    ):
        assert details(schema, {"list": duplicated}) == [
            {"pointer": "/list", "keyword": "uniqueItems"}
        ]


def test_additional_properties_false_names_each_extra() -> None:
    schema = compile_schema({**FILESYSTEM, "additionalProperties": False})
    assert details(schema, {"root_dir": "/", "b": 1, "a/x": 2}) == [
        {"pointer": "/a~1x", "keyword": "additionalProperties"},
        {"pointer": "/b", "keyword": "additionalProperties"},
    ]


def test_errors_are_collected_sorted_and_capped() -> None:
    schema = compile_schema(obj(items={"type": "array", "items": {"type": "integer"}}))
    found = details(schema, {"items": ["x"] * 120})
    assert len(found) == 50
    assert found == sorted(found, key=lambda d: (d["pointer"], d["keyword"]))
    assert {d["keyword"] for d in found} == {"type"}


def test_non_object_and_too_deep_configs_are_invalid() -> None:
    schema = compile_schema(obj(any={}))
    assert details(schema, []) == [{"pointer": "", "keyword": "type"}]
    deep: Any = 1
    for _ in range(5_000):
        deep = [deep]
    with within(1.0):
        found = details(schema, {"any": deep})
    assert found[0]["keyword"] == "maxDepth"


CANARY = "CANARY-f00d-c0ffee"


@pytest.mark.parametrize(
    ("subschema", "value"),
    [
        ({"type": "string", "pattern": "^[a-z]+$"}, CANARY),
        ({"enum": ["a", "b"]}, CANARY),
        ({"const": "a"}, CANARY),
        ({"type": "string", "maxLength": 3}, CANARY),
        ({"type": "string", "format": "ipv4"}, CANARY),
        ({"type": "integer"}, CANARY),
        ({"type": "object", "additionalProperties": False}, {"k": CANARY}),
        ({"type": "object", "propertyNames": {"maxLength": 1}}, {"kk": CANARY}),
        ({"oneOf": [{"type": "integer"}, {"const": 1}]}, CANARY),
        ({"not": {"type": "string"}}, CANARY),
        ({"type": "array", "uniqueItems": True}, [CANARY, CANARY]),
        ({"type": "string", "writeOnly": True, "minLength": 100}, CANARY),
    ],
)
def test_config_invalid_never_carries_a_submitted_value(subschema: Any, value: Any) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        compile_schema(obj(field=subschema)).validate({"field": value})
    exc = caught.value
    assert exc.details and all(set(d) == {"pointer", "keyword"} for d in exc.details)
    for text in (str(exc), repr(exc), repr(exc.details), exc.message, repr(exc.args)):
        assert CANARY not in text
    assert exc.__cause__ is None
    assert exc.__context__ is None


# --- the secret split -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "marker",
    [{"writeOnly": True}, {"x-secret": True}, {"format": "password"}, {"sensitive": True}],
)
def test_each_marker_makes_a_property_secret(marker: dict[str, Any]) -> None:
    schema = obj(user={"type": "string"}, key={"type": "string", **marker})
    assert round_trip(schema, {"user": "u", "key": "s3cret"}) == ({"user": "u"}, {"/key": "s3cret"})


@pytest.mark.parametrize("marker", [{"writeOnly": False}, {"x-secret": "yes"}, {"format": "uri"}])
def test_markers_must_be_exact(marker: dict[str, Any]) -> None:
    schema = obj(key={"type": "string", **marker})
    value = "https://v.example/"  # a valid uri: format is asserted
    assert round_trip(schema, {"key": value}) == ({"key": value}, {})


def test_undeclared_properties_fail_closed() -> None:
    schema = {
        **obj(name={"type": "string"}),
        "patternProperties": {"^x_": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    }
    config = {"name": "n", "x_port": 1, "anything": "v", "nested": "w"}
    public, secrets = round_trip(schema, config)
    assert public == {"name": "n"}
    assert secrets == {"/x_port": 1, "/anything": "v", "/nested": "w"}
    # No additionalProperties keyword at all: extras are still admitted, so still secret.
    assert round_trip(FILESYSTEM, {"root_dir": "/", "extra": "e"})[1] == {"/extra": "e"}


def test_additional_properties_false_rejects_extras() -> None:
    schema = compile_schema({**FILESYSTEM, "additionalProperties": False})
    with pytest.raises(ConfigInvalid):
        schema.split({"root_dir": "/", "extra": "e"})


def test_named_property_is_secret_if_a_matching_pattern_says_so() -> None:
    schema = {
        **obj(api_key={"type": "string"}),
        "patternProperties": {"_key$": {"writeOnly": True}},
    }
    assert round_trip(schema, {"api_key": "k"}) == ({}, {"/api_key": "k"})


def test_nested_objects_and_pointer_escaping() -> None:
    schema = obj(
        db=obj(host={"type": "string"}, **{"pass/word~1": {"type": "string", "writeOnly": True}}),
    )
    config = {"db": {"host": "h", "pass/word~1": "pw"}}
    assert round_trip(schema, config) == ({"db": {"host": "h"}}, {"/db/pass~1word~01": "pw"})


def test_arrays_of_objects_with_secret_fields() -> None:
    server = obj(url={"type": "string"}, token={"type": "string", "x-secret": True})
    schema = obj(servers={"type": "array", "items": server})
    config = {"servers": [{"url": "a", "token": "t0"}, {"url": "b"}, {"url": "c", "token": "t2"}]}
    public, secrets = round_trip(schema, config)
    assert public == {"servers": [{"url": "a"}, {"url": "b"}, {"url": "c"}]}
    assert secrets == {"/servers/0/token": "t0", "/servers/2/token": "t2"}


def test_secret_array_elements_leave_a_placeholder() -> None:
    schema = obj(
        pair={
            "type": "array",
            "prefixItems": [{"type": "string"}, {"type": "string", "sensitive": True}],
            "items": {"type": "string", "format": "password"},
        },
        plain={"type": "array"},
    )
    config = {"pair": ["user", "pw", "more"], "plain": [1, {"k": "v"}, None]}
    public, secrets = round_trip(schema, config)
    assert public == {"pair": ["user", None, None], "plain": [1, {}, None]}
    assert secrets == {"/pair/1": "pw", "/pair/2": "more", "/plain/1/k": "v"}


def test_contains_and_unevaluated_items_apply_to_elements() -> None:
    schema = obj(
        tokens={"type": "array", "contains": {"type": "string", "writeOnly": True}},
        rest={
            "type": "array",
            "prefixItems": [{"type": "string"}],
            "unevaluatedItems": obj(host={"type": "string"}, key={"x-secret": True}),
        },
    )
    config = {"tokens": ["t0", "t1"], "rest": ["name", {"host": "h", "key": "k"}]}
    public, secrets = round_trip(schema, config)
    assert public == {"tokens": [None, None], "rest": ["name", {"host": "h"}]}
    assert secrets == {"/tokens/0": "t0", "/tokens/1": "t1", "/rest/1/key": "k"}


def test_refs_defs_and_all_of() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "secret": {"type": "string", "writeOnly": True},
            "auth": {
                "allOf": [obj(user={"type": "string"}), obj(password={"$ref": "#/$defs/secret"})]
            },
        },
        "properties": {"auth": {"$ref": "#/$defs/auth"}},
    }
    config = {"auth": {"user": "u", "password": "p", "other": 1}}
    assert round_trip(schema, config) == (
        {"auth": {"user": "u"}},
        {"/auth/password": "p", "/auth/other": 1},
    )


def test_anchors_and_legacy_definitions_in_2020_12() -> None:
    schema = {
        "type": "object",
        "definitions": {"cred": {"$anchor": "cred", "type": "string", "x-secret": True}},
        "properties": {"a": {"$ref": "#cred"}, "b": {"$ref": "#/definitions/cred"}, "c": {}},
    }
    assert round_trip(schema, {"a": "1", "b": "2", "c": "3"}) == (
        {"c": "3"},
        {"/a": "1", "/b": "2"},
    )


@pytest.mark.parametrize(
    "root_id", ["https://toolkits.example/fs.json", "https://json-schema.org/draft/2020-12/schema"]
)
def test_root_id_keeps_refs_local_and_re2_in_force(root_id: str) -> None:
    schema = {
        "$id": root_id,
        "type": "object",
        "$defs": {"key": {"type": "string", "writeOnly": True, "pattern": "(a+)+$"}},
        "properties": {"key": {"$ref": "#/$defs/key"}, "again": {"$ref": "#"}},
    }
    assert round_trip(schema, {"key": "a", "again": {"key": "aa"}}) == (
        {"again": {}},
        {"/key": "a", "/again/key": "aa"},
    )
    with within(0.5):
        found = details(compile_schema(schema), {"again": {"key": "a" * 50_000 + "!"}})
    assert found == [{"pointer": "/again/key", "keyword": "pattern"}]


def test_draft7_plain_name_id_is_an_anchor() -> None:
    schema = {
        "$schema": DRAFT7,
        "type": "object",
        "definitions": {"key": {"$id": "#key", "type": "string", "x-secret": True}},
        "properties": {"key": {"$ref": "#key"}},
    }
    assert round_trip(schema, {"key": "v"}) == ({}, {"/key": "v"})


def test_secret_is_the_union_over_subschemas_naming_the_property() -> None:
    schema = {
        "type": "object",
        "allOf": [obj(token={"type": "string"}), obj(token={"minLength": 1, "x-secret": True})],
    }
    assert round_trip(schema, {"token": "t"}) == ({}, {"/token": "t"})


def test_conditional_and_dependent_subschemas_declare_properties() -> None:
    schema = {
        **obj(kind={"enum": ["token", "none"]}),
        "if": obj(kind={"const": "token"}),
        "then": obj(token={"type": "string", "writeOnly": True}),
        "dependentSchemas": {"kind": obj(region={"type": "string"})},
    }
    config = {"kind": "token", "token": "t", "region": "eu"}
    assert round_trip(schema, config) == ({"kind": "token", "region": "eu"}, {"/token": "t"})


def test_secret_subtree_is_taken_whole() -> None:
    schema = obj(creds={**obj(key={"writeOnly": True}, id={"type": "string"}), "writeOnly": True})
    config = {"creds": {"id": "i", "key": "k"}}
    assert round_trip(schema, config) == ({}, {"/creds": {"id": "i", "key": "k"}})


def test_secret_root_takes_the_whole_config() -> None:
    schema = {**FILESYSTEM, "x-secret": True}
    assert round_trip(schema, {"root_dir": "/r"}) == ({}, {"": {"root_dir": "/r"}})


def test_recursive_schema_splits_at_every_depth() -> None:
    schema = {
        "type": "object",
        "$ref": "#/$defs/node",
        "$defs": {
            "node": obj(
                name={"type": "string"},
                token={"writeOnly": True},
                children={"type": "array", "items": {"$ref": "#/$defs/node"}},
            )
        },
    }
    config = {"name": "a", "token": "1", "children": [{"name": "b", "children": [{"token": "3"}]}]}
    public, secrets = round_trip(schema, config)
    assert public == {"name": "a", "children": [{"name": "b", "children": [{}]}]}
    assert secrets == {"/token": "1", "/children/0/children/0/token": "3"}


def test_draft7_definitions_and_items_list() -> None:
    schema = {
        "$schema": DRAFT7,
        "type": "object",
        "definitions": {"cred": {"type": "string", "x-secret": True}},
        "properties": {
            "pair": {
                "type": "array",
                "items": [{"type": "string"}, {"$ref": "#/definitions/cred"}],
                "additionalItems": {"type": "object"},
            },
            "list": {"type": "array", "items": {"$ref": "#/definitions/cred"}},
        },
    }
    config = {"pair": ["user", "pw", {"k": 1}], "list": ["a", "b"]}
    public, secrets = round_trip(schema, config)
    assert public == {"pair": ["user", None, {}], "list": [None, None]}
    assert secrets == {"/pair/1": "pw", "/pair/2/k": 1, "/list/0": "a", "/list/1": "b"}


def test_draft7_ref_siblings_do_not_declare_but_do_mark() -> None:
    """Draft-07 ignores a `$ref`'s siblings: their `properties` declare nothing (fail closed),
    while a secret marker beside the `$ref` still counts."""
    schema = {
        "$schema": DRAFT7,
        "type": "object",
        "definitions": {"base": obj(host={"type": "string"}), "str": {"type": "string"}},
        "properties": {
            "conn": {"$ref": "#/definitions/base", "properties": {"token": {"type": "string"}}},
            "api_key": {"$ref": "#/definitions/str", "writeOnly": True},
        },
    }
    config = {"conn": {"host": "h", "token": "t"}, "api_key": "k"}
    public, secrets = round_trip(schema, config)
    assert public == {"conn": {"host": "h"}}
    assert secrets == {"/conn/token": "t", "/api_key": "k"}


def test_split_validates_first() -> None:
    with pytest.raises(ConfigInvalid):
        compile_schema(FILESYSTEM).split({})


def test_split_output_does_not_alias_the_input() -> None:
    schema = obj(blob={"type": "object", "writeOnly": True}, meta={"type": "array"})
    config = {"blob": {"k": ["v"]}, "meta": [1, [2]]}
    public, secrets = compile_schema(schema).split(config)
    secrets["/blob"]["k"].append("x")
    public["meta"][1].append(3)
    assert config == {"blob": {"k": ["v"]}, "meta": [1, [2]]}


@pytest.mark.parametrize("pointer", ["/missing/deep", "/list/7", "/list/-1", "/list/01", "nope"])
def test_merge_refuses_secrets_that_do_not_fit(pointer: str) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        merge_secrets({"list": [None]}, {pointer: "value-that-must-not-leak"})
    assert caught.value.details == [{"pointer": pointer, "keyword": "merge"}]
    assert "value-that-must-not-leak" not in repr(caught.value)


# --- properties ---------------------------------------------------------------------------------

SECRET = "\u00a7S\u00a7"  # every secret value in the generated configs starts with this
# JSON text: no lone surrogates (I-JSON forbids them; the protocol and validate refuse them)
unicode = st.characters(blacklist_categories=["Cs"])
secret_text = st.text(unicode, max_size=8).map(lambda s: SECRET + s)
public_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\u00a7"),
    max_size=8,
)
keys = st.text(unicode, min_size=1, max_size=6)

HYPO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {"secret": {"type": "string", "writeOnly": True}},
    "properties": {
        "name": {"type": "string"},
        "api_key": {"$ref": "#/$defs/secret"},
        "db": {
            "type": "object",
            "properties": {"host": {"type": "string"}, "password": {"format": "password"}},
            "additionalProperties": {"type": "string"},
        },
        "servers": {
            "type": "array",
            "items": obj(url={"type": "string"}, token={"type": "string", "x-secret": True}),
        },
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "string"}, {"type": "string", "sensitive": True}],
            "items": {"type": "string"},
        },
        "ports": {"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
    },
    "additionalProperties": {"type": "string"},
}


def optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


CONFIGS = optional(
    name=public_text,
    api_key=secret_text,
    db=st.builds(
        lambda base, extra: {**extra, **base},
        optional(host=public_text, password=secret_text),
        st.dictionaries(keys, secret_text, max_size=3),
    ),
    servers=st.lists(optional(url=public_text, token=secret_text), max_size=3),
    pair=st.builds(
        lambda a, b, rest: [a, b, *rest], public_text, secret_text, st.lists(public_text)
    ),
    ports=st.dictionaries(  # integers canonical JSON can carry (I-JSON, checked by validate)
        keys.map(lambda k: "x" + k), st.integers(-(2**53) + 1, 2**53 - 1), max_size=3
    ),
).flatmap(
    lambda base: st.dictionaries(keys, secret_text, max_size=3).map(
        lambda extra: {
            **{k: v for k, v in extra.items() if k not in HYPO_SCHEMA["properties"]},
            **base,
        }
    )
)


@settings(max_examples=200, deadline=None)
@given(CONFIGS)
def test_split_round_trips_and_hides_every_secret(config: dict[str, Any]) -> None:
    public, secrets = round_trip(HYPO_SCHEMA, config)
    assert SECRET not in json.dumps(public, ensure_ascii=False)
    assert public.get("ports", {}) == {}
    for pointer, value in secrets.items():
        assert pointer.startswith("/")
        assert isinstance(value, int) or SECRET in json.dumps(value, ensure_ascii=False)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(unicode, max_size=6), st.text(unicode, max_size=6), max_size=6))
def test_undeclared_keys_of_any_spelling_round_trip(config: dict[str, str]) -> None:
    public, secrets = round_trip({"type": "object"}, config)
    assert public == {}
    assert set(secrets) == {"/" + k.replace("~", "~0").replace("/", "~1") for k in config}


# --- the split memo ----------------------------------------------------------------------------

BENCH = {
    "type": "object",
    "properties": {
        "endpoint": {"type": "string"},
        "region": {"type": "string"},
        "timeout_s": {"type": "integer", "minimum": 1},
        "api_key": {"type": "string", "writeOnly": True},
        "password": {"type": "string", "format": "password"},
    },
    "required": ["endpoint", "region", "timeout_s", "api_key", "password"],
    "additionalProperties": False,
}
KITCHEN = {  # every keyword split follows, permissive so that most configs are valid
    "type": "object",
    "$defs": {
        "secret": {"writeOnly": True},
        "node": obj(
            name={},
            token={"x-secret": True},
            children={"type": "array", "items": {"$ref": "#/$defs/node"}},
            next={"$ref": "#/$defs/node"},
        ),
    },
    "allOf": [{"$ref": "#/$defs/node"}, obj(api_key={"$ref": "#/$defs/secret"})],
    "anyOf": [obj(host={}), {}],
    "oneOf": [obj(port={"type": "integer"})],
    "if": {**obj(kind={"const": "token"}), "required": ["kind"]},
    "then": obj(password={"format": "password"}),
    "else": obj(region={}),
    "dependentSchemas": {
        "db": obj(db={**obj(host={}, password={"sensitive": True}), "additionalProperties": {}})
    },
    "properties": {
        "pair": {"prefixItems": [{}, {"sensitive": True}], "items": obj(name={})},
        "tokens": {"contains": {"writeOnly": True}},
        "rest": {"prefixItems": [{}], "unevaluatedItems": obj(host={}, key={"x-secret": True})},
        "self": {"$ref": "#"},
        "x_port": {},
    },
    "patternProperties": {"^x_": {"type": "integer"}, "key$": {"writeOnly": True}},
    "additionalProperties": {},
}
KITCHEN7 = {
    "$schema": DRAFT7,
    "type": "object",
    "definitions": {
        "base": obj(
            host={},
            children={
                "items": [{"$ref": "#/definitions/base"}, {"x-secret": True}],
                "additionalItems": obj(name={}),
            },
        ),
        "str": {"type": "string"},
    },
    "properties": {
        "conn": {"$ref": "#/definitions/base", "properties": {"token": {}}},
        "api_key": {"$ref": "#/definitions/str", "writeOnly": True},
        "list": {"items": {"$ref": "#/definitions/base"}},
        "self": {"$ref": "#"},
    },
    "dependencies": {"conn": obj(password={"format": "password"}), "list": ["conn"]},
    "patternProperties": {"^x_": {}},
}
SPLIT_SCHEMAS = {
    "bench": BENCH,
    "kitchen": KITCHEN,
    "kitchen-draft7": KITCHEN7,
    "hypothesis": HYPO_SCHEMA,
    "filesystem": FILESYSTEM,
    "secret-root": {**FILESYSTEM, "x-secret": True},
}
NAMES = sorted(
    {"name", "token", "api_key", "host", "password", "children", "next", "x_port", "x_y"}
    | {"my_key", "kind", "region", "db", "pair", "tokens", "rest", "self", "conn", "list"}
    | {"port", "key", "endpoint", "timeout_s", "servers", "ports", "url", "root_dir", "xa"}
)
json_keys = st.sampled_from(NAMES) | st.text(unicode, max_size=4)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["token", "a"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_keys, inner, max_size=5),
    max_leaves=25,
)
ANY_CONFIGS = st.dictionaries(json_keys, json_values, max_size=6)
_unmemoized: dict[str, CompiledSchema] = {}


def outcome(schema: CompiledSchema, config: Any) -> Any:
    try:
        return schema.split(config)
    except ConfigInvalid as error:
        return error.details


def unmemoized(name: str, config: Any) -> Any:
    """The split of a separately compiled schema whose memo never stores anything."""
    if name not in _unmemoized:
        schema = SPLIT_SCHEMAS[name]
        _unmemoized[name] = CompiledSchema(json.loads(canonical_json(schema)), "reference")
    reference = _unmemoized[name]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(split_module, "MEMO_ENTRIES", 0)
        found = outcome(reference, config)
    assert not reference._splitter._plans and not reference._splitter._members
    return found


@pytest.mark.parametrize("name", sorted(SPLIT_SCHEMAS))
@settings(max_examples=150, deadline=None)
@given(config=ANY_CONFIGS)
def test_memoized_split_equals_an_unmemoized_one(name: str, config: dict[str, Any]) -> None:
    """compile_schema's instance is shared by every example, so its memo is warm."""
    memoized = compile_schema(SPLIT_SCHEMAS[name])
    assert outcome(memoized, config) == unmemoized(name, config)
    assert outcome(memoized, config) == unmemoized(name, config)  # now surely from the memo


def test_memoized_split_of_the_kitchen_schemas() -> None:
    """Examples that surely reach the deep paths, whatever hypothesis draws."""
    configs = {
        "kitchen": {
            "kind": "token",
            "password": "p",
            "name": "n",
            "token": "t",
            "api_key": "k",
            "my_key": "m",
            "x_port": 1,
            "host": "h",
            "db": {"host": "h", "password": "p", "other": 1},
            "children": [{"name": "c", "token": "t", "next": {"name": "d", "token": "u"}}],
            "pair": ["a", "b", {"name": "n", "z": 1}],
            "tokens": ["t0"],
            "rest": ["r", {"host": "h", "key": "k"}],
            "self": {"self": {"name": "s", "api_key": "k", "extra": 1}},
        },
        "kitchen-draft7": {
            "conn": {"host": "h", "token": "t", "children": [{"host": "c"}, "s", {"name": "n"}]},
            "api_key": "k",
            "password": "p",
            "list": [{"host": "a", "children": [{}, "s2"]}],
            "self": {"x_y": 1, "conn": {"host": "h"}, "password": "q"},
            "x_z": 2,
        },
    }
    for name, config in configs.items():
        first = outcome(compile_schema(SPLIT_SCHEMAS[name]), config)
        assert isinstance(first, tuple) and first[1]
        assert first == outcome(compile_schema(SPLIT_SCHEMAS[name]), config)
        assert first == unmemoized(name, config)


def test_undeclared_names_take_no_memo_entry() -> None:
    """Names admitted through patternProperties/additionalProperties are the caller's to
    choose: thousands of them leave the memo as it was after one config."""
    schema = CompiledSchema(
        {
            **obj(host={"type": "string"}, nested=obj(port={"type": "integer"})),
            "patternProperties": {"^x_": {"type": "string"}, "^y": obj(z={})},
            "additionalProperties": obj(inner={"type": "string"}),
        },
        "test",
    )
    base = {"host": "h", "nested": {"port": 1, "extra": "e"}}
    schema.split(base)
    sizes = len(schema._splitter._plans), len(schema._splitter._members)
    for batch in range(10):  # 9,000 names, 300 of each kind per config (MAX_SECRETS)
        config = {
            **base,
            **{f"x_{batch}_{i}": "v" for i in range(300)},
            **{f"y{batch}_{i}": {"z": 1} for i in range(300)},
            **{f"other{batch}_{i}": {"inner": "v"} for i in range(300)},
        }
        public, secrets = schema.split(config)
        assert public == {"host": "h", "nested": {"port": 1}}
        assert len(secrets) == 901
    assert (len(schema._splitter._plans), len(schema._splitter._members)) == sizes


def test_memo_is_capped_in_entries_and_width() -> None:
    """Schemas can hold many node sets (here one per prefix item and declared property), or
    wide ones: the memo stays within MEMO_ENTRIES and a wide plan is not kept at all."""
    many = 3 * MEMO_ENTRIES
    schema = CompiledSchema(
        obj(
            list={"type": "array", "prefixItems": [{"type": "integer"}] * many},
            props=obj(**{f"p{i}": {"type": "integer"} for i in range(many)}),
            wide={"allOf": [{"type": "object"} for _ in range(200)]},
        ),
        "test",
    )
    config = {
        "wide": {"w": 1},  # first, while the memo still has room
        "list": list(range(many)),
        "props": {f"p{i}": i for i in range(many)},
    }
    for _ in range(2):
        assert schema.split(config) == (
            {"wide": {}, "list": list(range(many)), "props": config["props"]},
            {"/wide/w": 1},
        )
        assert len(schema._splitter._plans) == len(schema._splitter._members) == MEMO_ENTRIES
    assert not any(len(plan.applied) > 100 for plan in schema._splitter._plans.values())


def test_concurrent_splits_share_the_memo() -> None:
    schema = CompiledSchema(json.loads(canonical_json(KITCHEN)), "test")
    configs = [
        {"name": f"n{i}", "token": "t", f"k{i}": i, "children": [{"name": "c", "token": "t"}] * i}
        for i in range(40)
    ]
    expected = [unmemoized("kitchen", config) for config in configs]
    with ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(5):
            assert list(pool.map(lambda c: outcome(schema, c), configs)) == expected
