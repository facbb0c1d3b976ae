"""Imported local MCP servers run by the vault (issue 51), on SQLite (above the store): our
API_KEY test server (tests/mcp_servers/api_key_server.py) imported from a client-config
entry, configured over A2E with its key as a secret field, runs in the sandbox with the key
in its environment only; its own tools are the toolkit's tools, a call goes through the
engine (a result carrying the key is withheld), and a purge stops its process within a
second.

The server runs on the system's Python (`/usr/bin/python3`, visible in the sandbox) with
the published servers' site-packages bound read-only for the MCP SDK (`mcp_support.SITE`),
from a copy of tests/mcp_servers: as root, the sandbox runs as nobody, who cannot reach an
interpreter under /root, nor a checkout in a directory closed to others.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_support import OUR_SERVERS, PY_SERVERS, SITE, alive, published
from spec_support import call_tool, configure, hello, result_text, send
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import A2EConnection
from toolkit_vault.core.vault import Vault
from toolkit_vault.sandbox import sandbox_available
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits import served
from toolkit_vault.toolkits.imports import import_package
from toolkit_vault.tools.calls import CallRecord

KEY = "sk-served-canary-Zq81Wm4TvR"
NAME = "api-key-test"
BOTH = ("toolkits", "tools")

pytestmark = [
    pytest.mark.skipif(not sandbox_available(), reason="no sandbox on this machine"),
    pytest.mark.one_database,
]


def client_config() -> bytes:
    entry = {
        "command": "/usr/bin/python3",
        "args": [str(OUR_SERVERS / "api_key_server.py")],
        "env": {"API_KEY": "your-key-here", "PYTHONPATH": str(SITE)},
    }
    return json.dumps({"mcpServers": {NAME: entry}}).encode()


@pytest.fixture
def served_vault(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    private = Path(tempfile.mkdtemp(prefix="tkv-servers-", dir="/tmp"))
    os.chmod(private, 0o711)  # noqa: S103 (the sandbox user passes through, as root)
    monkeypatch.setenv(served.SERVERS_DIR_ENV, str(private))
    monkeypatch.setenv(served.SERVER_BINDS_ENV, f"{SITE}:{OUR_SERVERS}")
    monkeypatch.delenv(served.SANDBOX_ENV, raising=False)
    vault = open_vault(home)
    records: list[CallRecord] = []
    vault.record_call = records.append
    vault.records = records  # type: ignore[attr-defined]
    import_package(vault.store, vault.registry, client_config(), "local")
    yield vault
    vault.instances.drop(lambda *_: True)  # every server this test started stops
    vault.store.close()


def configured(vault: Vault) -> tuple[A2EConnection, str]:
    conn, session = hello(vault, capabilities=BOTH)
    fields = vault.registry.get(NAME).definition.config_schema["properties"]
    assert fields["api_key"]["writeOnly"] is True  # the key is a secret field
    answer = configure(conn, NAME, {"api_key": KEY, "pythonpath": str(SITE)})
    assert answer[0]["status"] == "ok", answer
    return conn, session


def call(conn: A2EConnection, tool: str, **arguments: Any) -> dict[str, Any]:
    return call_tool(conn, NAME, tool, **arguments)


text = result_text


def server_pid(vault: Vault, session: str) -> int:
    """The pid of the session's server, started first if it is not yet (lazily)."""
    instance = vault.instances.instance(session, NAME)
    assert isinstance(instance, served.ServedToolkit)
    instance.ready()
    assert instance.pid is not None
    return instance.pid


def test_the_servers_own_tools_are_listed_and_a_call_works(served_vault: Vault) -> None:
    conn, _ = configured(served_vault)
    (answer,) = send(conn, {"type": "tool/list/req"})
    tools = {t["name"]: t for t in answer["tools"] if t["toolkit"] == NAME}
    assert {"whoami", "echo_key", "try_read", "sleep"} <= tools.keys()
    assert tools["sleep"]["input_schema"]["properties"]["seconds"]["type"] == "number"
    assert text(call(conn, "whoami")) == "authorized"  # the key reached its environment
    records = [(r.toolkit_name, r.tool, r.outcome) for r in served_vault.records]  # type: ignore[attr-defined]
    assert (NAME, "whoami", "ok") in records  # audited like any call, the server's tool named
    refused = call(conn, "sleep", seconds="long")
    assert refused["type"] == "error", refused  # checked against the server's own schema


def test_the_key_is_in_the_environment_only_and_the_server_is_confined(
    served_vault: Vault, home: VaultSettings
) -> None:
    conn, session = configured(served_vault)
    pid = server_pid(served_vault, session)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert KEY.encode() not in cmdline
    assert b"bwrap" in cmdline  # launched through the sandbox
    for secret in (home.home / "vault.json", home.home, Path(f"/proc/{os.getpid()}/environ")):
        assert text(call(conn, "try_read", path=str(secret))).startswith("refused"), secret
    assert text(call(conn, "try_read", path="/usr/bin/env")) == "read"  # the tool itself works


def test_a_result_carrying_the_key_is_withheld(served_vault: Vault) -> None:
    conn, _ = configured(served_vault)
    answer = call(conn, "echo_key")
    assert answer["type"] == "error" and answer["details"][0]["reason"] == "withheld", answer
    assert KEY not in json.dumps(answer)


def test_the_key_printed_to_stderr_leaves_no_trace_in_the_log(
    served_vault: Vault, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="toolkit_vault.mcp_client")
    conn, _ = configured(served_vault)
    assert text(call(conn, "leak_to_stderr")) == "printed"
    ends = time.monotonic() + 5
    while "using API_KEY=" not in caplog.text and time.monotonic() < ends:
        time.sleep(0.02)
    assert "using API_KEY=[REDACTED]" in caplog.text
    assert KEY not in caplog.text


def test_a_purge_stops_the_process_within_a_second(served_vault: Vault) -> None:
    conn, session = configured(served_vault)
    pid = server_pid(served_vault, session)
    assert alive(pid)
    served_vault.purge("operator", session, NAME)
    ends = time.monotonic() + 1.0
    while alive(pid) and time.monotonic() < ends:
        time.sleep(0.02)
    assert not alive(pid)
    answer = call(conn, "whoami")
    assert answer["type"] == "error", answer


def test_a_reconfigure_starts_a_new_server_and_stops_the_old(served_vault: Vault) -> None:
    conn, session = configured(served_vault)
    old = server_pid(served_vault, session)
    answer = configure(conn, NAME, {"api_key": KEY + "-2", "pythonpath": str(SITE)})
    assert answer[0]["status"] == "ok", answer
    new = server_pid(served_vault, session)
    assert new != old and alive(new)
    ends = time.monotonic() + 1.0
    while alive(old) and time.monotonic() < ends:
        time.sleep(0.02)
    assert not alive(old)
    assert text(call(conn, "whoami")) == "authorized"


def test_serve_states_the_sandbox_being_off(served_vault: Vault) -> None:
    settings = served._servers.settings
    assert served.sandbox_warning() is None  # on, and available here
    try:
        served.use_servers(dataclasses.replace(settings, sandbox=False))
        assert "the sandbox is off" in (served.sandbox_warning() or "")
    finally:
        served.use_servers(settings)


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root vault's sandbox runs as another user")
def test_serve_names_a_directory_its_sandbox_user_cannot_reach(
    served_vault: Vault, tmp_path: Path
) -> None:
    closed = tmp_path / "closed"
    (closed / "packages").mkdir(parents=True)
    closed.chmod(0o700)
    settings = served._servers.settings
    try:
        served.use_servers(dataclasses.replace(settings, packages=(closed / "packages",)))
        assert f"{closed} is closed to the sandbox user" in (served.sandbox_warning() or "")
    finally:
        served.use_servers(settings)


def test_the_published_time_server_runs_through_the_vault(
    home: VaultSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyPI's mcp-server-time, from the cache scripts/components/mcp_servers.sh fills (a venv
    of /usr/bin/python3, where the sandbox's user can read it), imported from a client
    entry, configured over A2E and called confined."""
    (command,) = published("mcp-server-time")
    private = Path(tempfile.mkdtemp(prefix="tkv-servers-", dir="/tmp"))
    os.chmod(private, 0o711)  # noqa: S103 (the sandbox user passes through, as root)
    monkeypatch.setenv(served.SERVERS_DIR_ENV, str(private))
    monkeypatch.setenv(served.SERVER_BINDS_ENV, str(PY_SERVERS.parent))
    vault = open_vault(home)
    try:
        entry = {"command": command, "args": ["--local-timezone", "UTC"]}
        config = json.dumps({"mcpServers": {"time": entry}}).encode()
        import_package(vault.store, vault.registry, config, "local")
        conn, _ = hello(vault, capabilities=BOTH)
        assert configure(conn, "time", {})[0]["status"] == "ok"
        (listed,) = send(conn, {"type": "tool/list/req"})
        assert {"get_current_time", "convert_time"} <= {t["name"] for t in listed["tools"]}
        message = {
            "type": "tool/call/req",
            "id": "time-1",
            "toolkit_name": "time",
            "tool_name": "get_current_time",
            "arguments": {"timezone": "UTC"},
        }
        (answer,) = send(conn, message)
        assert json.loads(text(answer))["timezone"] == "UTC"
    finally:
        vault.instances.drop(lambda *_: True)
        vault.store.close()
