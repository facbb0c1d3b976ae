"""MCP transports: the vault as an MCP server for clients, beside A2E (`transports.a2e`,
`transports.stdio`). An MCP session (initialize, tools/list, tools/call) runs over stdio
(`over_stdio`, `toolkit-vault mcp`) or streamable HTTP (`over_http`, `/mcp` on `serve`),
passing the same guards as A2E (`http_guards`: token, role, rate) and calling the same
service API (`core`) and tool engine (`tools`); the protocol is MCP's (the official SDK's
low-level server, `server`), the calls are the vault's. `sessions` ties each MCP session
to an A2E session of its principal; `names` maps tools to names every client takes.

May import: `core`, `tools` and everything below them, and the transports' shared pieces
(`http_guards`, `http_access`, `refusals`, `workers`); never `transports.a2e` (the two
protocols are independent), `http_api` (which mounts them), `web` (which shows their
sessions through a protocol of its own), `bootstrap` or `cli`.
"""

__all__: list[str] = []
