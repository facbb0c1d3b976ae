"""The chain's word inside a write: what the verified audit chain says of one (scope,
toolkit) at the very end the write transaction extends, for the writes whose right to
commit depends on it: an intake link's "still waiting and not purged", a refresh's "still
current" (`ConfigVersions.append_version`'s `waiting` and `after`).

Why not the rows: a version's `status` column and its `current_configs` pointer row are the
database's word, and a database writer can put back an authentic copy of either (a pending
intake row a purge shredded, a pointer row a purge deleted) in the moment between a
caller's read and its write; the write would then make the toolkit configured again after
the purge. Why not the ledger alone: it holds the chain as this process last followed it,
and another process may have appended since (that very purge).

So the ledger's state of that one key is copied, and the events after the last one it
holds are read in the write's own transaction (under the chain's lock: nothing else can
append), each verified as the link after the one before, up to the chain end the write
extends. A missing, edited or forged event, or a chain that ends elsewhere, raises
`StateUnknown`, and nothing is stored. The ledger itself is not moved: the transaction may
still roll back, and events a group wrote earlier in it are not committed yet.
"""

from __future__ import annotations

import hmac

from sqlalchemy import Connection

from toolkit_vault.store.chain import Signer, links
from toolkit_vault.store.ledger import ChainState, Ledger, StateUnknown
from toolkit_vault.store.statements import _EVENTS_AFTER

__all__ = ["chain_word"]

_FOLLOWED = ("seq", "ts", "actor", "action", "session_id", "toolkit_name", "version", "details")
_BROKEN = (
    "the audit chain does not verify up to the end this write extends: nothing stored "
    "(run `toolkit-vault audit verify`)"
)


def chain_word(
    conn: Connection,
    ledger: Ledger,
    sign: Signer,
    placeholder: str,
    end: tuple[int, bytes],
    scope: str,
    toolkit: str,
) -> ChainState:
    """(In a write transaction, under the chain's lock.) The chain's state of (`scope`,
    `toolkit`) at `end` (the verified (seq, link) the write extends): only that key's
    entries are meaningful. Raises StateUnknown (see the module)."""
    with ledger.lock:
        state = ledger.require()
        seq, mac = ledger.applied_at()
        word = ChainState()
        for mine, theirs in ((word.latest, state.latest), (word.pointers, state.pointers)):
            if toolkit in theirs.get(scope, {}):
                mine[scope] = {toolkit: theirs[scope][toolkit]}
        if toolkit in state.purged.get(scope, {}):
            word.purged[scope] = {toolkit: state.purged[scope][toolkit]}
        if scope in state.removed.get(toolkit, {}):
            word.removed[toolkit] = {scope: state.removed[toolkit][scope]}
    if seq > end[0]:
        raise StateUnknown(_BROKEN)  # the ledger holds events the chain no longer does
    sql = f"{_EVENTS_AFTER} ORDER BY seq".replace("?", placeholder)
    for row in conn.exec_driver_sql(sql, (seq,)).all():
        event = {**dict(zip(_FOLLOWED, row[1:9], strict=True)), "mac": row[9]}
        if event["seq"] != seq + 1 or not links(sign, mac, event):
            raise StateUnknown(_BROKEN)
        word.apply(event)
        seq, mac = int(event["seq"]), bytes(event["mac"])
    if seq != end[0] or not hmac.compare_digest(mac, end[1]):
        raise StateUnknown(_BROKEN)
    return word
