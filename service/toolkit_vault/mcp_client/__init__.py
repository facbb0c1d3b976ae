"""The vault as an MCP client of imported servers: sessions with one upstream server over
stdio (a process launched through `sandbox`) or streamable HTTP, listing its tools and
calling them for the tool engine (`tools`).

Credentials reach it only as arguments, for one call or one session: it never reads them
itself. An import-linter `forbidden` contract keeps it from `store`, `keys`, `crypto` and
`access`, directly or through anything else, so a server the vault did not write can never
be handed more than its caller chose to pass.

- `session`: one server's session (`UpstreamSession`, `StdioServer`, `RemoteServer`).
- `host`: the synchronous face for worker threads, one loop thread a process.
- `stdio`, `remote`: the two transports (a sandbox `Launch`; HTTP held to one origin).
- `stderr`: a local server's stderr, bounded and redacted into the log.
- `descriptions`, `pinning`: tools made safe to show, and their pin against a rug pull.
- `errors`: what a session fails with, by kind.

May import: `sandbox` and the shared leaves (`addresses`, `canonical`, `errors`, `logs`,
`files`, `versions`); never `store`, `keys`, `crypto`, `access` or anything above them.
"""

from .descriptions import ToolDescription, describe_tools
from .errors import (
    CallCancelled,
    CallTimedOut,
    UpstreamError,
    UpstreamFailed,
    UpstreamRefused,
    UpstreamUnauthorized,
)
from .host import UpstreamHandle, UpstreamHost
from .pinning import PinChanges, compare_pins, pin_digest, pin_tools, tool_digest
from .session import RemoteServer, StdioServer, UpstreamSession
from .stdio import Launch

__all__ = [
    "CallCancelled",
    "CallTimedOut",
    "Launch",
    "PinChanges",
    "RemoteServer",
    "StdioServer",
    "ToolDescription",
    "UpstreamError",
    "UpstreamFailed",
    "UpstreamHandle",
    "UpstreamHost",
    "UpstreamRefused",
    "UpstreamSession",
    "UpstreamUnauthorized",
    "compare_pins",
    "describe_tools",
    "pin_digest",
    "pin_tools",
    "tool_digest",
]
