"""An operator ending a client's MCP session: audited, and kept in the verified chain
(`ChainState.ended_mcp`) like a revocation, so the session's next message is refused on
whichever replica holds it, not only on the one whose console was used (an MCP session
lives in one process; a console's pages may be served by another).

May import: `store`.
"""

from __future__ import annotations

from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = ["end_mcp_session", "mcp_session_ended", "mcp_session_ended_at_once"]


def end_mcp_session(
    store: Store,
    actor: str,
    key: str,
    *,
    principal_id: str | None = None,
    session_id: str | None = None,
    client: str = "",
) -> None:
    """Record that `actor` ended the MCP session `key` (its principal, A2E session and
    client as this replica knows them; nothing when another holds it)."""
    details: dict[str, object] = {"mcp_session": key}
    if principal_id is not None:
        details["principal_id"] = principal_id
    if client:
        details["client"] = client[:200]
    store.record_attempt(
        AuditDraft(
            actor, AuditAction.MCP_SESSION_ENDED, session_id=session_id or None, details=details
        )
    )


def mcp_session_ended(store: Store, key: str) -> bool:
    """Whether an operator ended the MCP session `key` (reads the chain if it moved)."""
    return key in store.chain_state().ended_mcp


def mcp_session_ended_at_once(store: Store, key: str) -> bool | None:
    """`mcp_session_ended` if the chain can be answered without a wait (on an event loop);
    None when it cannot."""
    state = store.chain_state_at_once()
    return None if state is None else key in state.ended_mcp
