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
side by side). Where a commit is fast and the interpreter is the bound (many calls at once
on a fast disk), each record found the chain idle and was committed alone, one commit's CPU
a call. So a call says so where it begins (`expect`, on a transport's event loop) and where
it runs (`under_way`), and a batch's first record, when no batch is being written (else
it gathers while it waits for that one), waits, at most `GATHER_S`, for the
records of the calls then under way outside their tool (`in_tool`: a slow tool's record is
not waited for) to join it: a lone caller waits for nothing; sixteen share a commit.

Traced (issue 54), every record's write is a `storage.write` span in its call's trace: the
batch's own write for the record that writes it; for a record another thread's batch
carries, a span of its own, `storage.batch` saying how: `joined` (waited for that commit,
linked to the span of the write that committed it), `deferred` (left for the event loop,
which waits for the commit before answering), `left` (`wait=False`). Off, each is the
shared span that does nothing.

`record(..., wait=False)` leaves the record to be written and returns at once
(`CallChain.leave`: the store's writer thread on SQLite, the chain's on PostgreSQL): then
every record that arrives during a commit joins the next batch, whatever the callers, at
the price of answering a call before its record is durable (one that then fails is logged
and counted, and the call was answered all the same). The engine chooses.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.writer import Write
from toolkit_vault.telemetry import traces

__all__ = ["GATHER_S", "MAX_BATCH", "CallRecords", "ExpectedCall", "RecordsToCome", "expected_call"]

log = logging.getLogger(__name__)

MAX_BATCH = 1000  # records a batch takes; the next ones start another (bounds one insert)
GATHER_S = 0.002  # how long a batch's first record waits for the calls under way to join it

# Runs `work(conn)` as one write and waits for its commit (`CallChain.now`); queues it and
# returns its `Write`, settled once committed (`CallChain.leave`); `append(conn, drafts)`
# writes drafts as chain links (`CallChain.append`).
Now = Callable[[Callable[[Any], Any]], Any]
Leave = Callable[[Callable[[Any], Any]], Write]
Append = Callable[[Any, Sequence[AuditDraft]], None]
# Whether the caller is the store's writer thread (`Writer.is_writer_thread`).
OnWriter = Callable[[], bool]


class _Batch:
    """The records gathered for one write, and how that write ended: `settle` sets `done`
    and tells the event loops waiting for it (`RecordsToCome`), one hop per loop."""

    __slots__ = ("_loops", "committed_by", "done", "drafts", "error")

    def __init__(self) -> None:
        self.drafts: list[AuditDraft] = []
        self.done = threading.Event()
        self.error: str | None = None
        self.committed_by: object | None = None  # the write's span, while tracing (`_write`)
        self._loops: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] | None = {}

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None] | None:
        """(On `loop`.) A future set once this batch is settled; None when it is."""
        future = loop.create_future()
        with _SETTLING:
            if self._loops is None:
                return None
            self._loops.setdefault(loop, []).append(future)
        return future

    def settle(self) -> None:
        with _SETTLING:
            loops, self._loops = self._loops or {}, None
        self.done.set()
        for loop, futures in loops.items():
            with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits there
                loop.call_soon_threadsafe(_wake_all, futures)


def _wake_all(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


class RecordsToCome:
    """The batches holding a call's record when its thread did not wait for their commit
    (`deferred_records`): its event loop waits for them instead (`committed`), before it
    answers, so a call is still answered only once its record is committed."""

    __slots__ = ("batches",)

    def __init__(self) -> None:
        self.batches: list[_Batch] = []

    async def committed(self) -> str | None:
        """Once every batch is settled: None when all committed, else what failed (none of
        that batch's records were written: the call must not be answered as if they
        were)."""
        loop = asyncio.get_running_loop()
        for batch in self.batches:
            future = batch.on_loop(loop)
            if future is not None:
                await future
            if batch.error is not None:
                return batch.error
        return None


class ExpectedCall:
    """One call whose record is to come: counted among those a batch's first record waits
    for until its record joins a batch, its tool runs (`CallRecords.in_tool`), or it ends
    without one (`end`)."""

    __slots__ = ("_records", "counted")

    def __init__(self, records: CallRecords) -> None:
        self._records = records
        self.counted = True

    def end(self) -> None:
        """No longer to come (idempotent): answered, or ended without a record."""
        self._records._uncount(self)


# The call whose record this context will make (`CallRecords.under_way`): set where the
# call began (a transport's event loop, `expect`), carried to the thread that runs it.
_EXPECTED: ContextVar[ExpectedCall | None] = ContextVar("expected_call", default=None)
# Where a record joining another's batch leaves it instead of waiting for its commit: an
# event loop waits for it before answering (`RecordsToCome`), so the thread is free at once
# and one hop to the loop tells every call of the batch, where each waiting thread was woken
# on its own (the most CPU a call's record cost at 16 connections: BENCHMARKS.md).
_DEFERRED: ContextVar[RecordsToCome | None] = ContextVar("deferred_records", default=None)
_SETTLING = threading.Lock()  # guards every batch's `_loops` (held for a swap)


class CallRecords:
    """A store's call records (see the module's docstring): `record` one, thread-safe."""

    def __init__(self, now: Now, leave: Leave, append: Append, on_writer: OnWriter) -> None:
        self._now, self._leave_write = now, leave
        self._append, self._on_writer = append, on_writer
        self._lock = threading.Lock()
        self._open: _Batch | None = None  # gathering records until its write runs
        self._joined = threading.Condition(self._lock)  # a record joined, or a call ended
        self._coming = 0  # calls under way whose record is to come (`under_way`)
        self._gathering = False  # a batch's first record waits for them (`_gather`)
        self._writing = 0  # batches being written: the next one gathers while it waits

    def expect(self) -> ExpectedCall:
        """A call just began (on a transport's event loop, before it reaches a thread): its
        record is to come. `under_way` takes it up where it runs; `end` once answered."""
        with self._lock:
            self._coming += 1
        return ExpectedCall(self)

    @contextmanager
    def under_way(self, expected: ExpectedCall | None = None) -> Iterator[None]:
        """A call runs in this context, its record to come (`record`, here): the one
        `expected` (else the context's, else a new one). Leaving without a record (a call
        its waiter answered) ends it all the same."""
        call = expected or _EXPECTED.get() or self.expect()
        token = _EXPECTED.set(call)
        try:
            yield
        finally:
            _EXPECTED.reset(token)
            call.end()

    @contextmanager
    def in_tool(self) -> Iterator[None]:
        """This context's call runs its tool, which may take any time: not waited for
        meanwhile."""
        call = _EXPECTED.get()
        if call is None or not call.counted:
            yield
            return
        call.end()
        try:
            yield
        finally:
            with self._lock:
                call.counted = True
                self._coming += 1

    def _uncount(self, call: ExpectedCall) -> None:
        with self._lock:
            if call.counted:
                call.counted = False
                self._coming -= 1
                if self._gathering and self._coming <= 0:
                    self._joined.notify()

    def _gather(self, batch: _Batch) -> None:
        """(Lock held; the first record of `batch`.) Wait, at most `GATHER_S`, until no
        call under way is still to record, so their records share this batch's commit."""
        if self._coming <= 0:
            return
        deadline = time.monotonic() + GATHER_S
        self._gathering = True
        try:
            while self._coming > 0 and len(batch.drafts) < MAX_BATCH:
                left = deadline - time.monotonic()
                if left <= 0 or not self._joined.wait(left):
                    return
        finally:
            self._gathering = False

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
        call = _EXPECTED.get()
        with self._lock:
            batch, lead = self._open, False
            if batch is None or len(batch.drafts) >= MAX_BATCH:
                batch, lead = _Batch(), True
                self._open = batch
            batch.drafts.append(draft)
            if call is not None and call.counted:  # joined: no longer to come
                call.counted = False
                self._coming -= 1
                if self._gathering and (self._coming <= 0 or len(batch.drafts) >= MAX_BATCH):
                    self._joined.notify()
            if lead and wait and self._writing == 0:  # else it gathers waiting its turn
                self._gather(batch)
        if lead and wait:
            self._lead(batch)  # its `storage.write` span is the write's, in this trace
        elif not wait:
            with traces.span("storage.write", storage__batch="left"):
                if lead:
                    self._leave(batch)
        elif (to_come := _DEFERRED.get()) is not None:
            with traces.span("storage.write", storage__batch="deferred"):
                to_come.batches.append(batch)  # its loop waits for the commit before answering
        else:
            with traces.span("storage.write", storage__batch="joined") as joined:
                batch.done.wait()
                joined.link(batch.committed_by)  # the write that committed it, another's
                if batch.error is not None:
                    raise StoreError(batch.error)

    def _lead(self, batch: _Batch) -> None:
        """Write `batch` on this thread's behalf, in the group commit, and say how it ended."""
        with self._lock:
            self._writing += 1
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
            with self._lock:
                self._writing -= 1
            batch.settle()

    def _leave(self, batch: _Batch) -> None:
        """Leave `batch` to be written (`CallChain.leave`); its waiters hear once it is
        settled."""
        write = self._leave_write(lambda conn: self._write(conn, batch))

        def settled() -> None:
            if write.error is not None:
                batch.error = _said(write.error)
                log.error("%d calls' audit records were not written", len(batch.drafts))
            batch.settle()

        write.when_settled(settled)

    def _write(self, conn: Any, batch: _Batch) -> None:
        """(In the write's transaction.) Close the batch, so the records after this start
        the next one, and append its drafts; run again as it is when the write is tried
        again."""
        with self._lock:
            if self._open is batch:
                self._open = None
        batch.committed_by = traces.current()
        self._append(conn, batch.drafts)


@contextmanager
def expected_call(
    expected: ExpectedCall | None, to_come: RecordsToCome | None = None
) -> Iterator[None]:
    """Inside: `expected` is the call a context copied here carries (`under_way` takes it
    up on the thread that runs it); `to_come`: where its record is left when it joins
    another's batch, for an event loop to wait on (`RecordsToCome.committed`)."""
    token, deferred = _EXPECTED.set(expected), _DEFERRED.set(to_come)
    try:
        yield
    finally:
        _DEFERRED.reset(deferred)
        _EXPECTED.reset(token)


def _said(exc: BaseException) -> str:
    """What the other records of a failed batch hear: the store's own words (which never
    hold an event's details), else the kind of failure."""
    if isinstance(exc, VaultError):
        return f"the call's audit record was not written: {exc.message}"
    return f"the call's audit record was not written ({type(exc).__name__})"
