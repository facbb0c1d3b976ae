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
slot, one head behind, which the head MAC tells apart. That leaves one slot standing, so a
damaged slot is counted (`torn`) for the store to say aloud (`Store.witness_damage`).

The file is opened only as a regular file of this user, mode 0600, never through a symlink
(`files.open_private`): a symlinked witness would let a write, an operator's
`accept-restore` above all, land on another file (the key file).

A write to the file dirties its inode, and the next fsync of the database then commits that
to the filesystem's journal too: written after every commit, the witness slowed every
configure of a busy server. So a commit only hands its head to a flusher thread, which
writes the newest one at most every `FLUSH_S` seconds, and at once when the process exits;
the process itself checks against the newest head it committed, in memory. Another
process's witness may thus lag by that much; after a SIGKILL or a power loss by more (it
is not fsynced either). A lagging witness only weakens the check: it never leads a
committed database.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import stat
import tempfile
import threading
from pathlib import Path

from toolkit_vault.errors import StoreError
from toolkit_vault.files import PrivateFileError, open_private

__all__ = ["FLUSH_S", "WITNESS_NAME", "Head", "Witness"]

log = logging.getLogger(__name__)

FLUSH_S = 0.05

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
        self._lock = threading.Lock()
        self._newest: Head | None = None  # the newest head this process committed
        self._pending: Head | None = None  # ... not yet written
        self._due = threading.Event()
        self._flusher: threading.Thread | None = None
        self._read: tuple[tuple[int, ...], list[Head]] | None = None  # (stat, heads) read last
        self.torn = 0  # slots of the last read that hold neither a head nor nothing

    @property
    def newest(self) -> Head | None:
        """The newest head this process committed (written or not yet)."""
        return self._newest

    def advance(self, head: Head) -> None:
        """A committed head: the flusher writes it soon (the newest of those given)."""
        with self._lock:
            if self._newest is not None and head[0] <= self._newest[0]:
                return
            self._newest = self._pending = head
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_soon, name="tkv-witness", daemon=True
                )
                self._flusher.start()
                atexit.register(self._flush_quietly)
        self._due.set()

    def flush(self) -> None:
        """Write the pending head now (the flusher, the process's exit, or a test)."""
        with self._lock:
            head, self._pending = self._pending, None
            if head is not None:
                self._write(head)

    def _flush_quietly(self) -> None:
        """`flush`, where nobody hears an error (the flusher, the process's exit): logged in
        one line, no traceback; readers of the file then refuse it with the same reason."""
        try:
            self.flush()
        except StoreError as exc:
            log.error("%s", exc.message)

    def _flush_soon(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            self._flush_quietly()
            threading.Event().wait(FLUSH_S)  # the next write waits; heads meanwhile coalesce

    def read(self) -> list[Head] | None:
        """The heads the slots hold, newest first (the caller takes the newest whose MAC
        holds); None when there is no witness yet. A file that is not a witness, or not a
        private regular file (a symlink above all), is an error, never taken for none."""
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return None
        except OSError:
            raise self._unreadable() from None
        if stat.S_ISLNK(info.st_mode):
            raise self._not_private(PrivateFileError("is a symlink; refusing to follow it"))
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        cached = self._read
        if cached is not None and cached[0] == stamp:
            return cached[1]  # unchanged since (a write within the clock's tick: one behind)
        try:
            fd = open_private(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None  # gone since the stat, as if the stat had not found it
        except PrivateFileError as exc:
            raise self._not_private(exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            data = os.pread(fd, 2 * _SLOT + 1, 0)
        except OSError:
            raise self._unreadable() from None
        finally:
            os.close(fd)  # and the lock with it
        if len(data) != 2 * _SLOT:
            raise self._unreadable()
        slots = (data[:_SLOT], data[_SLOT:])
        decoded = [_decode(slot) for slot in slots]
        heads = [h for h in decoded if h is not None]
        heads.sort(reverse=True)
        pairs = zip(slots, decoded, strict=True)
        self.torn = sum(1 for slot, h in pairs if h is None and slot != _EMPTY)
        self._read = (stamp, heads)
        return heads

    def put(self, head: Head) -> None:
        """Write `head` now in both slots, even if older: the operator's deliberate restore."""
        with self._lock:
            self._pending = None
            self._newest = head
            self._write(head, force=True)

    def _write(self, head: Head, *, force: bool = False) -> None:
        """(Lock held.) Replace the older slot with `head` unless the file already holds a
        later one (another process's), under an exclusive lock on the file."""
        if head[0] <= self._written and not force:
            return
        if not self._create(_encode(head) + (_encode(head) if force else _EMPTY)):
            self._write_over(head, force=force)
        self._written = head[0] if force else max(self._written, head[0])

    def _write_over(self, head: Head, *, force: bool) -> None:
        """(Lock held.) `_write` to a witness that exists."""
        try:
            fd = open_private(self.path, os.O_RDWR)
        except FileNotFoundError:
            raise self._unreadable() from None
        except PrivateFileError as exc:
            raise self._not_private(exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = os.pread(fd, 2 * _SLOT, 0)
            if len(data) != 2 * _SLOT:
                data = _EMPTY + _EMPTY  # not a witness: written over whole below
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

    def _create(self, slots: bytes) -> bool:
        """Make the witness holding `slots` (its first head) if there is none: written beside
        it and linked into place, so no reader, and no crash, ever finds a witness shorter
        than two slots (an empty file is not a witness: `read` refuses it) or without a head
        (two empty slots hold no head whose MAC holds). False when there is one already."""
        if os.path.lexists(self.path):
            return False  # a witness, or something that is not one: `open_private` says which
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{WITNESS_NAME}.")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(slots)
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                return False  # another process made it first
            return True
        finally:
            os.unlink(temporary)

    def _not_private(self, exc: PrivateFileError) -> StoreError:
        return StoreError(
            f"the audit witness {self.path} {exc}; nothing is believed or written until it "
            "is a regular file of this user again, mode 0600"
        )

    def _unreadable(self) -> StoreError:
        return StoreError(
            f"the audit witness {self.path} is unreadable; nothing is believed until it is "
            "restored, or an operator runs `toolkit-vault audit accept-restore`"
        )
