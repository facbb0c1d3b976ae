"""`/mcp` on `serve`: MCP's streamable HTTP transport, the official SDK's session manager
behind the vault's own guard. Every request (every message, the stream `GET` and the
`DELETE` too) passes `Gate.admit` first, so a missing, unknown, expired or revoked bearer
token is answered 401 with `WWW-Authenticate` on its next message, as on every route; the
principal becomes the request's user, and the SDK refuses a session id presented with
another principal's token as if it did not exist.

The session manager needs a task group for its sessions' lifetime; it is started on the
first request, on `serve`'s own loop, and lives as long as the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import (
    DEFAULT_SESSION_IDLE_TIMEOUT,
    StreamableHTTPSessionManager,
)
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.transports.http_guards import Gate
from toolkit_vault.transports.mcp.server import DEFAULT_TOOL_LIMIT, vault_mcp_server
from toolkit_vault.transports.mcp.sessions import ONCE, McpSessions
from toolkit_vault.transports.refusals import Refused, error_body

__all__ = ["MCP_PATH", "McpHttp"]

MCP_PATH = "/mcp"
_PRINCIPAL = "toolkit_vault.principal"  # where a request's principal waits in its scope
_SESSION_HEADER = "mcp-session-id"
# The SDK drops a session after this long without a request; ours go a while after it.
IDLE_SECONDS = 2 * DEFAULT_SESSION_IDLE_TIMEOUT
_ONCE = "toolkit_vault.mcp_once"  # a session made for one request (2026-07-28 has none)


class McpHttp:
    """The ASGI app of `/mcp`."""

    def __init__(self, vault: Vault, gate: Gate, tool_limit: int = DEFAULT_TOOL_LIMIT) -> None:
        self.sessions = McpSessions(vault)
        self._gate = gate
        self.server: Server[Any] = vault_mcp_server(self.sessions, _caller, tool_limit)
        self._manager = StreamableHTTPSessionManager(app=self.server)
        self._started: asyncio.Future[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            principal = await self._gate.admit(request, ("agent",))
        except Refused as exc:
            await _refused(exc)(scope, receive, send)
            return
        scope[_PRINCIPAL] = principal
        # The SDK binds a session to the user that opened it; the token itself stays out.
        scope["user"] = AuthenticatedUser(
            AccessToken(token="", client_id=principal.principal_id, scopes=[])
        )
        await self._start()
        if key := request.headers.get(_SESSION_HEADER):
            self.sessions.touch(key)
        else:  # a new session: forget those the SDK has dropped since (idle, no DELETE)
            self.sessions.prune(IDLE_SECONDS)
        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            if once := scope.get(_ONCE):
                self.sessions.end(once)
        if scope["method"] == "DELETE" and (key := request.headers.get(_SESSION_HEADER)):
            with contextlib.suppress(VaultError):
                self.sessions.end(key)

    async def _start(self) -> None:
        if self._started is None:
            loop = asyncio.get_running_loop()
            self._started = started = loop.create_future()

            async def run() -> None:
                async with self._manager.run():
                    started.set_result(None)
                    await asyncio.Event().wait()  # until the process ends

            self._task = loop.create_task(run())
        await self._started


def _caller(ctx: ServerRequestContext[Any, Any]) -> tuple[Principal, str]:
    """The principal `McpHttp` admitted, and its MCP session id (a stateless request of
    2026-07-28, which has none, gets a session of its own)."""
    request = ctx.request
    if not isinstance(request, Request) or _PRINCIPAL not in request.scope:
        raise VaultError("no principal for this request")
    key = request.headers.get(_SESSION_HEADER)
    if key is None:
        key = request.scope.setdefault(_ONCE, f"{ONCE}{uuid.uuid4()}")
    return request.scope[_PRINCIPAL], key


def _refused(exc: Refused) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="toolkit-vault"'}
    if exc.status == 401:
        headers["WWW-Authenticate"] += ', error="invalid_token"'
    elif exc.status == 429:
        headers = {"Retry-After": "1"}
    elif exc.status == 403:
        headers["WWW-Authenticate"] += ', error="insufficient_scope"'
    body = error_body(exc.code, exc.message, exc.req_id) | {"details": exc.details}
    return JSONResponse(body, status_code=exc.status, headers=headers)
