"""The audit chain's link format, shared by its writer (`storage.Store`) and its verifier
(`audit.verify_audit_chain`), so both sign and check exactly the same bytes.

A link is HMAC(audit key, previous link || the event as RFC 8785 JSON); the head row holds
HMAC(audit key, head domain || seq || last link), without which deleting the last events
would leave a shorter chain that still verifies.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from toolkit_vault.canonical import canonical_json
from toolkit_vault.errors import StoreError

__all__ = [
    "AUDIT_FIELDS",
    "CHAIN_START",
    "Signer",
    "audit_payload",
    "head_link",
    "links",
    "verified_end",
]

Signer = Callable[[bytes, bytes], bytes]
CHAIN_START = bytes(32)  # every link is 32 bytes, so HMAC(previous || event) is unambiguous
AUDIT_FIELDS = ("seq", "ts", "actor", "action", "session_id", "toolkit_name", "version")
_HEAD_DOMAIN = hashlib.sha256(b"toolkit-vault/v1/audit-head").digest()  # 32 bytes, like a link


def audit_payload(fields: Mapping[str, Any]) -> bytes:
    """The bytes one chain link signs: the event as canonical JSON (RFC 8785).

    `details` is read as stored (JSON text) when given as text, so the writer signs exactly
    what a verifier reads back; `Store.audit` and `audit.verify_audit_chain` both call this.
    """
    details = fields["details"]
    if isinstance(details, str):
        details = json.loads(details)
    event = {name: fields[name] for name in AUDIT_FIELDS}
    return canonical_json({**event, "details": details})


def links(sign: Signer, previous: bytes, event: Mapping[Any, Any]) -> bool:
    """Whether `event` is the link that follows `previous` (never raises on odd data)."""
    try:
        payload = audit_payload(event)
        stored = bytes(event["mac"])
    except (ValueError, TypeError, KeyError):
        return False  # details no longer JSON, a float out of range, text for bytes: edited
    return hmac.compare_digest(sign(previous, payload), stored)


def head_link(sign: Signer, seq: int, mac: bytes) -> bytes:
    """The head's MAC over (seq, last link). Its input is the 32-byte head domain, then a
    zero byte where every link's payload has `{`: never equal to a link's input."""
    return sign(_HEAD_DOMAIN, b"\x00" + struct.pack(">Q", seq) + mac)


def verified_end(chain_end: Sequence[Any], sign: Signer) -> tuple[int, bytes]:
    """(last seq, last link) of a chain whose authenticated head matches its last event."""
    head_seq, head_mac, head_link_mac, last_seq, last_mac = chain_end
    if head_seq is None and last_seq is None:
        return 0, CHAIN_START
    if (
        head_seq is None
        or last_seq is None
        or head_seq != last_seq
        or not hmac.compare_digest(bytes(head_mac), bytes(last_mac))
        or not hmac.compare_digest(head_link(sign, head_seq, bytes(head_mac)), bytes(head_link_mac))
    ):
        raise StoreError(
            "the audit chain head does not match its last event; writes are refused "
            "until that is resolved (run `toolkit-vault audit verify`)"
        )
    return int(head_seq), bytes(head_mac)
