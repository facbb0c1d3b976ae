"""The audit head kept outside the database: a file in the vault home beside the key.

Someone who can write to the database can put back a whole older copy, chain and head
included, and nothing inside the database can tell. The witness remembers the newest head
this home has seen committed (its seq, link and keyed head MAC, so it cannot be forged
without the audit key either); a database whose chain ends before it, or differs at it, is
an older copy and is not believed (`ledger`). Deliberately restoring one is an operator
step (`toolkit-vault audit accept-restore`), audited like any other change.

Every process that commits an event advances the witness after the commit. The file holds
two fixed-size slots, each a whole head (`seq link head_mac`, hex); a write replaces the
older slot in place under an exclusive lock, so the witness only moves forward, readers
(under a shared lock) never see half a write, and a write torn by a crash leaves the other
slot, one head behind, which the head MAC tells apart. One small write in place, not a
temporary file renamed over the old one: a server advances it after every group commit.
It is not fsynced: after a power loss it may lag the database, which only weakens the
check; it never leads a committed database.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .errors import StoreError

__all__ = ["WITNESS_NAME", "Head", "Witness"]

WITNESS_NAME = "audit-witness"
Head = tuple[int, bytes, bytes]  # (seq, link, head MAC)
_SLOT = 160  # "%016x %64s %64s\n" is 147 bytes, padded with spaces
_EMPTY = b" " * (_SLOT - 1) + b"\n"


def _encode(head: Head) -> bytes:
    seq, mac, head_mac = head
    return f"{seq:016x} {mac.hex()} {head_mac.hex()}".encode().ljust(_SLOT - 1) + b"\n"


def _decode(slot: bytes) -> Head | None:
    try:
        seq, mac, head_mac = slot.decode("ascii").split()
        return int(seq, 16), bytes.fromhex(mac), bytes.fromhex(head_mac)
    except ValueError:
        return None  # empty, or torn by a crash: the other slot holds the head before


class Witness:
    """The witness file of one vault home."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written = 0  # the highest seq this process wrote (no need to write it again)

    def read(self) -> list[Head] | None:
        """The heads the slots hold, newest first (the caller takes the newest whose MAC
        holds); None when there is no witness yet. A file that is not a witness is an
        error, never taken for none."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError:
            raise self._unreadable() from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            data = os.pread(fd, 2 * _SLOT + 1, 0)
        finally:
            os.close(fd)  # and the lock with it
        if len(data) != 2 * _SLOT:
            raise self._unreadable()
        heads = [h for h in (_decode(data[:_SLOT]), _decode(data[_SLOT:])) if h is not None]
        return sorted(heads, reverse=True)

    def advance(self, head: Head, *, force: bool = False) -> None:
        """Record a committed head unless the witness already holds a later one (`force`:
        the operator's deliberate restore, which may move it back: both slots)."""
        if head[0] <= self._written and not force:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = os.pread(fd, 2 * _SLOT, 0)
            if len(data) != 2 * _SLOT:
                data = _EMPTY + _EMPTY  # a new witness
            slots = [_decode(data[:_SLOT]), _decode(data[_SLOT:])]
            seqs = [-1 if slot is None else slot[0] for slot in slots]
            if force:
                os.pwrite(fd, _encode(head) * 2, 0)
            elif head[0] > max(seqs):
                older = 0 if seqs[0] < seqs[1] else 1
                os.pwrite(fd, _encode(head), older * _SLOT)
            if len(data) != 2 * _SLOT or force:
                os.ftruncate(fd, 2 * _SLOT)
        finally:
            os.close(fd)
        self._written = head[0] if force else max(self._written, head[0])

    def _unreadable(self) -> StoreError:
        return StoreError(
            f"the audit witness {self.path} is unreadable; nothing is believed until it is "
            "restored, or an operator runs `toolkit-vault audit accept-restore`"
        )
