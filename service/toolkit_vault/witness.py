"""The audit head kept outside the database: a file in the vault home beside the key.

Someone who can write to the database can put back a whole older copy, chain and head
included, and nothing inside the database can tell. The witness remembers the newest head
this home has seen committed (its seq, link and keyed head MAC, so it cannot be forged
without the audit key either); a database whose chain ends before it, or differs at it, is
an older copy and is not believed (`ledger`). Deliberately restoring one is an operator
step (`toolkit-vault audit accept-restore`), audited like any other change.

Every process that commits an event advances the witness after the commit, under an
exclusive lock on a lock file so that it only ever moves forward, written to a temporary
file and renamed into place (atomic, 0600). It is not fsynced: after a power loss it may
lag the database, which only weakens the check; it never leads a committed database.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

from .errors import StoreError

__all__ = ["WITNESS_NAME", "Witness"]

WITNESS_NAME = "audit-witness.json"
_FORMAT = 1


class Witness:
    """The witness file of one vault home."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_path = path.with_name(path.name + ".lock")
        self._written = 0  # the highest seq this process wrote (no need to write it again)
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of what `_cached` holds
        self._cached: tuple[int, bytes, bytes] | None = None
        self._mutex = threading.Lock()

    def read(self) -> tuple[int, bytes, bytes] | None:
        """(seq, link, head MAC) as written last, or None when there is no witness yet.
        Read again only when the file changed; an unreadable witness is an error."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        with self._mutex:
            if stamp == self._seen:
                return self._cached
        try:
            document = json.loads(self.path.read_bytes())
            if document.get("format") != _FORMAT:
                raise ValueError("format")
            value = (
                int(document["seq"]),
                bytes.fromhex(document["mac"]),
                bytes.fromhex(document["head_mac"]),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise StoreError(
                f"the audit witness {self.path} is unreadable; nothing is believed until it "
                "is restored, or an operator runs `toolkit-vault audit accept-restore`"
            ) from None
        with self._mutex:
            self._seen, self._cached = stamp, value
        return value

    def advance(self, seq: int, mac: bytes, head_mac: bytes, *, force: bool = False) -> None:
        """Record a committed head unless the witness already holds a later one (`force`:
        the operator's deliberate restore, which may move it back)."""
        if seq <= self._written and not force:
            return
        with open(self._lock_path, "a", opener=_private) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                current = None if force else self.read()
                if current is None or current[0] < seq:
                    self._write(seq, mac, head_mac)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        self._written = max(self._written, seq) if not force else seq

    def _write(self, seq: int, mac: bytes, head_mac: bytes) -> None:
        document = {"format": _FORMAT, "seq": seq, "mac": mac.hex(), "head_mac": head_mac.hex()}
        temp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(temp, "w", opener=_private) as out:
            json.dump(document, out)
        os.replace(temp, self.path)


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)
