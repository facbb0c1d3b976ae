"""Call records: many tool calls' audit events appended in one write.

A call changes no state, and calls outnumber every other write by orders of magnitude; yet
each is an audit event on the one chain, whose appends queue on one lock (SQLite's writer,
PostgreSQL's advisory lock). Written one write each, calls would serialize the vault on
that lock. So the records of the calls that end while a write is being committed gather in
one batch, and the batch is one write in the store's group commit (`writer`): one read of
the chain's end, one insert of all its events, one move of the head, whatever its size.

The records stay what every event is: each its own link of the one chain (authenticated,
ordered, and a missing or edited one breaks `audit verify`), sent to the audit devices, and
committed before its caller hears back (`record` returns once the batch is committed, or
raises: a call whose record was not written is not answered as if it were).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.store.records import AuditDraft

__all__ = ["MAX_BATCH", "CallRecords"]

MAX_BATCH = 1000  # records a batch takes; the next ones start another (bounds one insert)

# Runs `work(conn)` as one write of the group commit, tried again when it lost a race
# (`Store.transact`); `append(conn, drafts)` writes drafts as chain links (`Store.audit_many`).
Transact = Callable[[Callable[[Any], Any]], Any]
Append = Callable[[Any, Sequence[AuditDraft]], None]
# Whether the caller is the store's writer thread (`Writer.is_writer_thread`).
OnWriter = Callable[[], bool]


class _Batch:
    """The records gathered for one write, and how that write ended."""

    __slots__ = ("done", "drafts", "error")

    def __init__(self) -> None:
        self.drafts: list[AuditDraft] = []
        self.done = threading.Event()
        self.error: str | None = None


class CallRecords:
    """A store's call records (see the module's docstring): `record` one, thread-safe."""

    def __init__(self, transact: Transact, append: Append, on_writer: OnWriter) -> None:
        self._transact, self._append, self._on_writer = transact, append, on_writer
        self._lock = threading.Lock()
        self._open: _Batch | None = None  # gathering records until its write runs

    def record(self, draft: AuditDraft) -> None:
        """Append `draft` to the chain with the other records of its batch; return once
        they are committed. The first record of a batch writes it (and waits for the group
        commit, as any write does); the others wait for it. Raises StoreError when the
        batch was not written: none of its records were. Refused on the store's writer
        thread (inside a write's `then`): that thread waiting for a write queued behind it
        would wait for itself, so the mistake fails at once instead of hanging."""
        if self._on_writer():
            raise StoreError("a call's record cannot be written from the store's writer thread")
        with self._lock:
            batch, lead = self._open, False
            if batch is None or len(batch.drafts) >= MAX_BATCH:
                batch, lead = _Batch(), True
                self._open = batch
            batch.drafts.append(draft)
        if not lead:
            batch.done.wait()
            if batch.error is not None:
                raise StoreError(batch.error)
            return
        try:
            self._transact(lambda conn: self._write(conn, batch))
        except Exception as exc:
            batch.error = _said(exc)
            if isinstance(exc, VaultError):
                raise
            raise StoreError(batch.error) from None
        except BaseException:
            batch.error = "the call's audit record was not written (interrupted)"
            raise
        finally:
            batch.done.set()

    def _write(self, conn: Any, batch: _Batch) -> None:
        """(In the write's transaction.) Close the batch, so the records after this start
        the next one, and append its drafts; run again as it is when the write is tried
        again."""
        with self._lock:
            if self._open is batch:
                self._open = None
        self._append(conn, batch.drafts)


def _said(exc: BaseException) -> str:
    """What the other records of a failed batch hear: the store's own words (which never
    hold an event's details), else the kind of failure."""
    if isinstance(exc, VaultError):
        return f"the call's audit record was not written: {exc.message}"
    return f"the call's audit record was not written ({type(exc).__name__})"
