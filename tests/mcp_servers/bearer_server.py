"""A remote (streamable HTTP) MCP server of ours for tests/test_mcp_client*.py: every
request needs `Authorization: Bearer <TOKEN>` (401 otherwise), `/elsewhere` redirects to
another origin (`REDIRECT_TO`), and `/big` answers a body larger than the client's bound.
Its `revoke` tool makes it refuse the token from then on (401), as a provider that revoked
a token does.

Run: python bearer_server.py PORT TOKEN REDIRECT_TO [ISSUER]: with ISSUER, it publishes
RFC 9728 protected resource metadata naming that authorization server (unauthenticated).
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

PORT, TOKEN, REDIRECT_TO = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ISSUER = sys.argv[4] if len(sys.argv) > 4 else None
server = MCPServer("bearer-test")
REVOKED: list[bool] = []


@server.tool(description="Adds two numbers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Refuses the token from the next request on.")
def revoke() -> str:
    REVOKED.append(True)
    return "revoked"


class Gate:
    """401 without the bearer token; the redirect and the oversized routes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response: Response | None = None
        if ISSUER and request.url.path == "/.well-known/oauth-protected-resource/mcp":
            resource = f"http://127.0.0.1:{PORT}/mcp"
            scopes = ["mcp.read"]
            document = {"resource": resource, "authorization_servers": [ISSUER]}
            response = JSONResponse({**document, "scopes_supported": scopes})
        elif REVOKED or request.headers.get("authorization") != f"Bearer {TOKEN}":
            response = JSONResponse({"error": "unauthorized"}, status_code=401)
        elif request.url.path == "/elsewhere":
            response = RedirectResponse(f"{REDIRECT_TO}/mcp", status_code=307)
        elif request.url.path == "/big":
            response = Response(
                b"{" + b" " * (9 * 1024 * 1024) + b"}", media_type="application/json"
            )
        if response is not None:
            await response(scope, receive, send)
        else:
            await self.app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(
        Gate(server.streamable_http_app()), host="127.0.0.1", port=PORT, log_level="warning"
    )
