"""`toolkit-vault mcp`: MCP over stdio as the local principal, for clients that launch
their servers (Claude Desktop, Claude Code, VS Code, Cursor). One process is one MCP
session, so one A2E session. Nothing but protocol goes to stdout, and every log record is
redacted, since toolkit plugins initialize in this process with their decrypted configs.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.vault import Vault
from toolkit_vault.logs import redact_every_record
from toolkit_vault.transports.mcp.server import initialization, vault_mcp_server
from toolkit_vault.transports.mcp.sessions import McpSessions

__all__ = ["serve_mcp_stdio"]

_KEY = "stdio"


def serve_mcp_stdio(vault: Vault, principal: Principal) -> None:
    redact_every_record()
    sessions = McpSessions(vault)

    def caller(_ctx: ServerRequestContext[Any, Any]) -> tuple[Principal, str]:
        return principal, _KEY

    server = vault_mcp_server(sessions, caller)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, initialization(server))

    try:
        anyio.run(main)
    finally:
        sessions.end(_KEY)
