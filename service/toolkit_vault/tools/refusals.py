"""Why the vault refused a call: one word (`details.reason`), so agents, MCP clients and
the audit trail name it alike. A refused call reaches no tool, or (`timeout`, `cancelled`,
`withheld`) its result reaches no one."""

from __future__ import annotations

from typing import Any, Literal

from toolkit_vault.errors import VaultError

__all__ = ["CallOutcome", "CallRefused", "RefusalReason", "outcome_of"]

RefusalReason = Literal[
    "unknown_toolkit",  # no such toolkit, or not one this principal may see
    "not_configured",  # no current config for the session or its principal
    "unknown_tool",  # the toolkit has no such tool, or its status named it unavailable
    "not_allowed",  # an operator narrowed this principal to other toolkits or tools
    "not_accepted",  # an imported server changed (or added) this tool since it was pinned
    "invalid_arguments",  # the arguments do not match the tool's input schema
    "too_large",  # arguments or result over their limits
    "busy",  # the principal's call rate, or the instance's concurrency, is spent
    "timeout",  # the deadline passed before the tool answered
    "cancelled",  # cancelled by the caller, a purge, a revocation, an expiry, a reconfigure
    "withheld",  # the result carried a secret of the calling scope
    "unavailable",  # the toolkit cannot answer calls (no `call_tool`, or it failed to start)
]

# the audit's outcomes (`tool_called`), of which `refused` gathers the reasons before a tool
CallOutcome = Literal["ok", "tool_error", "refused", "timeout", "cancelled", "withheld"]


class CallRefused(VaultError):
    """A call the vault refused; `reason` is its one word, the message is safe to show (it
    never echoes an argument or a result)."""

    def __init__(
        self, reason: RefusalReason, message: str, *, details: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message, details=[{"reason": reason}, *(details or [])])
        self.reason: RefusalReason = reason


_OWN_OUTCOMES: dict[str, CallOutcome] = {
    "timeout": "timeout",
    "cancelled": "cancelled",
    "withheld": "withheld",
}


def outcome_of(reason: RefusalReason) -> CallOutcome:
    """The audit outcome of a refusal: its own for a call that reached the tool, else
    `refused`."""
    return _OWN_OUTCOMES.get(reason, "refused")
