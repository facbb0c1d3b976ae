"""Tool calls: the engine that runs one call of a configured toolkit's tool, for A2E and
MCP alike. It owns what a call is, wherever it came from: its arguments checked against
the tool's schema, its deadline, concurrency and cancellation, the secrets it withholds
from what it answers, and the audit record it leaves. A toolkit's own code runs through
its plugin (`toolkits`), an imported MCP server's tools through `mcp_client`, and an
untrusted process through `sandbox`; the credentials a call needs are read here, through
the store and keys, and handed on as arguments.

`calls` is the engine (a call's arguments, deadline, cancellation and result checks),
`scope_secrets` the secrets each live instance's results are searched for, `withhold`
the search, `refusals` the one-word reasons, `call_audit` the record a call leaves and
the HMAC of its arguments. `core` (the use cases) and the transports call it; it never
calls them.

May import: `toolkits`, `mcp_client` and everything below them (`oauth`, `audit`,
`access`, `keys`, `store`, `schema`, `crypto`, `sandbox`, the shared leaves); never
`core`, `settings`, `bootstrap`, the transports or `cli`.
"""
