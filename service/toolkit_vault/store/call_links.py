"""The call chains' link format, shared by their writer (`call_chains`) and their verifier
(`audit.call_verify`), as `chain` is the main chain's.

A process's call records form a chain of their own, under the same audit key as the main
chain but never mistakable for its links: a record's payload names its chain (a main event's
has no `chain` field), its first link follows a start derived from the chain's id (not the
main chain's zero start), and a chain's head MAC has a domain of its own. So a record cannot
be moved into another call chain or into the main chain, nor a main event into a call chain,
without its MAC failing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from collections.abc import Mapping
from typing import Any

from toolkit_vault.canonical import canonical_json
from toolkit_vault.store.chain import AUDIT_FIELDS, Signer

__all__ = ["call_head_link", "chain_start", "record_links", "record_payload"]

_START_DOMAIN = b"toolkit-vault/v1/call-chain\x00"
_HEAD_DOMAIN = hashlib.sha256(b"toolkit-vault/v1/call-chain-head").digest()  # 32 bytes


def chain_start(chain: str) -> bytes:
    """The link a chain's first record follows: 32 bytes, its own for each chain."""
    return hashlib.sha256(_START_DOMAIN + chain.encode()).digest()


def record_payload(chain: str, fields: Mapping[str, Any]) -> bytes:
    """The bytes one record's link signs: the record, naming its chain, as RFC 8785 JSON
    (`details` read as stored when given as text, as `chain.audit_payload` does)."""
    details = fields["details"]
    if isinstance(details, str):
        details = json.loads(details)
    record = {name: fields[name] for name in AUDIT_FIELDS}
    return canonical_json({**record, "chain": chain, "details": details})


def record_links(sign: Signer, chain: str, previous: bytes, record: Mapping[Any, Any]) -> bool:
    """Whether `record` is the link that follows `previous` in `chain` (never raises)."""
    try:
        payload = record_payload(chain, record)
        stored = bytes(record["mac"])
    except (ValueError, TypeError, KeyError):
        return False  # details no longer JSON, a float out of range, text for bytes: edited
    return hmac.compare_digest(sign(previous, payload), stored)


def call_head_link(sign: Signer, chain: str, seq: int, mac: bytes) -> bytes:
    """A chain's head MAC over (chain, seq, last link); the zero byte after the domain is
    where a record's payload has `{`."""
    name = chain.encode()
    named = struct.pack(">H", len(name)) + name
    return sign(_HEAD_DOMAIN, b"\x00" + named + struct.pack(">Q", seq) + mac)
