"""MCP transports: the vault as an MCP server for clients, beside A2E (`transports.a2e`,
`transports.stdio`). An MCP session (initialize, tools/list, tools/call) would run over
stdio or streamable HTTP, passing the same guards as A2E (`http_guards`: token, role,
rate, size) and calling the same service API (`core`) and tool engine (`tools`); the
protocol is MCP's, the calls are the vault's.

Empty until the MCP server arrives: the room exists so that it is not written inside the
A2E routes.

May import: `core`, `tools` and everything below them, and the transports' shared pieces
(`http_guards`, `http_access`, `refusals`, `workers`); never `transports.a2e` (the two
protocols are independent), `http_api` (which mounts them), `bootstrap` or `cli`.
"""
