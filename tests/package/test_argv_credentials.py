"""A credential written into argv or a URL is reported, never echoed, and becomes a secret field
the vault holds (issue 38); ``docker -e NAME`` passes a name and is no secret in argv.

Real files from tests/fixtures/mcp: the registry seed as published, and a real Claude Desktop
config with the credentials the issue saw added to its servers (no file of the corpus writes one
into ``args`` itself).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from corpus import CORPUS, load

from toolkit_package import import_metadata, to_toolkit_definitions
from toolkit_package.argv import argv_credential, url_credential

SLACK = "xoxb-0000000000-canarycanary"
PASSWORD = "canary-pw-1234"


def config_with_credentials() -> dict[str, Any]:
    doc = json.loads(
        (CORPUS / "clients/claude/3rzy__claude-google-workspace-config.json").read_text()
    )
    servers = doc["mcpServers"]
    first = next(iter(servers))
    servers[first]["args"] = [*servers[first].get("args", []), "--token", SLACK]
    servers["postgres"] = {
        "command": "npx",
        "args": [
            "-y",
            "@modelcontextprotocol/server-postgres",
            f"postgresql://admin:{PASSWORD}@db/x",
        ],
    }
    servers["docker-dart"] = {
        "command": "docker",
        "args": ["run", "-i", "--rm", "-e", "DART_TOKEN", "mcp/dart"],
        "env": {"DART_TOKEN": "dsa_canary"},
    }
    servers["remote"] = {"type": "http", "url": f"https://mcp.example.com/mcp?api_key={PASSWORD}"}
    return doc


def test_a_credential_in_args_or_a_url_is_reported_and_held_by_the_vault() -> None:
    doc = config_with_credentials()
    result = import_metadata(json.dumps(doc).encode())
    first = next(iter(doc["mcpServers"]))
    servers = {s.name: s for s in result.servers}
    token = next(i for i in servers[first].inputs if i.name == "token")
    assert (token.secret, token.in_argv, token.has_fixed_value) == (True, True, False)
    assert token.reason == "credential in the config: the value of --token"
    (url,) = [i for i in servers["postgres"].inputs if i.name == "postgresql-url"]
    assert url.secret and url.reason.endswith("a URL with a password in its user-info")
    (query,) = servers["remote"].inputs
    assert (query.name, query.secret, query.in_argv) == ("api_key", True, False)
    notes = [d for d in result.diagnostics if d.code == "credential_in_config"]
    assert [d.scope for d in notes] == [
        f"/mcpServers/{first}/args/{len(doc['mcpServers'][first]['args']) - 1}",
        "/mcpServers/postgres/args/2",
        "/mcpServers/remote/url",
    ]
    toolkits = to_toolkit_definitions(result)
    warnings = [w for t in toolkits for w in t.warnings]
    assert any("'token' is passed on the command line" in w for w in warnings)
    assert any("'postgresql-url' is passed on the command line" in w for w in warnings)
    everything = repr(result) + json.dumps([t.definition for t in toolkits]) + repr(warnings)
    assert SLACK not in everything and PASSWORD not in everything and "canary" not in everything
    for toolkit in toolkits:  # each such field is one the vault encrypts
        for prop in toolkit.definition["schema"]["properties"].values():
            if prop["x-toolkit-input"]["reason"].startswith("credential in the config"):
                assert prop["writeOnly"] is True


def test_docker_e_name_is_not_a_secret_in_argv_but_e_name_value_is() -> None:
    doc = config_with_credentials()
    result = import_metadata(json.dumps(doc).encode())
    (dart,) = [s for s in result.servers if s.name == "docker-dart"]
    assert [(i.name, i.in_argv) for i in dart.inputs] == [("DART_TOKEN", False)]
    (toolkit,) = [
        t for t in to_toolkit_definitions(result) if t.definition["name"] == "docker-dart"
    ]
    assert toolkit.warnings == []
    assert argv_credential(["-e", "SLACK_TOKEN=xoxb-1"], 1) == ("SLACK_TOKEN", "-e SLACK_TOKEN=...")
    assert argv_credential(["-e", "SLACK_TOKEN"], 1) is None
    assert argv_credential(["-e", "LOG_LEVEL=debug"], 1) is None


def test_the_published_registry_warns_for_no_docker_e_name() -> None:
    result = load(CORPUS / "registry" / "seed_2025_05_16.json")
    warnings = [w for t in to_toolkit_definitions(result) for w in t.warnings]
    bare = [w for w in warnings if "'-e " in w and "=" not in w.split("'")[1]]
    assert bare == []
    assert any("'-e HUBSPOT_ACCESS_TOKEN=" in w for w in warnings)  # a value in argv still warns
    mongo = [s for s in result.servers if s.name == "io.github.kiliczsh/mcp-mongo-server"]
    (hard_coded,) = [i for s in mongo for i in s.inputs if i.reason == "URL user-info"]
    assert hard_coded.name == "argument-0" and hard_coded.secret and hard_coded.in_argv
    published = (CORPUS / "registry" / "seed_2025_05_16.json").read_text()
    start = published.index("mongodb://") + len("mongodb://")
    userinfo = published[start : published.index("@", start)]  # user:password
    assert userinfo not in repr(warnings) and userinfo not in repr(mongo)
    assert any(d.code == "credential_in_argv" for d in result.diagnostics)


@pytest.mark.parametrize(
    ("args", "i", "found"),
    [
        (["--api-key=sk-canary0000000"], 0, ("api-key", "the value of --api-key")),
        (["--password", "x"], 1, ("password", "the value of --password")),
        (["--token-file", "/run/secrets/t"], 1, None),
        (["--token", "${input:token}"], 1, None),
        (["--port", "5432"], 1, None),
        (["ghp_0123456789abcdefghij"], 0, ("argument-0", "a token's well-known shape")),
        (["https://user@example.com/x"], 0, None),
    ],
)
def test_argv_shapes(args: list[str], i: int, found: tuple[str, str] | None) -> None:
    assert argv_credential(args, i) == found


def test_url_shapes() -> None:
    assert url_credential("redis://:pw@cache:6379/0") == (
        "redis-url",
        "a URL with a password in its user-info",
    )
    assert url_credential("https://h.example/sse?token=abc") == (
        "token",
        "a URL with a credential in its query",
    )
    assert url_credential("https://h.example/sse?page=2") is None
    assert url_credential("https://${input:user}:${input:pw}@h.example/") is None


def test_a_credential_a_bundle_manifest_writes_itself_is_reported_never_echoed() -> None:
    bundle = json.loads((CORPUS / "bundles" / "mcpb" / "hello-world-node.json").read_text())
    config = bundle["server"]["mcp_config"]
    config["args"] = [*config.get("args", []), "--api-key", SLACK]
    config["env"] = {**config.get("env", {}), "SERVICE_TOKEN": PASSWORD, "LOG_LEVEL": "debug"}
    result = import_metadata(json.dumps(bundle).encode())
    notes = [(d.scope, d.message) for d in result.diagnostics if d.code == "credential_in_manifest"]
    assert [scope for scope, _ in notes] == [
        f"/server/mcp_config/args/{len(config['args']) - 1}",
        "/server/mcp_config/env/SERVICE_TOKEN",
    ]
    assert SLACK not in repr(result) and PASSWORD not in repr(result)
