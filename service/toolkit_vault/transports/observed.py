"""What the transports tell `/metrics` and the traces about a message: its type (`kind`)
and how it was answered (`outcome`), both from fixed sets, never from what was sent."""

from __future__ import annotations

from toolkit_vault.protocol import ErrorMessage, Message
from toolkit_vault.telemetry.metrics import INVALID

__all__ = ["kind", "outcome"]

_ERROR = '{"type":"error"'  # how `dump_message` begins an error message
_ERROR_BYTES = _ERROR.encode()


def kind(request: Message) -> str:
    """A parsed message's type (one the protocol defines); `invalid` for one that did not
    parse (`read_request` answers it with an error message)."""
    return INVALID if isinstance(request, ErrorMessage) else request.type


def outcome(line: str | bytes) -> str:
    """`error` when the answer (a line, or a response's body) is an A2E error message, else
    `ok`."""
    if isinstance(line, bytes):
        return "error" if line.startswith(_ERROR_BYTES) else "ok"
    return "error" if line.startswith(_ERROR) else "ok"
