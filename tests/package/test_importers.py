"""Importers: the three known formats in every schema spelling, secrets wherever they sit,
invalid siblings skipped with a diagnostic, unknown formats refused, hostile input bounded."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from package_builders import EXAMPLES

from toolkit_package.importers import (
    MAX_SERVERS,
    ConfigInput,
    ImportedServer,
    ImportRefused,
    ImportResult,
    import_metadata,
)
from toolkit_package.model import StrategyKind


def load(doc: Any) -> ImportResult:
    return import_metadata(json.dumps(doc).encode())


def refused(data: bytes) -> str:
    with pytest.raises(ImportRefused) as info:
        import_metadata(data)
    return info.value.code


def field(server: ImportedServer, name: str) -> ConfigInput:
    (found,) = [i for i in server.inputs if i.name == name]
    return found


def test_secret_variable_inside_runtime_argument_is_flagged_in_argv(
    vector: Callable[[str], bytes],
) -> None:
    result = import_metadata(vector("server-argv-variable-secret.json"))
    assert result.format == "mcp_registry_server"
    (server,) = result.servers
    assert (server.name, server.strategy, server.transport, server.registry) == (
        "io.github.example/weather-container",
        StrategyKind.LOCAL_MCP,
        "stdio",
        "oci",
    )
    token = field(server, "weather_token")
    assert (token.kind, token.secret, token.required, token.in_argv) == (
        "variable",
        True,
        True,
        True,
    )
    assert token.location == "/packages/0/runtimeArguments/0/variables/weather_token"
    network = field(server, "--network")
    assert network.has_fixed_value and network.in_argv and not network.secret
    units = field(server, "units")
    assert (units.kind, units.secret, units.in_argv, units.has_fixed_value) == (
        "argument",
        False,
        True,
        False,
    )
    assert [i.name for i in server.configurable] == ["weather_token", "units", "WEATHER_REGION"]


def test_secret_header_on_remote(vector: Callable[[str], bytes]) -> None:
    (server,) = import_metadata(vector("server-remote-secret-header.json")).servers
    assert (server.strategy, server.transport) == (StrategyKind.REMOTE_MCP, "streamable-http")
    key = field(server, "X-API-Key")
    assert (key.kind, key.secret, key.required, key.in_argv) == ("header", True, True, False)
    assert field(server, "X-Client").has_fixed_value
    tenant = field(server, "tenant")
    assert (tenant.kind, tenant.secret, tenant.in_argv) == ("variable", False, False)
    assert tenant.location == "/remotes/0/variables/tenant"


def test_secret_environment_variables(vector: Callable[[str], bytes]) -> None:
    (server,) = import_metadata(vector("server-secret-env.json")).servers
    summary = {i.name: (i.secret, i.required, i.has_fixed_value) for i in server.inputs}
    assert summary == {
        "TRACKER_API_TOKEN": (True, True, False),
        "TRACKER_WEBHOOK_SECRET": (True, False, False),
        "TRACKER_BASE_URL": (False, False, False),
        "TRACKER_LOG_LEVEL": (False, False, True),
    }
    assert all(i.kind == "env" and not i.in_argv for i in server.inputs)


def test_snake_case_schema(vector: Callable[[str], bytes]) -> None:
    result = import_metadata(vector("server-snake-case.json"))
    package, remote = result.servers
    assert package.name == "io.github.example/brave-search#package-0"
    assert remote.name == "io.github.example/brave-search#remote-0"
    assert (package.version, package.registry) == ("1.0.2", "npm")
    assert field(package, "BRAVE_API_KEY").secret
    api_key = field(package, "api_key")
    assert (api_key.secret, api_key.in_argv, api_key.kind) == (True, True, "variable")
    assert field(package, "--yes").has_fixed_value
    assert (remote.strategy, remote.transport) == (StrategyKind.REMOTE_MCP, "sse")
    assert field(remote, "X-Subscription-Token").secret


def test_camel_and_snake_spellings_give_the_same_inputs() -> None:
    camel = {
        "name": "x/y",
        "packages": [
            {
                "registryType": "pypi",
                "environmentVariables": [{"name": "K", "isSecret": True, "isRequired": True}],
                "packageArguments": [{"type": "positional", "valueHint": "dir"}],
            }
        ],
    }
    snake = {
        "name": "x/y",
        "packages": [
            {
                "registry_type": "pypi",
                "environment_variables": [{"name": "K", "is_secret": True, "is_required": True}],
                "package_arguments": [{"type": "positional", "value_hint": "dir"}],
            }
        ],
    }

    def shape(result: ImportResult) -> list[tuple[Any, ...]]:
        return [(i.name, i.kind, i.secret, i.required, i.in_argv) for i in result.servers[0].inputs]

    assert (
        shape(load(camel))
        == shape(load(snake))
        == [
            ("dir", "argument", False, False, True),
            ("K", "env", True, True, False),
        ]
    )


def test_variable_filling_a_secret_value_is_secret_and_undeclared_ones_fail_closed() -> None:
    doc = {
        "name": "x/y",
        "remotes": [
            {
                "type": "sse",
                "url": "https://example.com/{region}/{shard}/sse",
                "headers": [
                    {
                        "name": "Authorization",
                        "isSecret": True,
                        "value": "Bearer {token}",
                        "variables": {"token": {"description": "what to send"}},
                    }
                ],
            }
        ],
    }
    result = load(doc)
    (server,) = result.servers
    token = field(server, "token")
    assert (token.secret, token.reason) == (True, "fills a secret (isSecret)")
    region = field(server, "region")
    assert (region.secret, region.required, region.reason) == (False, True, "harmless name: region")
    shard = field(server, "shard")  # undeclared, and nothing shows it is public
    assert (shard.secret, shard.reason) == (True, "nothing shows it is public")
    assert [(d.code, d.scope) for d in result.diagnostics] == [
        ("undeclared_variable", "/remotes/0/variables/region"),
        ("undeclared_variable", "/remotes/0/variables/shard"),
    ]


def test_invalid_package_skipped_sibling_remote_kept() -> None:
    doc = {
        "name": "x/y",
        "packages": [{"environmentVariables": [{"name": "K", "isSecret": "yes"}]}],
        "remotes": [{"type": "sse", "url": "https://example.com/sse"}],
    }
    result = load(doc)
    assert [s.name for s in result.servers] == ["x/y#remote-0"]
    assert result.skipped == 1
    assert result.diagnostics[0].scope == "/packages/0/environmentVariables/0/isSecret"


def test_conflicting_spellings_are_not_resolved() -> None:
    doc = {
        "name": "x/y",
        "packages": [
            {"environmentVariables": [{"name": "K", "isSecret": True, "is_secret": False}]}
        ],
    }
    result = load(doc)
    assert result.servers == () and result.skipped == 1


def test_bundle_manifest_user_config(vector: Callable[[str], bytes]) -> None:
    result = import_metadata(vector("bundle-manifest.json"))
    assert result.format == "mcp_bundle_manifest"
    (server,) = result.servers
    assert server.tools == ("search_files", "rank_results")
    summary = {i.name: (i.secret, i.required, i.in_argv, i.kind) for i in server.inputs}
    assert summary == {
        "api_key": (True, True, True, "user_config"),
        "rank_token": (True, False, False, "user_config"),
        "root_dir": (False, True, True, "user_config"),
    }


def test_bundle_undeclared_reference_and_missing_config() -> None:
    doc = {
        "manifest_version": "0.2",
        "name": "b",
        "server": {"type": "node", "mcp_config": {"command": "node", "args": ["${user_config.k}"]}},
    }
    result = load(doc)
    assert [d.code for d in result.diagnostics] == ["undeclared_user_config"]
    broken = load({"dxt_version": "0.1", "name": "b", "server": {"type": "node"}})
    assert (broken.servers, broken.skipped) == ((), 1)


def test_client_config_invalid_sibling_skipped_with_diagnostic(
    vector: Callable[[str], bytes],
) -> None:
    result = import_metadata(vector("client-config.json"))
    assert result.format == "client_config"
    assert [s.name for s in result.servers] == ["github", "analytics"]
    assert result.skipped == 1
    assert [(d.code, d.scope) for d in result.diagnostics] == [
        ("invalid_entry", "/mcpServers/broken/command")
    ]
    github, analytics = result.servers
    assert field(github, "GITHUB_PERSONAL_ACCESS_TOKEN").secret  # fail closed
    assert field(github, "gh_token").in_argv
    assert (analytics.strategy, field(analytics, "Authorization").kind) == (
        StrategyKind.REMOTE_MCP,
        "header",
    )


def test_vscode_servers_map_with_declared_inputs() -> None:
    doc = {
        "inputs": [
            {"type": "promptString", "id": "workspace", "password": False},
            {"type": "promptString", "id": "key", "password": True},
        ],
        "servers": {
            "s": {"type": "stdio", "command": "x", "args": ["${input:workspace}", "${input:key}"]},
            "t": {"type": "websocket", "url": "wss://example.com"},
        },
    }
    result = load(doc)
    (server,) = result.servers
    assert [(i.name, i.secret, i.in_argv) for i in server.inputs] == [
        ("workspace", False, True),
        ("key", True, True),
    ]
    assert result.skipped == 1


@pytest.mark.parametrize(
    ("doc", "code"),
    [
        ({"foo": 1}, "unknown_format"),
        ({"name": "x/y"}, "unknown_format"),
        ([{"mcpServers": {}}], "unknown_format"),
        ("mcpServers", "unknown_format"),
        ({"mcpServers": {}, "packages": []}, "ambiguous_format"),
        ({"mcpServers": {}, "servers": {}}, "ambiguous_format"),
        ({"mcpServers": []}, "invalid_client_config"),
        ({"name": 5, "packages": []}, "invalid_server_json"),
        ({"name": "x/y", "packages": {}}, "invalid_server_json"),
    ],
)
def test_other_formats_and_shapes_refused(doc: Any, code: str) -> None:
    assert refused(json.dumps(doc).encode()) == code


def test_bounds() -> None:
    assert refused(b" " * (1 << 20) + b"{}") == "input_too_large"
    assert refused(b'{"mcpServers":' + b"[" * 64 + b"]" * 64 + b"}") == "nesting_too_deep"
    ok = b'{"mcpServers":{}, "x":' + b"[" * 63 + b"]" * 63 + b"}"
    assert import_metadata(ok).servers == ()
    assert refused(b'{"mcpServers":{}, "mcpServers":{}}') == "duplicate_key"
    huge = json.dumps({"mcpServers": {}, "x": "a" * (64 * 1024 + 1)}).encode()
    assert refused(huge) == "string_too_long"
    assert refused(b'{"mcpServers":{}, "x": NaN}') == "not_json"
    assert refused(b'{"mcpServers":{}, "x": "\\ud800"}') == "invalid_string"
    assert refused(b"\xff\xfe{}") == "not_utf8"
    assert refused(b'{"mcpServers":{}, "x": ' + b"1" * 5000 + b"}") == "not_json"
    many = {"mcpServers": {f"s{i}": {"command": "x"} for i in range(MAX_SERVERS + 1)}}
    assert refused(json.dumps(many).encode()) == "too_many_servers"
    most = {"mcpServers": {f"s{i}": {"command": "x"} for i in range(MAX_SERVERS)}}
    assert len(load(most).servers) == MAX_SERVERS == 5000
    listing = {"servers": [{"name": f"s{i}", "remotes": []} for i in range(MAX_SERVERS + 1)]}
    assert len(import_metadata(json.dumps(listing).encode()).servers) == 0  # no server offered
    remote = {"type": "sse", "url": "https://example.com/sse"}
    listing = {"servers": [{"name": f"s{i}", "remotes": [remote]} for i in range(MAX_SERVERS + 1)]}
    assert refused(json.dumps(listing).encode()) == "too_many_servers"


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    doc = {"mcpServers": {"s": {"command": "x", "args": ["[" * 100 + "{" * 100 + '\\"']}}}
    assert len(load(doc).servers) == 1


def test_input_digest_is_exact_sha256(vector: Callable[[str], bytes]) -> None:
    data = vector("server-secret-env.json")
    assert import_metadata(data).input_sha256 == hashlib.sha256(data).hexdigest()
    with pytest.raises(ImportRefused) as info:
        import_metadata(b"[]")
    assert info.value.input_sha256 == hashlib.sha256(b"[]").hexdigest()


@pytest.mark.parametrize("name", EXAMPLES)
def test_import_result_holds_no_value(name: str, vector: Callable[[str], bytes]) -> None:
    """No value, except a public input's declared default: never a secret one's."""
    result = import_metadata(vector(name))
    text = repr(result)
    for server in result.servers:
        for item in server.inputs:
            assert item.secret is False or (item.default, item.choices) == (None, ())
            if isinstance(item.default, str):
                assert item.default.startswith(("canary-default-", "https://canary-default-"))
                text = text.replace(repr(item.default), "")
        text = text.replace(repr(server.launch), "")
        assert_recipe_public(server)
    assert "canary" not in text.lower()


def assert_recipe_public(server: ImportedServer) -> None:
    """A launch recipe holds the publisher's package and fixed values (public metadata it
    runs with) and defaults of public inputs only: never a secret input's default."""
    secret = {item.name for item in server.inputs if item.secret}
    recipe = json.loads(server.launch) if server.launch else {}
    groups = [*recipe.get("runtime_args", ()), *recipe.get("package_args", ())]
    parts = [p for g in groups for p in g["parts"]] + list(recipe.get("environment", {}).values())
    for part in parts:
        assert "default" not in part or part["input"] not in secret, part
