"""Checking a batch of the main chain's links, fast: in this process, or in a worker
child (`python -m toolkit_vault.audit.links_check`, fed by `walk` on its stdin).

Most of a link's cost is making the canonical bytes: `details` is stored as JSON text,
and `canonical_json` first asks, value by value, whether the C encoder writes it as RFC
8785 does. The fast form skips that question: the event, its details parsed, written by
the C encoder with sorted keys and no spaces. It is believed only when the link matches,
which makes it sound: a match means these bytes are the ones the vault signed (a forged
match is a forged HMAC), and the encoder is faithful (two different JSON values never
encode alike), so the row holds the very event that was signed. When it does not match
(a float like 1.0, a non-ASCII key: where the two encoders differ), the event's bytes are
made the defining way (`chain.audit_payload`), and only then is a link called broken.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import struct
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

from toolkit_vault.canonical import parse_json, sorted_encoder
from toolkit_vault.store.chain import links

__all__ = ["ANSWER", "as_event", "first_bad", "serve"]

ANSWER = struct.Struct(">q")  # a worker's answer to a batch: its first bad index, or -1


_ENCODE = sorted_encoder()  # made once: parsed details hold no cycle to look for


def as_event(row: Sequence[Any]) -> dict[str, Any]:
    """A row (seq, ts, actor, action, session_id, toolkit_name, version, details, mac) as
    the mapping `chain.links` reads."""
    seq, ts, actor, action, session_id, toolkit_name, version, details, mac = row
    return {
        "seq": seq,
        "ts": ts,
        "actor": actor,
        "action": action,
        "session_id": session_id,
        "toolkit_name": toolkit_name,
        "version": version,
        "details": details,
        "mac": mac,
    }


def _fast_payload(row: Sequence[Any]) -> bytes | None:
    """The event as the C encoder writes it (module docstring), or None when it cannot."""
    try:
        seq, ts, actor, action, session_id, toolkit_name, version, text = row[:8]
        fields = {
            "action": action,
            "actor": actor,
            "details": parse_json(text),
            "seq": seq,
            "session_id": session_id,
            "toolkit_name": toolkit_name,
            "ts": ts,
            "version": version,
        }
        return _ENCODE(fields).encode()
    except (ValueError, TypeError):  # (UnicodeEncodeError is a ValueError)
        return None


def first_bad(key: bytes, previous: bytes, rows: Sequence[Sequence[Any]]) -> int | None:
    """The index of the first row whose link does not follow the stored link before it
    (`previous` for the first); None when every link holds."""
    sign = partial(_sign, key)  # the defining way, for a link the fast form does not match
    keyed = hmac.new(key, digestmod=hashlib.sha256)  # keyed once: each link from a copy
    compare = hmac.compare_digest
    for index, row in enumerate(rows):
        stored = row[8]
        if not isinstance(stored, bytes | bytearray | memoryview):
            return index
        mac = stored if type(stored) is bytes else bytes(stored)
        payload = _fast_payload(row)
        fast = False
        if payload is not None:
            link = keyed.copy()
            link.update(previous)
            link.update(payload)
            fast = compare(link.digest(), mac)
        if not fast and not links(sign, previous, as_event(row)):
            return index
        previous = mac
    return None


def _sign(key: bytes, previous: bytes, payload: bytes) -> bytes:
    return hmac.digest(key, previous + payload, "sha256")


def serve() -> None:
    """A worker: the key, then (previous link, rows) until its stdin ends; each answered
    on stdout with `first_bad`'s index as `ANSWER` (-1: None), a fixed size, so its parent
    can ask whether one is waiting without reading it. Only its parent writes to it (a
    pipe)."""
    given = sys.stdin.buffer
    key = pickle.load(given)  # noqa: S301 (its parent, over a pipe only it holds)
    while True:
        try:
            previous, rows = pickle.load(given)  # noqa: S301 (its parent's pipe)
        except EOFError:
            return
        bad = first_bad(key, previous, rows)
        data = ANSWER.pack(-1 if bad is None else bad)
        while data:
            data = data[os.write(1, data) :]


if __name__ == "__main__":
    serve()
