"""The ledger alone: what a process believes of the chain, read by read (no database)."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from toolkit_vault.store.chain import CHAIN_START, audit_payload
from toolkit_vault.store.ledger import ChainState, Ledger, StateUnknown

KEY = b"k" * 32


def sign(previous: bytes, payload: bytes) -> bytes:
    return hmac.new(KEY, previous + payload, hashlib.sha256).digest()


def chain(*events: tuple[str, str | None, str | None, int | None, dict[str, Any]]) -> list[dict]:
    made, previous = [], CHAIN_START
    for seq, (action, scope, toolkit, version, details) in enumerate(events, 1):
        event = {
            "seq": seq,
            "ts": float(seq),
            "actor": "a",
            "action": action,
            "session_id": scope,
            "toolkit_name": toolkit,
            "version": version,
            "details": json.dumps(details),
        }
        event["mac"] = previous = sign(previous, audit_payload(event))
        made.append(event)
    return made


EVENTS = chain(
    ("configure", "s1", "tk", 1, {"status": "ok"}),
    ("configure", "s1", "tk", 2, {"status": "error"}),
    ("configure", "s1", "tk", 3, {"status": "partial"}),
    ("token_created", None, None, None, {"principal_id": "p", "name": "n", "role": "agent"}),
    ("configure", "s2", "tk", 1, {"status": "ok"}),
    ("purge", "s1", None, None, {}),
    ("token_revoked", None, None, None, {"principal_id": "p"}),
    ("configure", "s1", "tk", 4, {"status": "intake"}),
)


def followed(events: list[dict], witness: tuple[int, bytes] | None = None) -> Ledger:
    ledger = Ledger(sign)
    ledger.take(witness, 0, events[-1]["seq"] if events else None, events)
    return ledger


def test_the_state_the_events_make() -> None:
    state = followed(EVENTS).require()
    assert state.pointer("s1", "tk") is None  # purged after v3 moved it
    assert state.pointer("s2", "tk") == 1
    assert state.last_version("s1", "tk") == 4
    assert state.was_purged("s1", "tk", 3) and not state.was_purged("s1", "tk", 4)
    assert state.principals["p"].revoked and state.principals["p"].name == "n"


def test_reads_that_overlap_are_taken_once() -> None:
    ledger = Ledger(sign)
    ledger.take(None, 0, 5, EVENTS[:5])
    ledger.take(None, 3, 8, EVENTS[3:])  # a read that began before the first was taken
    ledger.take(None, 0, 6, EVENTS[:6])  # an older read, taken late
    assert ledger.seq == 8 and ledger.failure is None


@pytest.mark.parametrize(
    "damage",
    ["edited", "deleted in the middle", "head went back", "head beyond the events"],
)
def test_a_chain_that_does_not_hold_is_believed_no_more(damage: str) -> None:
    ledger = followed(EVENTS[:4])
    later = [dict(e) for e in EVENTS[4:]]
    head: int | None = 8
    if damage == "edited":
        later[1]["details"] = json.dumps({"status": "ok"})
    elif damage == "deleted in the middle":
        del later[1]
    elif damage == "head went back":
        later, head = [], 3
    else:
        later, head = later[:2], 8
    ledger.take(None, 4, head, later)
    with pytest.raises(StateUnknown):
        ledger.require()


def test_a_witness_ahead_or_elsewhere_is_refused() -> None:
    with pytest.raises(StateUnknown, match="behind its witness"):
        followed(EVENTS[:5], witness=(7, EVENTS[6]["mac"])).require()
    with pytest.raises(StateUnknown, match="differs from its witness"):
        followed(EVENTS, witness=(7, EVENTS[5]["mac"])).require()
    assert followed(EVENTS, witness=(7, EVENTS[6]["mac"])).require().pointer("s2", "tk") == 1


def test_a_removed_toolkit_ends_every_pointer_and_its_import() -> None:
    state = ChainState()
    for event in chain(
        ("toolkit_imported", None, "acme", None, {"digest": "d", "schema_digest": "s"}),
        ("configure", "s1", "acme", 1, {"status": "ok"}),
        ("configure", "s2", "acme", 1, {"status": "ok"}),
        ("toolkit_removed", None, "acme", None, {}),
    ):
        state.apply(event)
    assert state.pointer("s1", "acme") is None and state.pointer("s2", "acme") is None
    assert state.imported["acme"] is None


def test_events_this_process_committed_are_taken_as_signed_here() -> None:
    """Its own events need no second HMAC: the ledger takes them as written here (an edit
    of the stored row changes nothing), and refuses a stored link that is not the one made."""
    mine = {**EVENTS[4], "previous": EVENTS[3]["mac"]}
    edited = {**EVENTS[4], "details": json.dumps({"status": "error"})}  # its MAC kept
    ledger = followed(EVENTS[:4])
    ledger.committed([mine])
    ledger.take(None, 4, 8, [edited, *EVENTS[5:]])
    assert ledger.require().pointer("s2", "tk") == 1
    other = followed(EVENTS[:4])
    other.committed([mine])
    other.take(None, 4, 8, [{**EVENTS[4], "mac": bytes(32)}, *EVENTS[5:]])
    with pytest.raises(StateUnknown):
        other.require()
