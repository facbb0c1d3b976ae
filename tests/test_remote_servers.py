"""Imported remote MCP servers reached through the vault (issue 51), on SQLite and
PostgreSQL: a server.json whose remote is our streamable-HTTP server that needs a bearer
token (tests/mcp_servers/bearer_server.py), its `Authorization` header a template the
token fills. Configured over A2E, its tools are the server's own and a call reaches it; a
wrong token is a configure `error` that says 401 and stores nothing; a token the server
stops accepting during a call marks the instance, and the call says 401. With OAuth (the
server's RFC 9728 metadata names the authlib server of tests/oauth_server.py, which issues
the token the server accepts), the token the vault holds is sent as the bearer, and a 401
marks the connection for reconnecting as a refused refresh does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from mcp_support import free_port, our_server, start_http_server
from oauth_server import CLIENT_ID, AuthServer
from spec_support import call_tool, configure, hello, result_text, send
from test_oauth import CALLBACK, Clock, Rig, consent
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits.imports import DiscoveryOptions, import_package
from toolkit_vault.toolkits.remote_served import RemoteServedToolkit

TOKEN = "tok-remote-vault-5RkW8qZp3N"
NAME = "io.example/bearer-remote"
BOTH = ("toolkits", "tools")


@pytest.fixture
def remote() -> Iterator[str]:
    port = free_port()
    process = start_http_server(our_server("bearer_server.py", str(port), TOKEN, "http://x"), port)
    yield f"http://127.0.0.1:{port}/mcp"
    process.kill()
    process.wait()


def server_json(url: str) -> bytes:
    header = {
        "name": "Authorization",
        "value": "Bearer {token}",
        "variables": {"token": {"description": "API token", "isRequired": True, "isSecret": True}},
    }
    remote = {"type": "streamable-http", "url": url, "headers": [header]}
    return json.dumps({"name": NAME, "version": "1.0.0", "remotes": [remote]}).encode()


@pytest.fixture
def vault(home: VaultSettings, remote: str) -> Iterator[Vault]:
    opened = open_vault(home)
    import_package(opened.store, opened.registry, server_json(remote), "local")
    yield opened
    opened.instances.drop(lambda *_: True)
    opened.store.close()


def call(conn: A2EConnection, tool: str, **arguments: Any) -> dict[str, Any]:
    return call_tool(conn, NAME, tool, **arguments)


text = result_text


def test_a_remote_server_is_reached_with_the_configs_header(vault: Vault) -> None:
    fields = vault.registry.get(NAME).definition.config_schema["properties"]
    assert fields["token"]["writeOnly"] is True
    conn, session = hello(vault, capabilities=BOTH)
    answer = configure(conn, NAME, {"token": TOKEN})
    assert answer[0]["status"] == "ok", answer
    assert isinstance(vault.instances.instance(session, NAME), RemoteServedToolkit)
    (listed,) = send(conn, {"type": "tool/list/req"})
    tools = {t["name"]: t for t in listed["tools"] if t["toolkit"] == NAME}
    assert {"add", "revoke"} <= tools.keys()
    assert tools["add"]["input_schema"]["properties"]["a"]["type"] == "integer"
    assert text(call(conn, "add", a=2, b=3)) == "5"


def test_a_wrong_token_is_a_configure_error_that_says_401_and_stores_nothing(
    vault: Vault,
) -> None:
    conn, session = hello(vault, capabilities=BOTH)
    answer = configure(conn, NAME, {"token": "tok-wrong-0000000000"})
    said = json.dumps(answer)
    assert "401" in said, answer
    assert "tok-wrong" not in said
    assert vault.store.current_versions(session) == []
    assert vault.checks.last()[NAME].passed is False


def test_a_token_refused_during_a_call_marks_the_instance(vault: Vault) -> None:
    conn, session = hello(vault, capabilities=BOTH)
    assert configure(conn, NAME, {"token": TOKEN})[0]["status"] == "ok"
    assert text(call(conn, "revoke")) == "revoked"
    refused = call(conn, "add", a=1, b=1)
    assert refused.get("is_error") is True and "401" in text(refused), refused
    instance = vault.instances.instance(session, NAME)
    assert isinstance(instance, RemoteServedToolkit) and instance.unauthorized
    assert TOKEN not in json.dumps(refused)


def test_an_oauth_token_is_sent_and_a_401_marks_the_connection_for_reconnecting(
    home: VaultSettings, auth: AuthServer
) -> None:
    auth.knobs.access_token = TOKEN  # what this resource server accepts
    port = free_port()
    argv = our_server("bearer_server.py", str(port), TOKEN, "http://x", auth.issuer)
    process = start_http_server(argv, port)
    rig = Rig(auth, Clock())
    side = rig.open(open_vault(home))
    vault = side.vault
    try:
        remote = {"type": "streamable-http", "url": f"http://127.0.0.1:{port}/mcp"}
        data = json.dumps({"name": NAME, "version": "1.0.0", "remotes": [remote]}).encode()
        public_url = CALLBACK.removesuffix("/console/oauth/callback")
        options = DiscoveryOptions(client_id=CLIENT_ID, public_url=public_url, allow_private=True)
        import_package(vault.store, vault.registry, data, "local", discovery=options)
        assert "x-oauth" in vault.registry.get(NAME).schema.schema
        principal = Principal(create_token(vault.store, "agent", "remote")[0], "agent")
        conn = connect(vault, principal)
        (hi,) = send(conn, {"type": "handshake/req", "capabilities": list(BOTH)})
        session = hi["session_id"]
        (answer,) = send(
            conn, {"type": "toolkit/configure/req", "toolkit_name": NAME, "config": {}}
        )
        assert answer["status"] == "partial" and answer["intake_url"], answer
        consent(side, answer["intake_url"])
        assert text(call(conn, "add", a=20, b=22)) == "42"  # the held token as the bearer
        assert text(call(conn, "revoke")) == "revoked"
        refused = call(conn, "add", a=1, b=1)
        assert "401" in text(refused)
        failed = [e for e in vault.export_audit(0) if e["action"] == "oauth_refresh_failed"]
        assert [e["details"]["error"] for e in failed] == ["unauthorized"]
        (listed,) = send(conn, {"type": "toolkit/list/req"})
        mine = {t["name"]: t["configured"] for t in listed["toolkits"]}
        assert mine[NAME] is False  # a person must connect again
        assert session and TOKEN not in json.dumps(refused)
    finally:
        vault.instances.drop(lambda *_: True)
        vault.store.close()
        process.kill()
        process.wait()
