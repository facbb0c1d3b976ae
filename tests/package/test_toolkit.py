"""Imported servers become A2E toolkit definitions whose schema marks every secret writeOnly,
keeps fixed values out of the form and records the package digest and strategy."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from package_builders import EXAMPLES

from toolkit_package.importers import ConfigInput, import_metadata
from toolkit_package.toolkit import (
    DEFINITION_FIELDS,
    property_names,
    source_digest,
    to_toolkit_definitions,
)


def toolkits(vector: Callable[[str], bytes], name: str) -> list[dict[str, Any]]:
    return [t.definition for t in to_toolkit_definitions(import_metadata(vector(name)))]


@pytest.mark.parametrize("name", EXAMPLES)
def test_definitions_have_exactly_the_a2e_fields_and_valid_schema(
    name: str, vector: Callable[[str], bytes]
) -> None:
    result = import_metadata(vector(name))
    for toolkit in to_toolkit_definitions(result):
        definition = toolkit.definition
        assert tuple(definition) == DEFINITION_FIELDS
        schema = definition["schema"]
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        package = dict(schema["x-toolkit-package"])
        launch = package.pop("launch", None) or package.pop("connect", None)  # publisher's
        assert package == {
            "digest": source_digest(
                next(s for s in result.servers if s.name == definition["name"])
            ),
            "strategy": definition["category"],
            "format": result.format,
        }
        assert set(schema["required"]) <= set(schema["properties"])
        properties = schema["properties"].values()
        assert all("default" not in p for p in properties if p.get("writeOnly"))
        text = json.dumps(toolkit.definition).replace(json.dumps(launch), "")
        for prop in properties:  # a public input's declared default is the publisher's own
            if isinstance(prop.get("default"), str):
                text = text.replace(json.dumps(prop["default"]), "")
        assert "canary" not in text.lower()


def test_argv_secret_definition_and_warning(vector: Callable[[str], bytes]) -> None:
    result = import_metadata(vector("server-argv-variable-secret.json"))
    (toolkit,) = to_toolkit_definitions(result)
    d = toolkit.definition
    assert (d["name"], d["alias"], d["category"], d["version"], d["tools"]) == (
        "io.github.example/weather-container",
        "weather-container",
        "local_mcp",
        "1.4.0",
        [],
    )
    props = d["schema"]["properties"]
    assert list(props) == ["weather_token", "units", "weather_region"]
    assert props["weather_token"]["writeOnly"] is True
    assert "writeOnly" not in props["units"] and "writeOnly" not in props["weather_region"]
    assert d["schema"]["required"] == ["weather_token"]
    assert props["weather_token"]["x-toolkit-input"] == {
        "kind": "variable",
        "name": "weather_token",
        "in_argv": True,
        "secret": True,
        "reason": "isSecret",
    }
    assert len(toolkit.warnings) == 1
    assert "weather_token" in toolkit.warnings[0] and "command line" in toolkit.warnings[0]


def test_remote_header_secret_definition(vector: Callable[[str], bytes]) -> None:
    (d,) = toolkits(vector, "server-remote-secret-header.json")
    props = d["schema"]["properties"]
    assert list(props) == ["tenant", "x_api_key"]  # the fixed X-Client header is not in the form
    assert props["x_api_key"]["writeOnly"] is True and props["x_api_key"]["title"] == "X-API-Key"
    assert d["schema"]["required"] == ["tenant", "x_api_key"]
    assert d["category"] == "remote_mcp"


def test_secret_env_definition_has_no_warning(vector: Callable[[str], bytes]) -> None:
    (toolkit,) = to_toolkit_definitions(import_metadata(vector("server-secret-env.json")))
    props = toolkit.definition["schema"]["properties"]
    secret = sorted(k for k, v in props.items() if v.get("writeOnly"))
    assert secret == ["tracker_api_token", "tracker_webhook_secret"]
    assert "tracker_log_level" not in props
    assert toolkit.warnings == []


def test_bundle_definition_lists_tools_and_flags_argv_secret(
    vector: Callable[[str], bytes],
) -> None:
    (toolkit,) = to_toolkit_definitions(import_metadata(vector("bundle-manifest.json")))
    assert toolkit.definition["tools"] == ["search_files", "rank_results"]
    assert [w.split("'")[1] for w in toolkit.warnings] == ["api_key"]


def test_property_names_are_safe_and_deduplicated() -> None:
    def named(name: str) -> ConfigInput:
        return ConfigInput(name, "", False, False, "env", "", False, False)

    names = property_names(
        named(n) for n in ["API-Key", "api_key", "--api-key", "9lives", "", "ünïcode", "a" * 99]
    )
    assert names == [
        "api_key",
        "api_key_2",
        "api_key_3",
        "field_9lives",
        "field",
        "n_code",
        "a" * 64,
    ]
    assert all(n.isidentifier() and n.isascii() and n == n.lower() for n in names)
