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
- `results`: a call's answer as the vault takes it (what the SDK's `call_tool` checked on
  top of the wire's schema: no input asked for, structured content its output schema takes).
- `stderr`: a local server's stderr, bounded and redacted into the log.
- `descriptions`, `pinning`: tools made safe to show, and their pin against a rug pull.
- `errors`: what a session fails with, by kind.

May import: `sandbox` and the shared leaves (`addresses`, `canonical`, `errors`, `logs`,
`files`, `versions`); never `store`, `keys`, `crypto`, `access` or anything above them.

The MCP SDK (with its pydantic models, httpx and anyio) is imported only by the names that
need it: `errors`, `pinning` and `descriptions` load without it, and `UpstreamHost`,
`UpstreamHandle`, `UpstreamSession`, `StdioServer`, `RemoteServer` and `Launch` are
imported at their first use through `__getattr__`. A module that only names them in
annotations imports them under `TYPE_CHECKING`, and one that builds them imports them where
it does, so a command that lists toolkits never pays for the SDK (`tests/test_cli_startup.py`
holds it to that); `bootstrap.open_vault` imports it with the vault, off a launch's clock.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .descriptions import ToolDescription, describe_tools
from .errors import (
    CallCancelled,
    CallTimedOut,
    UpstreamError,
    UpstreamFailed,
    UpstreamRefused,
    UpstreamUnauthorized,
)
from .pinning import PinChanges, compare_pins, pin_digest, pin_tools, tool_digest

if TYPE_CHECKING:
    from .host import UpstreamHandle, UpstreamHost
    from .session import RemoteServer, StdioServer, UpstreamSession
    from .stdio import Launch

# the names that import the MCP SDK, and the module of each
_WITH_SDK = {
    "UpstreamHandle": "host",
    "UpstreamHost": "host",
    "RemoteServer": "session",
    "StdioServer": "session",
    "UpstreamSession": "session",
    "Launch": "stdio",
}

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


def __getattr__(name: str) -> Any:
    """Import an SDK-bound name at its first use (see the module), then keep it."""
    module = _WITH_SDK.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
