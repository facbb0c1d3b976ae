"""MCP names and lists, in process (the SDK's own in-memory client, `mcp.Client(server)`):
names held to `[A-Za-z0-9_-]{1,64}`, stable and never shared, even where replacing
characters makes two originals alike or a hashed name lands on a name as written; the
list narrowed by the principal's allowance as `tool/list` is; past the tool limit, the
configured toolkits' tools plus the discovery tools that find and enable the others."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from test_allowance_calls import tool_vault  # noqa: F401 (a fixture)
from toolkit_vault.access.principals import Principal, authenticate, create_token
from toolkit_vault.core.allowances import set_allowance
from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import ToolkitConfigureRequest
from toolkit_vault.transports.mcp.names import ToolNames, mcp_name
from toolkit_vault.transports.mcp.server import ENABLE, FIND, vault_mcp_server
from toolkit_vault.transports.mcp.sessions import McpSessions

pytestmark = pytest.mark.one_database

RULE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def test_a_name_that_follows_the_rule_is_kept_as_written() -> None:
    assert mcp_name("filesystem", "read_file") == "filesystem__read_file"
    assert ToolNames([("filesystem", "read_file")]).name("filesystem", "read_file") == (
        "filesystem__read_file"
    )


def test_a_registry_name_is_mapped_to_the_rule_stably() -> None:
    original = ("io.github.owner/server#package-0", "search_issues")
    name = mcp_name(*original)
    assert RULE.fullmatch(name) and name.startswith("io_github_owner_server_package-0__search")
    assert name == mcp_name(*original)  # the same every list
    assert ToolNames([original]).tool(name) == original
    long = ("x" * 80, "y" * 80)
    assert RULE.fullmatch(mcp_name(*long)) and len(mcp_name(*long)) == 64


def test_originals_made_alike_by_the_mapping_keep_distinct_names() -> None:
    dotted, underscored = ("a.b", "x"), ("a_b", "x")
    names = ToolNames([dotted, underscored])
    assert names.name(*underscored) == "a_b__x"
    assert names.name(*dotted) != "a_b__x"
    assert {names.tool(names.name(*dotted)), names.tool("a_b__x")} == {dotted, underscored}


def test_a_hashed_name_landing_on_one_as_written_takes_a_longer_hash() -> None:
    dotted = ("a.b", "x")
    digest = hashlib.sha256(b"a.b__x").hexdigest()
    as_written = ("a_b", f"x_{digest[:8]}")  # what `a.b`'s `x` would be hashed to
    for order in ([dotted, as_written], [as_written, dotted]):
        names = ToolNames(order)
        assert names.name(*as_written) == f"a_b__x_{digest[:8]}"
        assert names.name(*dotted) == f"a_b__x_{digest[:16]}"
        assert len(names) == 2


def test_reserved_names_go_to_no_tool() -> None:
    names = ToolNames([("vault", "find_tools")], reserved=[FIND])
    assert names.name("vault", "find_tools") != FIND
    assert names.tool(FIND) is None


def _principal(vault: Vault, name: str) -> Principal:
    principal = authenticate(vault.store, create_token(vault.store, "agent", name)[1])
    assert principal is not None
    return principal


def _configure(vault: Vault, principal: Principal, session_id: str, root: Path) -> None:
    msg = ToolkitConfigureRequest(toolkit_name="filesystem", config={"root_dir": str(root)})
    assert vault.configure(principal, session_id, msg).status == "ok"


def _client(vault: Vault, principal: Principal, limit: int = 128) -> tuple[McpSessions, Client]:
    sessions = McpSessions(vault)
    server = vault_mcp_server(sessions, lambda _ctx: (principal, "memory"), limit)
    return sessions, Client(server)


def test_the_list_is_narrowed_by_the_principals_allowance(
    tool_vault: Vault,  # noqa: F811
) -> None:
    principal = _principal(tool_vault, "narrowed")
    _, client = _client(tool_vault, principal)

    async def names() -> set[str]:
        async with client:
            return {tool.name for tool in (await client.list_tools()).tools}

    everything = asyncio.run(names())
    assert {"filesystem__read_file", "filesystem__write_file", "calling__echo"} <= everything
    set_allowance(
        tool_vault.store, "operator", tool_vault.toolkit, "narrowed",
        tools=[("filesystem", "read_file")],
    )  # fmt: skip
    _, client = _client(tool_vault, principal)
    assert asyncio.run(names()) == {"filesystem__read_file"}


def test_past_the_limit_configured_tools_and_discovery_only(
    tool_vault: Vault,  # noqa: F811
    tmp_path: Path,
) -> None:
    principal = _principal(tool_vault, "many")
    sessions, client = _client(tool_vault, principal, limit=2)
    (tmp_path / "n.txt").write_text("hi")

    async def run() -> None:
        async with client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert listed == {FIND, ENABLE}
            found: Any = await client.call_tool(FIND, {"query": "filesystem read"})
            assert found.structured_content["tools"] == [
                {"toolkit": "filesystem", "tool": "read_file", "configured": False}
            ]
            session = sessions.session("memory", principal)
            await asyncio.to_thread(_configure, tool_vault, principal, session.session_id, tmp_path)
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert "filesystem__read_file" in listed and "calling__echo" not in listed
            read = await client.call_tool("filesystem__read_file", {"path": "n.txt"})
            assert not read.is_error
            enabled = await client.call_tool(ENABLE, {"toolkit": "calling"})
            assert enabled.is_error  # no intake page in process: a person is told where
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert "calling__echo" in listed

    asyncio.run(run())


def test_sessions_the_sdk_dropped_are_ended_here_too(tool_vault: Vault) -> None:  # noqa: F811
    """A client that leaves without a DELETE: the SDK drops its session after its idle
    timeout, and `prune` ends the A2E connection behind it (its calls, its instances)."""
    principal = _principal(tool_vault, "leaver")
    sessions = McpSessions(tool_vault)
    kept, left = sessions.session("kept", principal), sessions.session("left", principal)
    left.last_seen -= 7200
    assert sessions.prune(3600) == 1
    assert sessions.open_sessions() == [kept] and left.connection.session_id is None
    sessions.touch("kept")
    assert sessions.prune(3600) == 0
