"""The audit trail as a receiver reads it: one line format, and a replay from a cursor.

A line is one audit event: the fields its chain link signs (`seq`, `ts`, `actor`, `action`,
`session_id`, `toolkit_name`, `version`, `details`), its link `mac` and the link before it
(`previous`), both hex, and `at`, the time in ISO 8601. `previous` lets a receiver without
any key check order and completeness: each line's `previous` is the `mac` of the line
before it, and `seq` goes up by one. Audit devices send these lines as events commit
(`devices`); `export_events` replays them after a cursor, for a receiver that fell behind,
and hands out only events whose links verify under the audit key, up to the authenticated
head. The chain never holds a secret, so neither does a line.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterator, Mapping
from contextlib import closing
from functools import partial
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.audit.history import iso_time
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.store.chain import CHAIN_START, Signer, head_link, links
from toolkit_vault.store.chain_snapshot import chain_snapshot
from toolkit_vault.store.storage import Store

__all__ = ["event_line", "event_record", "export_events", "json_line"]

BATCH_SIZE = 1000


def event_record(event: Mapping[str, Any], previous: bytes | None = None) -> dict[str, Any]:
    """An event (as stored, or as `Store` wrote it) as a receiver gets it; `previous` is
    the link before it (the event's own `previous` when not given)."""
    details = event["details"]
    if isinstance(details, str):
        details = json.loads(details)
    before = event["previous"] if previous is None else previous
    chain = {"chain": event["chain"]} if event.get("chain") is not None else {}
    return {
        **chain,  # a call record's (`store.call_chains`): its seq is its place in that chain
        "seq": event["seq"],
        "at": iso_time(event["ts"]),
        "ts": event["ts"],
        "action": str(event["action"]),
        "actor": event["actor"],
        "session_id": event["session_id"],
        "toolkit_name": event["toolkit_name"],
        "version": event["version"],
        "details": details,
        "mac": bytes(event["mac"]).hex(),
        "previous": bytes(before).hex(),
    }


def event_line(event: Mapping[str, Any], previous: bytes | None = None) -> bytes:
    """`event_record` as one JSON line (`json_line`)."""
    return json_line(event_record(event, previous))


def json_line(record: Mapping[str, Any]) -> bytes:
    """A record as one line of JSON (ASCII: non-ASCII escaped), ending in a newline."""
    return json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"


def export_events(
    store: Store, audit_key: SecretBytes, after: int, limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """The events after `after` (a receiver's cursor: the last seq it holds), in order, as
    `event_record`s, at most `limit`; read in one snapshot, streamed.

    Each one is handed out only once its link verifies from the event at the cursor, and
    the last one only if it is the chain's authenticated head (unless `limit` stopped
    early): a gap, an edit or a cut tail raises `VaultError` at that event, after the
    events before it."""
    if after < 0:
        raise VaultError("--after takes a sequence number, 0 or more")
    sign: Signer = partial(crypto.chain_hash, audit_key)
    with chain_snapshot(store) as snapshot:
        head = snapshot.head()
        if head is None or not hmac.compare_digest(
            head_link(sign, head.seq, head.mac), head.head_mac
        ):
            if head is None and after == 0:
                return
            raise VaultError("the audit chain head is missing or forged: run `audit verify`")
        if after > head.seq:
            raise VaultError(
                f"the audit chain ends at event {head.seq}, before the cursor {after}: "
                "this is not the chain the receiver followed (run `toolkit-vault audit verify`)"
            )
        previous = CHAIN_START
        if after > 0:
            anchor = snapshot.link_of(after)
            if anchor is None:
                raise VaultError(f"event {after} is missing: run `toolkit-vault audit verify`")
            previous = anchor
        last, count = after, 0
        with closing(snapshot.events(after, batch_size=BATCH_SIZE)) as events:
            for event in events:
                if limit is not None and count >= limit:
                    return
                seq = event["seq"]
                if seq != last + 1 or seq > head.seq or not links(sign, previous, event):
                    raise VaultError(
                        f"audit event {last + 1} does not verify (edited, inserted or "
                        "deleted): run `toolkit-vault audit verify`"
                    )
                yield event_record(event, previous)
                last, previous, count = seq, bytes(event["mac"]), count + 1
        if last != head.seq or not hmac.compare_digest(previous, head.mac):
            raise VaultError(
                f"the audit chain ends at event {last}, its head names {head.seq}: "
                "run `toolkit-vault audit verify`"
            )
