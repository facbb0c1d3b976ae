"""Imports keep what the publisher wrote (issue 38): choices as ``enum``, ``default``, bounds,
``format``, titles, declared order (``x-order``) and tool lists; digests depend on the servers,
not on the document wrapping them. Real files from tests/fixtures/mcp where the corpus carries
the construct; a small document in the published shape where it does not (no file of the corpus
declares ``choices`` or a ``pickString`` input).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from corpus import BUNDLES, CORPUS, load

from toolkit_package import import_metadata, to_toolkit_definitions
from toolkit_package.toolkit import source_digest


def properties(doc: bytes | dict[str, Any], server: int = 0) -> dict[str, Any]:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    toolkit = to_toolkit_definitions(import_metadata(data))[server]
    return toolkit.definition["schema"]["properties"]


@pytest.mark.parametrize("flavour", ["mcpb", "dxt"])
def test_a_bundles_user_config_keeps_title_default_bounds_format_and_order(flavour: str) -> None:
    path = CORPUS / "bundles" / flavour / "hello-world-node.json"
    declared = json.loads(path.read_text())["user_config"]
    props = properties(path.read_bytes())
    assert list(props) == list(declared)  # declared order, and x-order says it too
    assert [p["x-order"] for p in props.values()] == list(range(len(declared)))
    assert [p["title"] for p in props.values()] == [d["title"] for d in declared.values()]
    assert props["verbose_logging"]["default"] is False
    assert props["max_results"] | {"x-toolkit-input": None} == {
        "type": "number",
        "title": "Maximum Results",
        "description": "Maximum number of results to return",
        "default": 10,
        "minimum": 1,
        "maximum": 100,
        "x-order": 2,
        "x-toolkit-input": None,
    }
    assert props["workspace_directory"]["default"] == "${HOME}/Documents"
    assert props["workspace_directory"]["x-toolkit-input"]["format"] == "directory"
    assert props["config_file"]["x-toolkit-input"]["format"] == "file"
    assert props["debug_mode"]["default"] == "info"
    assert props["api_key"]["writeOnly"] is True and "default" not in props["api_key"]


@pytest.mark.parametrize(
    "path", [p for p in BUNDLES if "tools" in json.loads(p.read_text())], ids=lambda p: p.name
)
def test_a_bundles_tools_are_the_toolkits_tools(path: Any) -> None:
    declared = [t["name"] for t in json.loads(path.read_text())["tools"]]
    (toolkit,) = to_toolkit_definitions(load(path))
    assert declared and toolkit.definition["tools"] == declared


DATABASE_MANAGER = {
    "$schema": "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
    "name": "io.github.example/database-manager",
    "description": "Manage a database",
    "version": "1.0.0",
    "packages": [
        {
            "registryType": "pypi",
            "identifier": "database-manager",
            "version": "1.0.0",
            "transport": {"type": "stdio"},
            "packageArguments": [
                {"type": "named", "name": "--host", "default": "localhost", "isRequired": True},
                {"type": "named", "name": "--port", "format": "number", "default": "5432"},
            ],
            "environmentVariables": [
                {
                    "name": "DB_TYPE",
                    "description": "Which database",
                    "choices": ["postgresql", "mysql", "sqlite"],
                    "default": "postgresql",
                },
                {"name": "SSL_MODE", "choices": ["disable", "require", "verify-full"]},
                {"name": "DB_PASSWORD", "isSecret": True, "default": "changeme"},
                {"name": "TEAM_ID", "default": "<YOUR_TEAM_ID>"},
            ],
        }
    ],
}


def test_server_json_keeps_choices_as_enum_defaults_and_declared_order() -> None:
    props = properties(DATABASE_MANAGER)
    assert list(props) == ["host", "port", "db_type", "ssl_mode", "db_password", "team_id"]
    assert props["db_type"]["enum"] == ["postgresql", "mysql", "sqlite"]
    assert props["db_type"]["default"] == "postgresql"
    assert props["ssl_mode"]["enum"] == ["disable", "require", "verify-full"]
    assert (props["ssl_mode"]["x-toolkit-input"]["secret"], "default" in props["ssl_mode"]) == (
        False,
        False,
    )
    assert props["host"]["default"] == "localhost"
    assert (props["port"]["type"], props["port"]["default"]) == ("number", 5432)
    assert "default" not in props["db_password"]  # a secret keeps no default
    assert "default" not in props["team_id"]  # a placeholder is no default


def test_an_enum_refuses_what_the_publisher_did_not_offer() -> None:
    from jsonschema import Draft202012Validator

    schema = to_toolkit_definitions(import_metadata(json.dumps(DATABASE_MANAGER).encode()))[0]
    validator = Draft202012Validator(schema.definition["schema"])
    config = {"host": "h", "db_type": "oracle", "ssl_mode": "bogus", "db_password": "x"}
    wrong = {e.path[0] for e in validator.iter_errors(config)}
    assert wrong == {"db_type", "ssl_mode"}


def test_vscode_pick_string_inputs_keep_options_and_default() -> None:
    config = {
        "inputs": [
            {
                "type": "pickString",
                "id": "region",
                "description": "Region",
                "options": ["eu", "us"],
                "default": "eu",
            },
            {"type": "promptString", "id": "api-key", "password": True, "default": "x"},
        ],
        "servers": {
            "svc": {
                "command": "npx",
                "args": ["svc", "--region", "${input:region}"],
                "env": {"SVC_KEY": "${input:api-key}"},
            }
        },
    }
    props = properties(config)
    assert props["region"]["enum"] == ["eu", "us"] and props["region"]["default"] == "eu"
    assert props["region"]["x-toolkit-input"]["reason"] == "choices"
    assert props["svc_key"]["writeOnly"] is True and "default" not in props["svc_key"]


def test_digests_depend_on_the_servers_not_the_wrapper() -> None:
    seed = json.loads((CORPUS / "registry" / "seed.json").read_text())
    shapes = [
        seed,
        {"servers": seed},
        {"servers": [{"server": s, "_meta": {}} for s in seed]},
    ]
    digests = [
        [source_digest(s) for s in import_metadata(json.dumps(doc).encode()).servers]
        for doc in shapes
    ]
    assert digests[0] == digests[1] == digests[2]
    alone = import_metadata(json.dumps(seed[-1]).encode()).servers
    assert [source_digest(s) for s in alone] == digests[0][-len(alone) :]
