"""Progress passed through: an MCP client calling an imported server's tool with a
`progressToken` hears the `notifications/progress` that server sends during the call (our
API_KEY test server's `count`, run in the sandbox by the vault), through the call engine
(`CallContext.progress`); a client that asked for none is sent none, and its call is the
same. Driven by the official SDK's client over its JSON-RPC in-memory transport."""

from __future__ import annotations

import asyncio

import pytest
from mcp import Client

from spec_support import AGENT, hello, send
from test_imported_servers import KEY, NAME, SITE, served_vault  # noqa: F401 (a fixture)
from toolkit_vault.core.vault import Vault
from toolkit_vault.sandbox import sandbox_available
from toolkit_vault.transports.mcp.server import vault_mcp_server
from toolkit_vault.transports.mcp.sessions import McpSessions

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="no sandbox on this machine")


def test_an_imported_servers_progress_reaches_the_client(served_vault: Vault) -> None:  # noqa: F811
    conn, _ = hello(served_vault, capabilities=("toolkits", "tools"))
    configure = {
        "type": "toolkit/configure/req",
        "toolkit_name": NAME,
        "config": {"api_key": KEY, "pythonpath": str(SITE)},
        "scope": "principal",
    }
    assert send(conn, configure)[0]["status"] == "ok"
    sessions = McpSessions(served_vault)
    server = vault_mcp_server(sessions, lambda _ctx: (AGENT, "progress"))
    heard: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, total, message))

    async def run() -> None:
        async with Client(server, mode="legacy") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            tool = f"{NAME}__count"
            assert tool in names
            result = await client.call_tool(tool, {"steps": 3}, progress_callback=progress)
            assert not result.is_error and "counted to 3" in str(result.content)
            quiet = await client.call_tool(tool, {"steps": 2})
            assert not quiet.is_error and "counted to 2" in str(quiet.content)

    try:
        asyncio.run(run())
    finally:
        sessions.end("progress")
    assert heard[:3] == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]
    assert len(heard) == 3  # the second call asked for none
