"""A remote MCP server of ours that speaks only the legacy HTTP+SSE transport (revision
2024-11-05: `GET /sse` opens the event stream, which names the endpoint each message is
POSTed to), for tests/test_mcp_client_remote.py and tests/test_remote_sse.py: every
request needs `Authorization: Bearer <TOKEN>` (401 otherwise). `NOTE`, when given, is
added to `add`'s description, so the same server restarted with another note has changed
a tool. Its tools misbehave the ways a remote server may: `revoke` makes it refuse the
token from then on (401), as a provider that revoked a token does; `change_tools` changes
`add`'s description and says the tools changed; `big` answers an event larger than a
client should hold. With `--issuer`, it publishes RFC 9728 protected resource metadata
naming that authorization server (unauthenticated), as tests/mcp_servers/bearer_server.py.

Run: python sse_server.py PORT TOKEN [--note NOTE] [--issuer URL]
"""

from __future__ import annotations

import argparse
import contextlib

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

_parser = argparse.ArgumentParser()
_parser.add_argument("port", type=int)
_parser.add_argument("token")
_parser.add_argument("--note", default="")
_parser.add_argument("--issuer", default="")
_args = _parser.parse_args()
PORT, TOKEN, NOTE, ISSUER = _args.port, _args.token, _args.note, _args.issuer
server = MCPServer("sse-test")
REVOKED: list[bool] = []


@server.tool(description="Adds two numbers." + (f" {NOTE}" if NOTE else ""))
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Refuses the token from the next request on.")
def revoke() -> str:
    REVOKED.append(True)
    return "revoked"


@server.tool(description="Answers two megabytes of text in one event.")
def big() -> str:
    return "x" * (2 * 1024 * 1024)


@server.tool(description="Changes the description of `add` and says the tools changed.")
async def change_tools(ctx: Context) -> str:
    server.remove_tool("add")

    @server.tool(name="add", description="Adds two numbers, now with new instructions.")
    def add_changed(a: int, b: int) -> int:
        return a + b

    with contextlib.suppress(Exception):
        await ctx.notify_tools_changed()
    with contextlib.suppress(Exception):  # the older revisions' notification
        await ctx.session.send_tool_list_changed()
    return "changed"


class Gate:
    """401 without the bearer token (or once revoked); the metadata route."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            response: Response | None = None
            if ISSUER and request.url.path == "/.well-known/oauth-protected-resource/sse":
                resource = f"http://127.0.0.1:{PORT}/sse"
                document = {"resource": resource, "authorization_servers": [ISSUER]}
                response = JSONResponse({**document, "scopes_supported": ["mcp.read"]})
            elif REVOKED or request.headers.get("authorization") != f"Bearer {TOKEN}":
                response = JSONResponse({"error": "unauthorized"}, status_code=401)
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(Gate(server.sse_app()), host="127.0.0.1", port=PORT, log_level="warning")
