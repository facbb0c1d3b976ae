"""One audit event as the trail hands it to a reader: as stored, plus names and a sentence.

Apart from the trail's reads (`trail`) and its wording (`wording`), which both speak of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit_vault.audit.history import iso_time

__all__ = ["TrailEvent"]


@dataclass(frozen=True)
class TrailEvent:
    """One audit event for a reader: as stored, plus names and a sentence."""

    seq: int
    ts: float
    action: str
    actor: str  # as stored: a principal id, or `operator`, `init`, `intake:<link id>`
    actor_name: str
    session_id: str | None
    principal_id: str | None  # whom the event is about: the session's or scope's owner,
    principal_name: str | None  # or the principal a token event names
    toolkit_name: str | None
    version: int | None
    details: dict[str, Any]
    mac: bytes
    summary: str
    # A call record's (`store.call_chains`): its chain and its place there; its `seq` is
    # then where it was written among all call records, the order their listings follow.
    chain: str | None = None
    chain_seq: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The documented, stable shape (docs/auditors.md); keys are only ever added."""
        return {
            "seq": self.seq,
            "at": iso_time(self.ts),
            "ts": self.ts,
            "action": self.action,
            "actor": self.actor,
            "actor_name": self.actor_name,
            "session_id": self.session_id,
            "principal_id": self.principal_id,
            "principal_name": self.principal_name,
            "toolkit_name": self.toolkit_name,
            "version": self.version,
            "details": self.details,
            "summary": self.summary,
            "mac": self.mac.hex(),
        } | ({} if self.chain is None else {"chain": self.chain, "chain_seq": self.chain_seq})
