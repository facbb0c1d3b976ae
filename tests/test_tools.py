"""The spec's relationship: "Once a toolkit is configured, its tools appear in tool/list/resp
with toolkit field set", behind the `tools` capability, through resume and purge."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from sqlalchemy import select, update

from spec_support import AGENT, configure, hello, mail_config, send
from test_stdio import CLI
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import ToolListRequest
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import ConfigVersion

BOTH = ("toolkits", "tools")
FILESYSTEM = [("read_file", "filesystem"), ("write_file", "filesystem"), ("list_dir", "filesystem")]
CALENDAR = [("list_events", "spec-calendar"), ("create_event", "spec-calendar")]
MAIL = [("send", "spec-mail"), ("read", "spec-mail"), ("search", "spec-mail")]


def tools(conn: Any) -> list[tuple[str, str]]:
    (answer,) = send(conn, {"type": "tool/list/req", "id": "t1"})
    assert (answer["type"], answer["req_id"]) == ("tool/list/resp", "t1"), answer
    return [(t["name"], t["toolkit"]) for t in answer["tools"]]


def test_tool_list_needs_the_tools_capability(vault: Vault) -> None:
    conn = connect(vault, AGENT)
    (early,) = send(conn, {"type": "tool/list/req", "id": "t0"})
    assert (early["code"], early["req_id"]) == ("CAPABILITY_NOT_NEGOTIATED", "t0")
    toolkits_only, _ = hello(vault)
    (refused,) = send(toolkits_only, {"type": "tool/list/req", "id": "t1"})
    assert (refused["type"], refused["code"], refused["req_id"]) == (
        "error",
        "CAPABILITY_NOT_NEGOTIATED",
        "t1",
    )
    assert refused["message"] == "handshake granting tools first"
    tools_only = connect(vault, AGENT)
    (granted,) = send(tools_only, {"type": "handshake/req", "capabilities": ["tools", "mcp"]})
    assert granted["capabilities"] == ["tools"]
    (no_toolkits,) = send(tools_only, {"type": "toolkit/list/req", "id": "l1"})
    assert (no_toolkits["code"], no_toolkits["message"]) == (
        "CAPABILITY_NOT_NEGOTIATED",
        "handshake granting toolkits first",
    )
    assert tools(tools_only) == []
    hello_both = {"type": "handshake/req", "capabilities": ["tools", "toolkits"]}
    (both,) = send(connect(vault, AGENT), hello_both)
    assert both["capabilities"] == ["toolkits", "tools"]


def test_the_wire_shape_of_tool_list(vault: Vault) -> None:
    conn, _ = hello(vault, capabilities=BOTH)
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    (line,) = conn.handle_raw(json.dumps({"type": "tool/list/req", "id": "t9"}))
    answer = json.loads(line)
    assert list(answer) == ["type", "id", "version", "ts", "req_id", "tools"]
    read_file = answer["tools"][0]
    assert list(read_file) == ["name", "toolkit", "description", "input_schema", "annotations"]
    assert (read_file["name"], read_file["toolkit"]) == ("read_file", "filesystem")
    assert read_file["input_schema"]["type"] == "object"
    assert read_file["annotations"] == {"readOnlyHint": True}  # no output schema: absent


def test_tools_of_every_configured_toolkit_minus_the_unavailable(spec_vault: Vault) -> None:
    conn, _ = hello(spec_vault, capabilities=BOTH)
    assert tools(conn) == []
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    assert tools(conn) == FILESYSTEM
    assert configure(conn, "spec-mail", mail_config(mode="partial"))[0]["status"] == "partial"
    configure(conn, "spec-calendar", {"calendar": "work", "token": "tkv-canary-cal-token"})
    assert tools(conn) == FILESYSTEM + CALENDAR + MAIL[1:]  # `send` reported unavailable
    assert configure(conn, "spec-mail", mail_config(mode="error"))[0]["status"] == "error"
    assert tools(conn) == FILESYSTEM + CALENDAR + MAIL[1:]  # the partial version stays current
    configure(conn, "spec-mail", mail_config())
    assert tools(conn) == FILESYSTEM + CALENDAR + MAIL
    configure(conn, "spec-mail", mail_config(mode="partial-unnamed"))
    assert tools(conn) == FILESYSTEM + CALENDAR  # partial naming no tool: none advertised
    other, _ = hello(spec_vault, capabilities=BOTH)
    assert tools(other) == []  # another session
    failed, _ = hello(spec_vault, capabilities=BOTH)
    configure(failed, "spec-mail", mail_config(mode="raise"))
    assert tools(failed) == []


def test_tool_list_after_resume_in_a_new_process(spec_vault: Vault, home: VaultSettings) -> None:
    conn, session = hello(spec_vault, capabilities=BOTH)
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    configure(conn, "spec-mail", mail_config(mode="partial"))
    before = tools(conn)
    restarted = open_vault(home)
    try:
        resumed, _ = hello(restarted, session, capabilities=("tools",))
        assert tools(resumed) == before == FILESYSTEM + MAIL[1:]
        fresh, _ = hello(restarted, capabilities=("tools",))
        assert tools(fresh) == []
    finally:
        restarted.store.engine.dispose()


def test_a_toolkit_whose_stored_config_fails_to_decrypt_lists_no_tools(
    spec_vault: Vault, home: VaultSettings
) -> None:
    conn, session = hello(spec_vault, capabilities=BOTH)
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    configure(conn, "spec-mail", mail_config())
    with spec_vault.store.engine.begin() as db:
        row = db.execute(
            select(ConfigVersion).where(ConfigVersion.toolkit_name == "spec-mail")
        ).one()
        tampered = bytes([row.wrapped_dek[0] ^ 1]) + row.wrapped_dek[1:]
        db.execute(
            update(ConfigVersion).where(ConfigVersion.id == row.id).values(wrapped_dek=tampered)
        )
    restarted = open_vault(home)
    try:
        resumed, _ = hello(restarted, session, capabilities=BOTH)
        assert tools(resumed) == FILESYSTEM
    finally:
        restarted.store.engine.dispose()


def test_tool_list_after_purge_here_and_by_another_process(
    spec_vault: Vault, home: VaultSettings
) -> None:
    conn, session = hello(spec_vault, capabilities=BOTH)
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    configure(conn, "spec-mail", mail_config())
    spec_vault.purge("operator", session, "filesystem")
    assert tools(conn) == MAIL
    other_process = open_vault(home)
    try:
        other_process.purge("operator", session)
    finally:
        other_process.store.engine.dispose()
    assert tools(conn) == []  # this process's live instance is forgotten on the next read
    configure(conn, "filesystem", {"root_dir": "/srv"})
    assert tools(conn) == FILESYSTEM


def test_a_connection_bound_without_a_handshake_may_list_tools(vault: Vault) -> None:
    conn, session = hello(vault)
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    one_shot = connect(vault, AGENT)  # as HTTP POST with an A2E-Session header does
    one_shot.bind(session)
    answer = one_shot.handle(ToolListRequest(id="t2"))
    assert answer.type == "tool/list/resp"
    assert [(t.name, t.toolkit) for t in answer.tools] == FILESYSTEM  # type: ignore[attr-defined]


def _stdio(env: dict[str, str], *messages: dict[str, Any]) -> list[dict[str, Any]]:
    done = subprocess.run(
        [CLI, "stdio"],
        input="".join(json.dumps(m) + "\n" for m in messages),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.usefixtures("home")
def test_tool_list_over_stdio_then_resumed_in_a_new_process(spec_cli_env: dict[str, str]) -> None:
    listing = {"type": "tool/list/req", "id": "t1"}
    first = _stdio(
        spec_cli_env,
        {"type": "handshake/req", "capabilities": list(BOTH)},
        {
            "type": "toolkit/configure/req",
            "toolkit_name": "spec-mail",
            "config": mail_config(mode="partial"),
        },
        listing,
    )
    session = first[0]["session_id"]
    any_object = {"type": "object"}  # a tool declared by name alone takes any object
    search = {  # declared by the plugin (`_list_tools`), with its schema and annotations
        "name": "search",
        "toolkit": "spec-mail",
        "description": "Search the mailbox",
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1}},
            "required": ["query"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True},
    }
    read = {"name": "read", "toolkit": "spec-mail", "description": None, "input_schema": any_object}
    expected = [read, search]
    assert first[-1]["tools"] == expected
    again = _stdio(
        spec_cli_env,
        {"type": "handshake/req", "capabilities": ["tools"], "session_id": session},
        listing,
    )
    assert [m["type"] for m in again] == ["handshake/resp", "tool/list/resp"]
    assert again[-1]["tools"] == expected
