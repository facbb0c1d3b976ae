"""Call records: many tool calls' audit records appended in one write.

A call changes no state, and calls outnumber every other write by orders of magnitude.
Written one write each, calls would queue on their chain's writes one by one. So the
records of the calls that end while a batch is being committed gather in the next batch,
and a batch is one write of this process's call chain (`call_chains`): one read of the
chain's end, one insert of all its records, one move of its head, whatever its size.

The records stay what every event is: each its own link of a chain (authenticated,
ordered, and a missing or edited one breaks `audit verify`), sent to the audit devices, and
committed before its caller hears back (`record` returns once the batch is committed, or
raises: a call whose record was not written is not answered as if it were).

Waiting bounds the batches: a caller waits out a commit before its next call, so a batch
holds at most one record per caller in flight, and a process's calls are bounded by the
commit's latency (one batch of a chain at a time; other processes write their own chains
side by side). `record(..., wait=False)` leaves the record to be written and returns at
once (`CallChain.leave`: the store's writer thread on SQLite, the chain's on PostgreSQL): then
every record that arrives during a commit joins the next batch, whatever the callers, at
the price of answering a call before its record is durable (one that then fails is logged
and counted, and the call was answered all the same). The engine chooses.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.writer import Write

__all__ = ["MAX_BATCH", "CallRecords"]

log = logging.getLogger(__name__)

MAX_BATCH = 1000  # records a batch takes; the next ones start another (bounds one insert)

# Runs `work(conn)` as one write and waits for its commit (`CallChain.now`); queues it and
# returns its `Write`, settled once committed (`CallChain.leave`); `append(conn, drafts)`
# writes drafts as chain links (`CallChain.append`).
Now = Callable[[Callable[[Any], Any]], Any]
Leave = Callable[[Callable[[Any], Any]], Write]
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

    def __init__(self, now: Now, leave: Leave, append: Append, on_writer: OnWriter) -> None:
        self._now, self._leave_write = now, leave
        self._append, self._on_writer = append, on_writer
        self._lock = threading.Lock()
        self._open: _Batch | None = None  # gathering records until its write runs

    def record(self, draft: AuditDraft, *, wait: bool = True) -> None:
        """Append `draft` to the chain with the other records of its batch. The first
        record of a batch writes it; the others join it. `wait`: return once the batch is
        committed, or raise StoreError when it was not (none of its records were); else
        return at once, the batch left to be written (`CallChain.leave`), and a batch that
        fails is logged (counted, never its details). Refused on the writer thread itself
        (inside a write's `then`): waiting there for a write queued behind that thread
        would wait for ever, so the mistake fails at once instead of hanging."""
        if self._on_writer():
            raise StoreError("a call's record cannot be written from the store's writer thread")
        with self._lock:
            batch, lead = self._open, False
            if batch is None or len(batch.drafts) >= MAX_BATCH:
                batch, lead = _Batch(), True
                self._open = batch
            batch.drafts.append(draft)
        if lead and not wait:
            self._leave(batch)
        elif lead:
            self._lead(batch)
        elif wait:
            batch.done.wait()
            if batch.error is not None:
                raise StoreError(batch.error)

    def _lead(self, batch: _Batch) -> None:
        """Write `batch` on this thread's behalf, in the group commit, and say how it ended."""
        try:
            self._now(lambda conn: self._write(conn, batch))
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

    def _leave(self, batch: _Batch) -> None:
        """Leave `batch` to be written (`CallChain.leave`); its waiters hear once it is
        settled."""
        write = self._leave_write(lambda conn: self._write(conn, batch))

        def settled() -> None:
            if write.error is not None:
                batch.error = _said(write.error)
                log.error("%d calls' audit records were not written", len(batch.drafts))
            batch.done.set()

        write.when_settled(settled)

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
