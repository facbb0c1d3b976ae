"""`token_field` and `client_secret_field` are JSON pointers (RFC 6901) wherever the vault
walks them: `~1` is a `/` inside a name and `~0` a `~`, so a token stored under the field
`a/b` is found, and a configure carrying it is not sent to connect instead."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from toolkit_vault.core.oauth_specs import value_at
from toolkit_vault.core.vault import Vault

SECRET = {"type": "string", "writeOnly": True}


def _toolkit(token_field: str, name: str) -> Any:
    schema = {
        "type": "object",
        "properties": {name: SECRET},
        "x-oauth": {
            "issuer": "https://issuer.test",
            "client_id": "client",
            "token_field": token_field,
        },
    }
    definition = SimpleNamespace(name="escaped", config_schema=schema)
    return SimpleNamespace(definition=definition, schema=SimpleNamespace(digest=token_field))


def test_a_pointer_is_unescaped_as_it_is_walked() -> None:
    config = {"a/b": "slash", "t~k": "tilde", "a": {"b": "nested"}}
    assert value_at(config, "/a~1b") == "slash"
    assert value_at(config, "/t~0k") == "tilde"
    assert value_at(config, "/a/b") == "nested"
    assert value_at(config, "/missing") is None


def test_a_token_under_an_escaped_field_is_found_and_no_connect_is_asked(vault: Vault) -> None:
    for field, name in (("/a~1b", "a/b"), ("/t~0k", "t~k")):
        toolkit = _toolkit(field, name)
        assert vault.oauth.spec_of(toolkit) is not None  # a valid x-oauth
        assert not vault.oauth.wants_connect(toolkit, {name: "a typed token"})
        assert vault.oauth.wants_connect(toolkit, {})
