"""What a session with an upstream MCP server can fail with, as the tool engine needs to
tell it apart: a remote server's 401 (the OAuth connection is to be marked for reconnect),
a refusal of ours (a redirect to another origin, a response over its bound), a server that
did not start or went away, and a call's deadline or cancellation.

Messages name the server's label and the kind of failure only: never an argument, a header,
a line of the server's output or the text of its error, any of which may hold a credential.
"""

from __future__ import annotations

from toolkit_vault.errors import VaultError

__all__ = [
    "CallCancelled",
    "CallTimedOut",
    "UpstreamError",
    "UpstreamFailed",
    "UpstreamRefused",
    "UpstreamUnauthorized",
]


class UpstreamError(VaultError):
    """Base of every failure of a session with an upstream MCP server. `reason` is one word
    for an audit line or an A2E error's details."""

    reason = "upstream"


class UpstreamFailed(UpstreamError):
    """The server did not start, exited, broke the protocol or answered with an error."""

    reason = "failed"


class UpstreamUnauthorized(UpstreamError):
    """A remote server answered 401: its token or headers are not (or no longer) accepted,
    so an OAuth connection behind them needs a reconnect, as a failed refresh does."""

    reason = "unauthorized"


class UpstreamRefused(UpstreamError):
    """The vault refused what the server sent: a redirect to another origin, or a response
    larger than its bound."""

    reason = "refused"


class CallTimedOut(UpstreamError):
    """A call's deadline passed; the server was sent `notifications/cancelled`."""

    reason = "timeout"


class CallCancelled(UpstreamError):
    """The caller cancelled a call; the server was sent `notifications/cancelled`."""

    reason = "cancelled"
