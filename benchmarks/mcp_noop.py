"""A plain MCP server with one no-op tool, the official SDK's `MCPServer` over streamable
HTTP on uvicorn: the baseline of the `mcp` scenario. `python -m benchmarks.mcp_noop --port N`;
`/healthz` answers when it is up."""

from __future__ import annotations

import argparse

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import PlainTextResponse

server = MCPServer("noop")


@server.tool()
def call_api() -> str:
    """The no-op tool."""
    return "ok"


@server.custom_route("/healthz", methods=["GET"])
async def healthz(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
