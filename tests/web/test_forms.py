"""Forms from schemas (pure): fields, secret marks agreeing with `split`, parsing back."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit_vault.schema import compile_schema
from toolkit_vault.transports.web.formdata import (
    field_error,
    initial_values,
    parse_form,
    place_errors,
    prefilled,
)
from toolkit_vault.transports.web.forms import Field, build_fields, leaves

from tkv_test_plugins import SECRETIVE_SCHEMA
from web_support import plugins

CANARY = "tkv-canary-forms-51aa"
EVERYTHING: dict[str, Any] = plugins.EVERYTHING_SCHEMA
FULL = {
    "email": "ops@example.test", "homepage": "https://example.test", "account": "acct-1234",
    "plan": "team", "ratio": 0.25, "port": 8443, "verbose": False, "tags": ["a", "b"],
    "retries": [1, 5], "database": {"host": "db", "password": CANARY},
    "token": CANARY + "t", "signing_key": CANARY + "s", "headers": {"X-A": CANARY + "h"},
}  # fmt: skip


def fields_of(schema: dict[str, Any]) -> tuple[Field, ...]:
    return build_fields(schema, compile_schema(schema).is_secret_at)


def by_pointer(fields: tuple[Field, ...]) -> dict[str, Field]:
    return {f.pointer: f for f in leaves(fields)}


def test_every_kind_of_field() -> None:
    fields = fields_of(EVERYTHING)
    assert [f.pointer for f in fields][:3] == ["/email", "/homepage", "/account"]  # schema order
    found = by_pointer(fields)
    kinds = {p: f.kind for p, f in found.items()}
    assert kinds == {
        "/email": "text", "/homepage": "text", "/account": "text", "/plan": "enum",
        "/ratio": "number", "/port": "integer", "/verbose": "boolean", "/tags": "list",
        "/retries": "list", "/database/host": "text", "/database/password": "text",
        "/token": "text", "/signing_key": "text", "/headers": "json",
    }  # fmt: skip
    assert {p for p, f in found.items() if f.secret} == {
        "/database/password", "/token", "/signing_key", "/headers",
    }  # fmt: skip
    assert {p for p, f in found.items() if f.required} == {
        "/email", "/plan", "/port", "/database/host", "/database/password", "/token",
    }  # fmt: skip
    (group,) = [f for f in fields if f.kind == "group"]
    assert (group.label, group.required, group.help) == (
        "Database", True, "Where the toolkit keeps its state.",
    )  # fmt: skip
    assert found["/port"].label == "Port" and ("min", "1") in found["/port"].attrs  # via $ref
    assert found["/email"].input_type == "email" and found["/homepage"].input_type == "url"
    assert found["/account"].hints == ("pattern: ^acct-[0-9]{4}$",)
    assert found["/plan"].options == ("free", "team", "enterprise")
    assert (found["/tags"].item_kind, found["/retries"].item_kind) == ("text", "integer")


@pytest.mark.parametrize("schema", [EVERYTHING, SECRETIVE_SCHEMA, plugins.LEDGER_SCHEMA])
def test_secret_marks_agree_with_what_split_seals(schema: dict[str, Any]) -> None:
    """A public input never receives a value `split` would seal, and every public value
    `split` keeps has its own public input (so the public half can be shown)."""
    compiled = compile_schema(schema)
    config = FULL if schema is EVERYTHING else _secretive_like(schema)
    public, sealed = compiled.split(config)
    found = by_pointer(fields_of(schema))
    secret_fields = [p for p, f in found.items() if f.secret]
    for pointer in sealed:
        assert any(pointer == p or pointer.startswith(p + "/") for p in secret_fields), pointer
    for pointer, field in found.items():
        if not field.secret and _at(config, field.path) is not None:
            assert _at(public, field.path) == _at(config, field.path), pointer


def _secretive_like(schema: dict[str, Any]) -> dict[str, Any]:
    if "endpoint" in schema["properties"] and "mode" in schema["properties"]:
        return {
            "endpoint": "e", "mode": "ok", "api_key": CANARY, "tokens": ["t1"],
            "auth": {"user": "u", "password": "p"}, "headers": {"X": "y"},
        }  # fmt: skip
    return {"endpoint": "https://l.test", "region": "us", "api_key": CANARY}


def _at(config: Any, path: tuple[str, ...]) -> Any:
    for token in path:
        config = config.get(token) if isinstance(config, dict) else None
    return config


def test_a_form_round_trips_to_the_same_config() -> None:
    fields = fields_of(EVERYTHING)
    shown = initial_values(fields, FULL)
    assert not {"/database/password", "/token", "/signing_key", "/headers"} & set(shown)
    assert CANARY not in repr(shown)
    typed = {
        "/database/password": CANARY, "/token": CANARY + "t", "/signing_key": CANARY + "s",
        "/headers": '{"X-A": "' + CANARY + 'h"}',
    }  # fmt: skip
    config, errors = parse_form(fields, {**shown, **typed})
    assert (config, errors) == (FULL, [])


def test_empty_inputs_leave_fields_out_and_optional_sections_vanish() -> None:
    config, errors = parse_form(fields_of(EVERYTHING), {"/plan": "", "/verbose": ""})
    assert (config, errors) == ({"database": {}}, [])  # required section kept: its fields say
    optional = {"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "string"}}}}}  # fmt: skip
    assert parse_form(fields_of(optional), {"/a/b": ""}) == ({}, [])


def test_unreadable_inputs_are_named_by_pointer_and_keyword_only() -> None:
    form = {
        "/ratio": "lots", "/port": "1.5", "/plan": "7", "/verbose": "maybe",
        "/retries": "1\n" + CANARY, "/headers": "{" + CANARY, "/token": CANARY,
    }  # fmt: skip
    config, errors = parse_form(fields_of(EVERYTHING), form)
    assert sorted(map(tuple, (e.values() for e in errors))) == sorted([
        ("/ratio", "type"), ("/port", "type"), ("/plan", "enum"), ("/verbose", "type"),
        ("/retries/1", "type"), ("/headers", "json"),
    ])  # fmt: skip
    assert CANARY not in repr(errors)
    assert config == {"retries": [1], "token": CANARY, "database": {}}


def test_numbers_keep_their_json_type() -> None:
    config, _ = parse_form(fields_of(EVERYTHING), {"/ratio": "1", "/port": "80"})
    assert config["ratio"] == 1 and isinstance(config["ratio"], int)
    config, errors = parse_form(fields_of(EVERYTHING), {"/ratio": "nan"})
    assert errors == [{"pointer": "/ratio", "keyword": "type"}]


def test_errors_land_beside_the_field_that_owns_their_pointer() -> None:
    fields = fields_of(EVERYTHING)
    details = [
        {"pointer": "/retries/1", "keyword": "type"},
        {"pointer": "/database/password", "keyword": "required"},
        {"pointer": "/headers/X-A", "keyword": "type"},
        {"pointer": "/database", "keyword": "additionalProperties"},
        {"pointer": "", "keyword": "additionalProperties"},
    ]
    placed, unplaced = place_errors(fields, details)
    assert {p: [d["keyword"] for d in ds] for p, ds in placed.items()} == {
        "/retries": ["type"], "/database/password": ["required"], "/headers": ["type"],
        "/database": ["additionalProperties"],
    }  # fmt: skip
    assert unplaced == [{"pointer": "", "keyword": "additionalProperties"}]


def test_awkward_names_and_unrenderable_schemas() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a/b~c": {"type": "string"},
            "choice": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "pairs": {"type": "array", "items": {"type": "object"}},
            "deep": {"$ref": "#/$defs/node"},
        },
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
    }
    found = by_pointer(fields_of(schema))
    assert found["/a~1b~0c"].kind == "text"
    assert found["/choice"].kind == found["/pairs"].kind == "json"
    assert all(f.secret for f in found.values() if f.kind == "json")  # fail closed
    deepest = max(found, key=len)
    assert deepest.count("/next") == 7 and found[deepest].kind == "json"  # depth is bounded
    config, _ = parse_form(fields_of(schema), {"/a~1b~0c": "x", "/pairs": '[{"k": 1}]'})
    assert config == {"a/b~c": "x", "pairs": [{"k": 1}]}


def test_labels_are_readable_names_in_declared_order_secret_fields_last() -> None:
    schema = {
        "type": "object",
        "properties": {
            "SSL_MODE": {"enum": ["disable", "require"], "default": "require"},
            "api_key": {"type": "string", "x-secret": True, "x-order": 1},
            "--host": {"type": "string", "default": "localhost", "x-order": 2},
            "port": {"type": "integer", "title": "Server port", "x-order": 3},
            "oauthClientId": {"type": "string"},
            "verbose": {"type": "boolean", "default": True},
        },
        "required": ["port"],
    }
    compiled = compile_schema(schema)
    fields = build_fields(schema, compiled.is_secret_at)
    assert [f.label for f in fields] == [
        "Host", "Server port", "SSL mode", "OAuth client ID", "Verbose", "API key",
    ]  # fmt: skip
    assert [f.secret for f in fields] == [False] * 5 + [True]
    by = {f.pointer: f for f in fields}
    assert initial_values(fields, {})["/--host"] == "localhost"  # the default is shown
    # an unticked checkbox is false when that differs from the default, absent otherwise
    assert parse_form(fields, {"/port": "5"})[0] == {"port": 5, "verbose": False}
    assert parse_form(fields, {"/port": "5", "/verbose": "true"})[0]["verbose"] is True
    assert field_error(by["/port"], [{"pointer": "/port", "keyword": "required"}] * 2) == (
        "Enter Server port."
    )
    twice = [{"pointer": "/port", "keyword": "required"}, {"pointer": "/port", "keyword": "type"}]
    assert field_error(by["/port"], twice) == "This value has the wrong type."
    chosen = prefilled(fields, {"--host": "evil.test", "SSL_MODE": "disable", "api_key": "k"})
    assert [(f.label, text) for f, text in chosen] == [
        ("Host", "evil.test"),
        ("SSL mode", "disable"),
    ]
    urls = prefilled(fields, {"SSL_MODE": "disable", "oauthClientId": "https://evil.test"})
    assert [f.label for f, _ in urls] == ["OAuth client ID", "SSL mode"]  # URLs first
