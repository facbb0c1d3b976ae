"""Chain appends: the next audit link of each event, written in the caller's transaction.

A write extends only a chain whose stored head matches its last event, that is at least
what the witness saw, and that this process has not found broken: a write never launders
a rolled-back or forged database.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from toolkit_vault.errors import StoreError
from toolkit_vault.store.chain import audit_payload, head_link, verified_end
from toolkit_vault.store.following import Following, _missing
from toolkit_vault.store.ledger import behind
from toolkit_vault.store.records import AuditDraft, bounded_details
from toolkit_vault.store.statements import _CHAIN_END, _INSERT_EVENT, _INSERT_HEAD, _MOVE_HEAD
from toolkit_vault.store.transactions import _wrote


class ChainLinks(Following):
    """The `Store`'s audit appends (`audit`, `audit_many`)."""

    def audit(self, conn: Connection, draft: AuditDraft) -> None:
        """Append the next chain link and move the authenticated head, in the caller's
        transaction."""
        event, head = self._link(draft, _CHAIN_END(conn, {}).fetchone())
        _write_link(conn, event, head)

    def audit_many(self, conn: Connection, drafts: Sequence[AuditDraft]) -> None:
        """Append many links at once, for bulk loads: one read of the chain end, one insert
        of all the events, one move of the head."""
        chain_end: Sequence[Any] = _CHAIN_END(conn, {}).fetchone()
        events: list[dict[str, Any]] = []
        head: dict[str, Any] = {}
        for draft in drafts:
            event, head = self._link(draft, chain_end)
            events.append(event)
            seq, mac = event["seq"], event["mac"]
            chain_end = (seq, mac, head["new_head"], seq, mac)
        if events:
            _INSERT_EVENT(conn, events)
            (_INSERT_HEAD if events[0]["seq"] == 1 else _MOVE_HEAD)(conn, head)
            _wrote(conn, *events)

    def _link(
        self, draft: AuditDraft, chain_end: Sequence[Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The next event row and head parameters, after `chain_end` (the columns of
        `_CHAIN_END`, read in this transaction). A head that does not match the last event
        (tail deleted, rows forged beyond it) stops every write rather than extending a
        chain it cannot vouch for."""
        if self._sign is None:
            raise StoreError("the audit key is not loaded")
        last_seq, previous = verified_end(chain_end, self._sign)
        self._require_current(last_seq)
        seq = last_seq + 1
        event: dict[str, Any] = {
            "seq": seq,
            "ts": time.time(),
            "actor": draft.actor,
            "action": str(draft.action),  # the stored text, not the enum member
            "session_id": draft.session_id,
            "toolkit_name": draft.toolkit_name,
            "version": draft.version,
            "details": bounded_details(draft.details),  # bounded: callers size them
        }
        mac = self._sign(previous, audit_payload(event))
        head = {"new_seq": seq, "new_mac": mac, "new_head": head_link(self._sign, seq, mac)}
        return {**event, "mac": mac, "previous": previous}, head

    def _require_current(self, last_seq: int) -> None:
        """Writes extend only a chain that is at least what the witness saw, and that this
        process has not found broken (a write never launders a rolled-back database)."""
        if self._ledger is not None and self._ledger.failure is not None:
            raise StoreError(self._ledger.failure)
        witness = self.witnessed()
        if witness is not None and last_seq < witness[0]:
            raise StoreError(behind(witness[0], last_seq))
        excused = self.makes_witness or self._accepting_restore
        if witness is None and self.witness is not None and last_seq > 0 and not excused:
            raise StoreError(_missing(self.witness))


def _write_link(conn: Connection, event: dict[str, Any], head: dict[str, Any]) -> None:
    """Append a chain link made by `Store._link` and move the head to it (the first link
    creates the head row)."""
    _INSERT_EVENT(conn, event)
    (_INSERT_HEAD if head["new_seq"] == 1 else _MOVE_HEAD)(conn, head)
    _wrote(conn, event)
