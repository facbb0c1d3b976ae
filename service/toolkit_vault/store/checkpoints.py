"""Checkpoints of the audit chain's followed state: a process starts from the newest one its
vault home names and follows only the events after it, instead of walking the whole chain.

A checkpoint is the `ChainState` at an event `seq` (`ledger`), as canonical JSON, stored in
`audit_checkpoints` with the chain's link at `seq` and a MAC under the audit key over its
seq, that link and the SHA-256 of the state (`checkpoint_link`: a domain of its own, never
equal to a link's or the head's input). The database holds the audit key only wrapped, so
a database writer can neither forge one nor move one to another seq. The vault home names
the newest one (`audit-checkpoint`, beside the witness: its seq and digest), so a
checkpoint put back from an older copy, or another one swapped in, is not the one named.

A process believes a checkpoint only when all of this holds, in the snapshot it follows:
the home names it, the row is there, its digest is the named one, its MAC holds, the chain
holds the same link at its seq, and (when the witness's head is not past it) the chain
holds the witnessed link at the witness's seq, and every event from the first to its seq
(`count_to`: an event deleted below it is a broken chain, which the
whole walk then reports as it always did). Then the ledger starts from its state and
verifies every later event against its link, as on any walk. Otherwise the checkpoint is
not believed: the process says so (a warning, `Checkpoints.refused`) and walks the chain
from its first event, which remains the authority.

Checkpoints are written by a process that followed the chain with the audit key, when the
chain has grown by `EVERY_EVENTS` since its last (or `MIN_EVENTS` after `EVERY_S`), on a
thread of their own (a process's exit waits for one being written); the newest `KEPT` are
kept, and always the one the home names, so a process whose home's record lags another's
write still finds the one it names.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import hmac
import json
import logging
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, text

from toolkit_vault.files import PrivateFileError, open_private
from toolkit_vault.store.chain import Signer
from toolkit_vault.store.ledger import ChainState, Ledger, PrincipalState
from toolkit_vault.store.models import AuditCheckpoint, AuditEvent

__all__ = [
    "CHECKPOINT_RECORD",
    "EVERY_EVENTS",
    "Checkpoints",
    "checkpoint_link",
    "count_events",
    "count_to",
    "decode_state",
    "encode_state",
]

log = logging.getLogger(__name__)

CHECKPOINT_RECORD = "audit-checkpoint"  # in the vault home: the newest checkpoint's name
# How often: events since this process's last checkpoint (the test suite may lower it, to
# run the freshness tests with checkpoints in every start), or fewer after a while.
EVERY_EVENTS = int(os.environ.get("TOOLKIT_VAULT_CHECKPOINT_EVENTS", "10000"))
EVERY_S = 600.0
MIN_EVENTS = 100
KEPT = 3
FINISH_S = 5.0  # how long an exit waits for a checkpoint being written
_DOMAIN = hashlib.sha256(b"toolkit-vault/v1/audit-checkpoint").digest()  # 32 bytes, a link's size
_RECORD_SIZE = 16 + 1 + 64 + 1  # "%016x %64s\n"
# Every attribute `ChainState` has: one added without a place here is never checkpointed
# (a checkpoint without it would start a process from a state missing it).
_Write = Callable[[], AbstractContextManager[Connection]]  # `Store.write`
_FIELDS = frozenset(
    {
        "pointers",
        "latest",
        "purged",
        "principals",
        "imported",
        "registry_changes",
        "removed",
        "removals",
        "templates",
        "console_roles",
        "allowances",
        "tool_pins",
        "tool_changes",
        "ended_mcp",
    }
)


def checkpoint_link(sign: Signer, seq: int, mac: bytes, digest: bytes) -> bytes:
    """The checkpoint's MAC over (seq, the chain's link at seq, its state's digest). Its
    input is the checkpoint domain, then a byte 1 where a link's payload has `{` and the
    head's a zero byte."""
    return sign(_DOMAIN, b"\x01" + struct.pack(">Q", seq) + mac + digest)


def encode_state(state: ChainState) -> bytes | None:
    """The state as canonical JSON; None when `ChainState` holds a field this does not."""
    if set(vars(state)) != _FIELDS:
        return None
    document = {
        "pointers": state.pointers,
        "latest": state.latest,
        "purged": state.purged,
        "principals": {
            key: [p.name, p.role, p.revoked, p.expires_at] for key, p in state.principals.items()
        },
        "imported": {k: None if v is None else list(v) for k, v in state.imported.items()},
        "registry_changes": state.registry_changes,
        "removed": state.removed,
        "removals": state.removals,
        "templates": state.templates,
        "console_roles": sorted([c, v, role] for (c, v), role in state.console_roles.items()),
        "allowances": {
            key: [sorted(whole), sorted([t, n] for t, n in single)]
            for key, (whole, single) in state.allowances.items()
        },
        "tool_pins": sorted([t, p, pins] for (t, p), pins in state.tool_pins.items()),
        "tool_changes": sorted([t, p, seen] for (t, p), seen in state.tool_changes.items()),
        "ended_mcp": sorted(state.ended_mcp),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.encode()


def decode_state(blob: bytes) -> ChainState:
    """`encode_state`'s inverse (ValueError, KeyError or TypeError on anything else)."""
    document = json.loads(blob)
    state = ChainState()
    state.pointers = document["pointers"]
    state.latest = document["latest"]
    state.purged = document["purged"]
    state.principals = {k: PrincipalState(*v) for k, v in document["principals"].items()}
    state.imported = {
        k: None if v is None else (v[0], v[1]) for k, v in document["imported"].items()
    }
    state.registry_changes = int(document["registry_changes"])
    state.removed = document["removed"]
    state.removals = document["removals"]
    state.templates = document["templates"]
    state.console_roles = {(c, v): role for c, v, role in document["console_roles"]}
    state.allowances = {
        k: (frozenset(whole), frozenset((t, n) for t, n in single))
        for k, (whole, single) in document["allowances"].items()
    }
    state.tool_pins = {(t, p): pins for t, p, pins in document["tool_pins"]}
    state.tool_changes = {(t, p): seen for t, p, seen in document["tool_changes"]}
    state.ended_mcp = set(document["ended_mcp"])
    return state


class Checkpoints:
    """One store's checkpoints: where it started (`start`) and what it writes (`consider`,
    `write_now`). `record` is the home's checkpoint record (None: no home, no checkpoints)."""

    def __init__(self, record: Path | None) -> None:
        self.record = record
        self.refused: str | None = None  # why the last start did not believe the named one
        self.started_from = 0  # the seq of the checkpoint this process started from
        self._written = 0  # the newest seq this process checkpointed (or started from)
        self._written_at = time.monotonic()
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # one write at a time in this process
        self._thread: threading.Thread | None = None
        self._finished_at_exit = False

    # -- starting from one ------------------------------------------------------------

    def start(
        self, conn: Connection, ledger: Ledger, sign: Signer, witness: tuple[int, bytes]
    ) -> None:
        """(A first walk, before it takes any event; `witness` as `Following.witnessed`.)
        Start the ledger from the checkpoint the home names, when it verifies; otherwise
        say why, and leave the ledger empty: the walk starts from the first event."""
        named = self._named()
        if named is None:
            return
        seq, digest = named
        reason = self._verify(conn, sign, witness, seq, digest)
        if isinstance(reason, str):
            self.refused = reason
            log.warning(
                "the audit checkpoint at event %s is not believed (%s): following the whole "
                "chain from its first event instead",
                seq,
                reason,
            )
            return
        mac, state = reason
        with ledger.lock:
            if ledger.seq == 0 and ledger.applied == 0 and ledger.failure is None:
                ledger.start_at(seq, mac, state)
                self.refused, self.started_from = None, seq
                self._written = max(self._written, seq)

    def _verify(
        self, conn: Connection, sign: Signer, witness: tuple[int, bytes], seq: int, digest: bytes
    ) -> str | tuple[bytes, ChainState]:
        """The named checkpoint's (link, state), or why it is not believed."""
        row = conn.execute(select(AuditCheckpoint).where(AuditCheckpoint.seq == seq)).first()
        if row is None:
            return "the database does not hold it"
        blob, mac = bytes(row.state), bytes(row.mac)
        if not hmac.compare_digest(hashlib.sha256(blob).digest(), digest):
            return "it is not the checkpoint the vault home names"
        expected = checkpoint_link(sign, seq, mac, digest)
        if not hmac.compare_digest(expected, bytes(row.checkpoint_mac)):
            return "it fails its MAC: it was not written by this vault"
        if not _link_is(conn, seq, mac):
            return "the audit chain holds another event at its seq"
        if witness[0] <= seq and not _link_is(conn, witness[0], witness[1]):
            return "the audit chain differs from its witness"
        if count_to(conn, seq) != seq:  # an event deleted below it
            return "the audit chain is missing events before it"
        try:
            return mac, decode_state(blob)
        except (ValueError, KeyError, TypeError):
            return "its state is unreadable"

    def _named(self) -> tuple[int, bytes] | None:
        """(seq, digest) the home's record names; None without one (or an unreadable one,
        said in the log: the walk is then whole)."""
        if self.record is None:
            return None
        try:
            fd = open_private(self.record, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except (PrivateFileError, OSError) as exc:
            log.warning("the audit checkpoint record %s is not read (%s)", self.record, exc)
            return None
        try:
            data = os.pread(fd, _RECORD_SIZE + 1, 0)
        finally:
            os.close(fd)
        try:
            seq, digest = data.decode("ascii").split()
            named = int(seq, 16), bytes.fromhex(digest)
        except ValueError:
            log.warning("the audit checkpoint record %s is damaged: it is not used", self.record)
            return None
        return named if len(named[1]) == 32 else None

    def forget(self) -> None:
        """(An operator's accepted restore.) Name no checkpoint: the ones named were of the
        chain before it, and the next is written from the restored one."""
        if self.record is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.record)
        self._written = 0

    # -- writing them -------------------------------------------------------------------

    def due(self, ledger: Ledger) -> bool:
        grown = ledger.seq - self._written
        if grown >= EVERY_EVENTS:
            return True
        return grown >= MIN_EVENTS and time.monotonic() - self._written_at >= EVERY_S

    def consider(self, ledger: Ledger, sign: Signer, write: _Write) -> None:
        """(After a follow.) Write a checkpoint on a thread of its own when one is due."""
        if self.record is None or ledger.failure is not None or not self.due(ledger):
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._write_quietly,
                args=(ledger, sign, write),
                name="tkv-checkpoint",
                daemon=True,
            )
            if not self._finished_at_exit:  # (after the store's own exit work: runs first)
                atexit.register(self.finish)
                self._finished_at_exit = True
            self._thread.start()

    def _write_quietly(self, ledger: Ledger, sign: Signer, write: _Write) -> None:
        try:
            self.write_now(ledger, sign, write)
        except Exception as exc:  # a thread nobody waits on: said in one line, tried again later
            log.warning("an audit checkpoint was not written (%s)", type(exc).__name__)
            self._written_at = time.monotonic()

    def write_now(self, ledger: Ledger, sign: Signer, write: _Write) -> int | None:
        """Checkpoint the ledger's state now, if it is verified and at the event it last
        read (not ahead of it by this process's own commits); the seq written, or None."""
        if self.record is None:
            return None
        with self._writing:
            return self._write(ledger, sign, write)

    def _write(self, ledger: Ledger, sign: Signer, write: _Write) -> int | None:
        with ledger.lock:
            if ledger.failure is not None or ledger.seq == 0 or ledger.applied != ledger.seq:
                return None
            blob, seq, mac = encode_state(ledger.state), ledger.seq, ledger.mac
        if blob is None:
            log.warning("the chain's state has a field checkpoints do not hold: none is written")
            return None
        digest = hashlib.sha256(blob).digest()
        with write() as conn:
            found = conn.execute(
                select(AuditCheckpoint.seq).where(AuditCheckpoint.seq == seq)
            ).first()
            if found is None:
                conn.execute(
                    insert(AuditCheckpoint).values(
                        seq=seq,
                        mac=mac,
                        state=blob,
                        checkpoint_mac=checkpoint_link(sign, seq, mac, digest),
                        created_at=time.time(),
                    )
                )
        self._name(seq, digest)
        self._written, self._written_at = max(self._written, seq), time.monotonic()
        self._prune(write)
        return seq

    def _prune(self, write: _Write) -> None:
        """Drop all but the newest `KEPT`, never the one the home names, and only once this
        write is named: a process that ended between its row and its name (a command's
        exit) left a newer row unnamed, and pruning by age alone then dropped the named
        one, so every later start walked the whole chain."""
        named = self._named()
        with write() as conn:
            newest = conn.execute(
                select(AuditCheckpoint.seq).order_by(AuditCheckpoint.seq.desc()).limit(KEPT)
            ).scalars()
            kept = list(newest)
            if len(kept) == KEPT:
                floor = kept[-1] if named is None else min(kept[-1], named[0])
                conn.execute(delete(AuditCheckpoint).where(AuditCheckpoint.seq < floor))

    def finish(self, timeout: float = FINISH_S) -> None:
        """(At exit.) Let a checkpoint being written reach its row and its name, for at most
        `timeout` seconds: a command that followed a long chain leaves its checkpoint named
        for the next one instead of dying with it half done."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)

    def _name(self, seq: int, digest: bytes) -> None:
        """Name the checkpoint in the home's record, unless it names a later one already:
        written beside it and moved into place, so a reader sees one record or the other."""
        assert self.record is not None
        named = self._named()
        if named is not None and named[0] >= seq:
            return
        fd, temporary = tempfile.mkstemp(dir=self.record.parent, prefix=f".{CHECKPOINT_RECORD}.")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(f"{seq:016x} {digest.hex()}\n".encode())
            os.replace(temporary, self.record)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def count_to(conn: Connection, seq: int, every: int | None = None) -> int:
    """How many events the chain holds from 1 to `seq` (`seq` when none is missing): all of
    them (`every`, when the caller counted them in the same snapshot: `count_events`) less
    those after `seq` and those before 1, in one statement (one snapshot). A count of a
    whole table is read from its pages (SQLite's count optimisation), where a count of the
    range 1..`seq` steps through every row in it: at a million events 0.12 -> 0.05 s, paid
    by every process's first walk from a checkpoint and by each incremental `audit verify`
    (issue 53)."""
    after = select(func.count()).where(AuditEvent.seq > seq).scalar_subquery()
    before = select(func.count()).where(AuditEvent.seq < 1).scalar_subquery()
    if every is None:
        counted = select(_every_event(conn).scalar_subquery() - after - before)
    else:
        counted = select(every - after - before)
    return int(conn.execute(counted).scalar_one())


def count_events(conn: Connection) -> int:
    """How many events the chain holds, whatever their seq."""
    return int(conn.execute(_every_event(conn)).scalar_one())


def _every_event(conn: Connection) -> Any:
    """The count of every event, from the table's own b-tree on SQLite (`NOT INDEXED`),
    never an index: a range count reads that one too, and a file edited so that an index
    and its table disagree must not count otherwise."""
    table: Any = AuditEvent.__table__
    if conn.dialect.name == "sqlite":
        table = text("audit_events NOT INDEXED")
    return select(func.count()).select_from(table)


def _link_is(conn: Connection, seq: int, mac: bytes) -> bool:
    stored: Any = conn.execute(select(AuditEvent.mac).where(AuditEvent.seq == seq)).scalar()
    return stored is not None and hmac.compare_digest(bytes(stored), mac)
