"""What `audit verify` and `check` last verified: a mark in the vault home, so the next
run verifies only what came after it (`--full` verifies everything again).

A mark says: a run holding the audit key verified the chain's events 1..`seq`, whose last
link is `link`, and (for `audit verify`) each call chain up to a record, and the state the
chain makes at `seq`; (for `check`) every config version up to an id. It lives in the
home, beside the witness and the checkpoint record (`verified-audit`, `verified-check`),
which a database writer cannot write, and it is MACed under the audit key, which the
database holds only wrapped: `mark_link` over the checkpoint's domain with a byte of its
own (2, then the kind), so it is never a link's, the head's or a checkpoint's input. A
mark from another vault, edited, cut short, or one kind's put in the other's place does
not verify, and the run is then full (and says why).

Three lines: the header as JSON, the state (`checkpoints.encode_state`; empty for
`check`), the MAC in hex over the kind, the header's SHA-256 (which names the state's).
Whether the chain still agrees with a mark (its link at `seq`, nothing deleted below it)
is asked in the run's own snapshot (`audit.verify`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from toolkit_vault.files import PrivateFileError, open_private
from toolkit_vault.store.chain import Signer
from toolkit_vault.store.checkpoints import decode_state, encode_state
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.models import ConfigVersion
from toolkit_vault.store.storage import Store

__all__ = [
    "AUDIT",
    "CHECK",
    "Mark",
    "MarkRefused",
    "mark_link",
    "mark_path",
    "read_mark",
    "version_link",
    "versions_to",
    "write_mark",
]

log = logging.getLogger(__name__)
AUDIT, CHECK = "audit", "check"
_KINDS = {AUDIT: b"\x01", CHECK: b"\x02"}
_DOMAIN = hashlib.sha256(b"toolkit-vault/v1/audit-checkpoint").digest()  # the checkpoints'
MAX_BYTES = 1 << 31  # a mark's state grows with live entities, never past this


class MarkRefused(Exception):
    """The mark is not believed; the message says why (never a value of it)."""


@dataclass(frozen=True)
class Mark:
    kind: str
    seq: int  # the chain's events 1..seq were verified
    link: bytes  # the stored link of event `seq` then (CHAIN_START's zeros for seq 0)
    at: float  # when
    body: dict[str, Any] = field(default_factory=dict)  # the kind's own: call chains, versions
    state: ChainState | None = None  # the state the chain made at `seq` (`audit`)


def mark_link(sign: Signer, kind: str, header: bytes) -> bytes:
    """The mark's MAC: the checkpoint's domain, then 2, the kind and the header's digest
    (a checkpoint's input has 1 there, the head's 0, a link's `{`)."""
    return sign(_DOMAIN, b"\x02" + _KINDS[kind] + struct.pack(">Q", len(header)) + _digest(header))


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def mark_path(store: Store, kind: str) -> Path | None:
    """Where `store`'s mark of `kind` lives: in its home, beside the checkpoint record
    (None: a store without a home, as a backup's scratch database, never has one)."""
    record = store.checkpoints.record
    return None if record is None else record.parent / f"verified-{kind}"


def read_mark(path: Path | None, kind: str, sign: Signer) -> Mark | None:
    """The mark at `path`, verified under the audit key; None when there is none; raises
    MarkRefused when there is one that is not believed."""
    if path is None:
        return None
    try:
        fd = open_private(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except (PrivateFileError, OSError) as exc:
        raise MarkRefused(f"its file is not read ({type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_BYTES + 1)
    lines = data.split(b"\n")
    if len(lines) != 4 or lines[3] != b"":
        raise MarkRefused("its file is cut short or damaged")
    header, blob, mac = lines[0], lines[1], lines[2]
    try:
        claimed = bytes.fromhex(mac.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise MarkRefused("its MAC is unreadable") from None
    if not hmac.compare_digest(mark_link(sign, kind, header), claimed):
        raise MarkRefused("it fails its MAC: not this vault's, edited, or another kind's")
    try:
        document = json.loads(header)
        if document["kind"] != kind:
            raise ValueError
        seq, link = int(document["seq"]), bytes.fromhex(document["link"])
        body = document["body"]
        if not isinstance(body, dict) or len(link) != 32 or seq < 0:
            raise ValueError
        state = None
        if document["state"] is not None:
            if _digest(blob).hex() != document["state"]:
                raise MarkRefused("its state is not the one its header names")
            state = decode_state(blob)
    except (KeyError, TypeError, ValueError):
        raise MarkRefused("its header or state is unreadable") from None
    return Mark(kind, seq, link, float(document["at"]), body, state)


def write_mark(path: Path | None, mark: Mark, sign: Signer) -> bool:
    """Replace the mark at `path` (written beside it and moved into place, 0600); False
    when there is no home or the state has a field a mark cannot hold."""
    if path is None:
        return False
    blob = b""
    if mark.state is not None:
        encoded = encode_state(mark.state)
        if encoded is None:
            return False
        blob = encoded
    document = {
        "kind": mark.kind,
        "seq": mark.seq,
        "link": mark.link.hex(),
        "at": mark.at or time.time(),
        "body": mark.body,
        "state": None if mark.state is None else _digest(blob).hex(),
    }
    header = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    mac = mark_link(sign, mark.kind, header).hex().encode()
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:  # a home this user may read but not write: the next run is full
        log.warning("the last-verified mark %s is not written (%s)", path, type(exc).__name__)
        return False
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(header + b"\n" + blob + b"\n" + mac + b"\n")
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return True


def version_link(store: Store, row_id: int) -> bytes | None:
    """The stored MAC of the config version with row id `row_id` (None: no such row)."""
    with store.read() as conn:
        found = conn.execute(select(ConfigVersion.mac).where(ConfigVersion.id == row_id)).scalar()
    return None if found is None else bytes(found)


def versions_to(store: Store, row_id: int) -> int:
    """How many config versions have a row id up to `row_id`."""
    with store.read() as conn:
        counted = select(func.count()).where(ConfigVersion.id.between(1, row_id))
        return int(conn.execute(counted).scalar_one())
