"""Call chains: each process appends its tool calls' records to a chain of its own.

A call changes no state, and calls outnumber every other write by orders of magnitude.
Appended to the one audit chain, each batch of records waited on that chain's lock
(SQLite's writer, PostgreSQL's advisory lock) through its commit's flush, so two replicas
wrote barely more records than one. So each process (each `Store`) writes its calls' records
to a chain of its own, named by a random id: its own `seq` and HMAC links under the audit key
(`call_links`: never mistakable for the main chain's), its own authenticated head row
(`call_chains`), rows in `call_records`. On PostgreSQL a batch is a transaction of its own
that takes no lock but this process's and sends no notice: replicas write side by side, and
a call moves no commit mark (lists are not made to read the store again). On SQLite, where
one writer at a time is the file's rule, a batch is one write of the group commit, as before.

A call chain alone proves order and content, and its head row its end; but whoever can
write the database could delete a whole chain, or its tail with its head row rolled back to
an earlier one. So the main chain anchors each call chain: from time to time (`ANCHOR_S`),
after every `ANCHOR_RECORDS` records, and when the process closes its store, a
`calls_anchored` event records the chain's id, last seq and last link. `audit verify`
(`audit.call_verify`) walks every call chain and holds it to its anchors: a record missing,
inserted, reordered or edited anywhere breaks the walk; a tail cut off behind an anchor
breaks it too; the records after the last anchor (a process killed before it anchored)
are proven by the chain's head row alone, and reported as such.
"""

from __future__ import annotations

import atexit
import hmac
import logging
import os
import queue
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, bindparam, insert, select, update
from sqlalchemy.exc import DBAPIError

from toolkit_vault.errors import StoreError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.call_links import call_head_link, chain_start, record_payload
from toolkit_vault.store.chain import Signer
from toolkit_vault.store.driver import _OnDriver
from toolkit_vault.store.models import CallChainHead, CallRecordRow
from toolkit_vault.store.records import AuditDraft, bounded_details
from toolkit_vault.store.writer import Write, deferring
from toolkit_vault.telemetry import traces

__all__ = ["ANCHOR_RECORDS", "ANCHOR_S", "CHAIN_ACTOR", "CallChain", "ChainHost"]

log = logging.getLogger(__name__)

CHAIN_ACTOR = "vault:calls"  # the actor of `calls_anchored` events
ANCHOR_RECORDS = 10_000  # TOOLKIT_VAULT_CALL_ANCHOR_RECORDS
ANCHOR_S = 5.0  # TOOLKIT_VAULT_CALL_ANCHOR_S

_RECORD_COLUMNS = (
    *("chain", "seq", "ts", "actor", "action", "session_id", "toolkit_name", "version"),
    *("details", "mac"),
)
# A call chain's statements (kept beside their one writer rather than in `statements`).
_HEAD_OF = _OnDriver(
    select(CallChainHead.seq, CallChainHead.mac, CallChainHead.head_mac).where(
        CallChainHead.chain == bindparam("chain")
    )
)
_INSERT_RECORDS = _OnDriver(
    insert(CallRecordRow).values({c: bindparam(c) for c in _RECORD_COLUMNS})
)
_START_HEAD = _OnDriver(
    insert(CallChainHead).values(
        chain=bindparam("chain"),
        started_at=bindparam("started_at"),
        seq=bindparam("new_seq"),
        mac=bindparam("new_mac"),
        head_mac=bindparam("new_head"),
    )
)
_MOVE_HEAD = _OnDriver(
    update(CallChainHead)
    .where(CallChainHead.chain == bindparam("chain"))
    .values(seq=bindparam("new_seq"), mac=bindparam("new_mac"), head_mac=bindparam("new_head"))
)

Work = Callable[[Connection], Any]
Sink = Callable[[Sequence[Mapping[str, Any]]], None]


class ChainHost(Protocol):
    """What a call chain needs of its store (`Store`)."""

    engine: Engine
    audit_sink: Sink | None

    def transact(self, work: Work, then: Callable[[Any], None] | None = None) -> Any: ...

    def audit(self, conn: Connection, draft: AuditDraft) -> None: ...

    def call_signer(self) -> Signer | None: ...


class CallChain:
    """This process's call chain (see the module's docstring). `now(work)` runs a batch's
    write and waits for its commit; `leave(work)` queues it and returns its `Write`;
    `append(conn, drafts)` (in that write) links the drafts to the chain."""

    def __init__(self, host: ChainHost) -> None:
        self._host = host
        self.chain = f"calls-{secrets.token_hex(8)}"
        self.anchor_records = int(_positive("TOOLKIT_VAULT_CALL_ANCHOR_RECORDS", ANCHOR_RECORDS))
        self.anchor_s = _positive("TOOLKIT_VAULT_CALL_ANCHOR_S", ANCHOR_S)
        self._postgresql = host.engine.dialect.name == "postgresql"
        self._lock = threading.Lock()  # one batch of this chain at a time (PostgreSQL)
        self._left: queue.SimpleQueue[Write | None] = queue.SimpleQueue()
        self._left_thread: threading.Thread | None = None
        self._starting = threading.Lock()  # the queue's thread, started once
        self._anchoring = threading.Lock()
        self._anchored = 0  # the last seq the main chain anchored
        self._unanchored = 0  # records appended since (counted as written, not committed)
        self._poke = threading.Event()
        self._stopped = threading.Event()
        self._anchor_thread: threading.Thread | None = None

    # -- writing ------------------------------------------------------------------------

    def now(self, work: Work) -> Any:
        """Run `work` as one write of this chain and return its result once committed."""
        if not self._postgresql:
            return self._host.transact(work)
        with traces.span("storage.write"), self._lock:  # its own, not `Store.write`'s
            return self._own_transaction(work)

    def leave(self, work: Work) -> Write:
        """Queue `work`, written soon after in order; its `Write` is settled once committed."""
        if not self._postgresql:
            with deferring() as left:
                self._host.transact(work, lambda _: None)
            (write,) = left
            return write
        write = Write(work, None)
        with self._starting:
            if self._left_thread is None or not self._left_thread.is_alive():
                self._left_thread = threading.Thread(
                    target=self._write_left, name="toolkit-vault-call-chain", daemon=True
                )
                self._left_thread.start()
        self._left.put(write)
        return write

    def _write_left(self) -> None:
        while (write := self._left.get()) is not None:
            try:
                with self._lock:
                    write.result = self._own_transaction(write.work)
            except BaseException as exc:
                write.error = exc
            write.settle()

    def _own_transaction(self, work: Work) -> Any:
        """(PostgreSQL, this chain's lock held.) `work` in a transaction of its own: no
        advisory lock, no notice (a call record moves no state, so no commit mark)."""
        try:
            with self._host.engine.connect() as conn, conn.begin():
                return work(conn)
        except DBAPIError as exc:
            said = f"the database refused the write ({type(exc.orig).__name__})"
            raise StoreError(said) from None

    def append(self, conn: Connection, drafts: Sequence[AuditDraft]) -> None:
        """(In a write's transaction.) Link `drafts` after the chain's head, as read in
        this transaction, move the head, and hand the records to the audit devices (which
        may refuse them, rolling the write back)."""
        sign = self._host.call_signer()
        if sign is None:
            raise StoreError("the audit key is not loaded")
        seq, previous, found = self._end(conn, sign)
        records: list[dict[str, Any]] = []
        for draft in drafts:
            seq += 1
            record: dict[str, Any] = {
                "chain": self.chain,
                "seq": seq,
                "ts": time.time(),
                "actor": draft.actor,
                "action": str(draft.action),
                "session_id": draft.session_id,
                "toolkit_name": draft.toolkit_name,
                "version": draft.version,
                "details": bounded_details(draft.details),
            }
            mac = sign(previous, record_payload(self.chain, record))
            records.append({**record, "mac": mac, "previous": previous})
            previous = mac
        if not records:
            return
        _INSERT_RECORDS(conn, [{c: r[c] for c in _RECORD_COLUMNS} for r in records])
        head = {
            "chain": self.chain,
            "new_seq": seq,
            "new_mac": previous,
            "new_head": call_head_link(sign, self.chain, seq, previous),
        }
        if found:
            _MOVE_HEAD(conn, head)
        else:
            _START_HEAD(conn, {**head, "started_at": records[0]["ts"]})
        sink = self._host.audit_sink
        if sink is not None:
            sink(records)
        self._appended(len(records))

    def _end(self, conn: Connection, sign: Signer) -> tuple[int, bytes, bool]:
        """(seq, last link, whether the head row exists) of this chain, read in `conn`; a
        head that fails its MAC stops the chain rather than extending what it cannot
        vouch for."""
        row = _HEAD_OF(conn, {"chain": self.chain}).fetchone()
        if row is None:
            return 0, chain_start(self.chain), False
        seq, mac = int(row[0]), bytes(row[1])
        if not hmac.compare_digest(call_head_link(sign, self.chain, seq, mac), bytes(row[2])):
            raise StoreError(
                "this process's call chain head fails its MAC; calls are refused until "
                "that is resolved (run `toolkit-vault audit verify`)"
            )
        return seq, mac, True

    # -- anchoring ------------------------------------------------------------------------

    def _appended(self, count: int) -> None:
        self._unanchored += count
        if self._anchor_thread is None:
            with self._anchoring:
                if self._anchor_thread is None:
                    self._anchor_thread = threading.Thread(
                        target=self._anchor_loop, name="toolkit-vault-call-anchor", daemon=True
                    )
                    self._anchor_thread.start()
                    _OPEN.add(self)
                    _register_at_exit()
        if self._unanchored >= self.anchor_records:
            self._poke.set()

    def _anchor_loop(self) -> None:
        """Anchor at each tick, or when poked by a count; end once a tick found nothing
        to anchor (the next record starts it again), so an idle process keeps no thread."""
        idle = 0
        while not self._stopped.is_set():
            poked = self._poke.wait(self.anchor_s)
            self._poke.clear()
            if self._stopped.is_set():
                return
            try:
                done = self.anchor("count" if poked else "time")
            except Exception as exc:  # tried again at the next tick
                log.warning("call chain %s was not anchored (%s)", self.chain, _said(exc))
                continue
            idle = 0 if done is not None else idle + 1
            if done is None:  # (a count of records that never committed lasts three ticks)
                with self._anchoring:
                    if self._unanchored == 0 or idle >= 3:
                        self._unanchored = 0
                        self._anchor_thread = None
                        _OPEN.discard(self)
                        return

    def anchor(self, why: str) -> int | None:
        """Anchor this chain's committed head in the main chain (a `calls_anchored`
        event, read and written in one transaction), if it moved since the last anchor;
        the seq anchored, or None."""
        with self._anchoring:
            anchored = self._anchored

            def work(conn: Connection) -> int | None:
                sign = self._host.call_signer()
                if sign is None:
                    raise StoreError("the audit key is not loaded")
                seq, mac, found = self._end(conn, sign)
                if not found or seq <= anchored:
                    return None
                details = {"chain": self.chain, "seq": seq, "mac": mac.hex(), "why": why}
                self._host.audit(
                    conn, AuditDraft(CHAIN_ACTOR, AuditAction.CALLS_ANCHORED, details=details)
                )
                return seq

            done: int | None = self._host.transact(work)
            if done is not None:
                self._unanchored = max(self._unanchored - (done - anchored), 0)
                self._anchored = done
            return done

    def close(self) -> None:
        """Stop anchoring and anchor what was written (a clean shutdown). Never raises."""
        self._stopped.set()
        self._poke.set()
        if self._left_thread is not None:
            self._left.put(None)
            self._left_thread.join(10)
        if self._unanchored == 0:
            return
        try:
            self.anchor("shutdown")
        except Exception as exc:
            log.warning("call chain %s was not anchored at shutdown (%s)", self.chain, _said(exc))
        _OPEN.discard(self)


def _positive(name: str, default: float) -> float:
    """A positive number from the environment (`default` when unset); refused at start,
    naming the variable, otherwise."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and value < float("inf")):
        raise StoreError(f"{name} must be a positive number")
    return value


def _said(exc: BaseException) -> str:
    return exc.message if isinstance(exc, StoreError) else type(exc).__name__


_OPEN: weakref.WeakSet[CallChain] = weakref.WeakSet()
_AT_EXIT: list[bool] = []


def _register_at_exit() -> None:
    """Anchor every open chain at a clean exit; registered once the first chain writes, so
    it runs before the audit devices drain (registered earlier, run later)."""
    if not _AT_EXIT:
        _AT_EXIT.append(True)
        atexit.register(_close_all)


def _close_all() -> None:
    for chain in list(_OPEN):
        chain.close()
