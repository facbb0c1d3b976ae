"""What initializing a toolkit instance came to (`Outcome`), and the status event that
tells a session of it (`status_event`): the one shape every use case, the live-instance
table and the push routing share.

May import: protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit_vault.protocol import ConfigureStatus, ToolkitStatusEvent

__all__ = ["Outcome", "status_event"]


@dataclass(frozen=True)
class Outcome:
    status: ConfigureStatus
    message: str
    unavailable: frozenset[str] = field(default=frozenset())
    intake_url: str | None = None  # where a person connects again (an OAuth connection)
    expires_at: float | None = None  # when the credential ends, if known (`expiry`)


def status_event(
    session_id: str, toolkit_name: str, configured: bool, outcome: Outcome
) -> ToolkitStatusEvent:
    """The `toolkit/status/event` saying `outcome` of (session or scope, toolkit)."""
    return ToolkitStatusEvent(
        session_id=session_id,
        toolkit_name=toolkit_name,
        configured=configured,
        status=outcome.status,
        message=outcome.message,
        intake_url=outcome.intake_url,
    )
