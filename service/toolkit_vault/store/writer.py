"""SQLite's writes, committed in groups, one group at a time.

SQLite takes one writer at a time, and every commit costs an fsync. So every write of the
process queues here, in order, and one thread at a time writes them: it takes the writers'
lock (which `Store.write` holds too), then every write queued by then, runs each under a
savepoint of its own in one transaction (`Store._commit_group`) and commits them with one
fsync. Each still stands or falls alone: a failed one is rolled back to its savepoint, then
tried again in the next group if it lost a race (`Store._again`), or settled with its
error; it sees the writes before it (the audit chain runs on) and is settled only after the
commit; if the commit fails, so does every write of the group.

A caller waits for its write (`Write.wait`), or leaves it (inside `deferring`, a write
given something to do once it is committed, `then`): the caller is on its way at once and
hears of the outcome through `Write.when_settled`. A transport on an event loop answers so,
and no worker thread of its sits out a commit (threads waiting on commits, woken one by one,
cost the server more CPU a configure than the writes do). A left write is written by the
store's writer thread, which starts with the first one and ends after `IDLE_S` without
work; a caller that waits and finds no group being written writes its own group on its own
thread (a hand-over to another thread slowed a sequential writer, a CLI command or stdio).
`then` runs before anyone hears, so what a write makes live is live when its answer leaves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.telemetry import traces

__all__ = ["IDLE_S", "Write", "Writer", "deferring"]

IDLE_S = 2.0
BUSY = "the database refused the write (busy)"

log = logging.getLogger(__name__)
_LEFT: ContextVar[list[Write] | None] = ContextVar("left_writes", default=None)
_CALLBACKS = threading.Lock()  # guards every write's `_callbacks` (held for a list swap)


@contextmanager
def deferring(enabled: bool = True) -> Iterator[list[Write]]:
    """Inside: a write given a `then` may be left to commit (`Writer.submit`); the list
    holds those left, for the caller to wait on."""
    left: list[Write] = []
    token = _LEFT.set(left if enabled else None)
    try:
        yield left
    finally:
        _LEFT.reset(token)


class Write:
    """One write: its work (run in the group's transaction), what runs once it is
    committed, and how it ended (`result` or `error`), told once it is settled. `key`: what
    the work appends to, when it is an append whose state its group may read ahead."""

    __slots__ = ("_callbacks", "_settled", "error", "key", "result", "then", "tries", "work")

    def __init__(
        self,
        work: Callable[[Any], Any],
        then: Callable[[Any], None] | None,
        key: tuple[str, str] | None = None,
    ) -> None:
        self.work, self.then, self.key = work, then, key
        self.tries = 0
        self.result: Any = None
        self.error: BaseException | None = None
        self._settled = threading.Lock()
        self._settled.acquire()  # released once settled: `wait`
        self._callbacks: list[Callable[[], object]] | None = []  # None once settled

    @property
    def settled(self) -> bool:
        return self._callbacks is None

    def wait(self) -> Any:
        """Block until settled; the result, or raise the error."""
        with self._settled:
            pass
        if self.error is not None:
            raise self.error
        return self.result

    def when_settled(self, callback: Callable[[], object]) -> None:
        """`callback()` once settled (at once if it is), on the thread that settles it."""
        with _CALLBACKS:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        callback()

    def settle(self) -> None:
        with _CALLBACKS:
            callbacks, self._callbacks = self._callbacks or [], None
        self._settled.release()
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # the writer thread goes on: others wait on it
                log.error("unexpected %s telling a write's caller", type(exc).__name__)


class Writer:
    """The writer thread of one store and its queue (see the module's docstring).

    `commit(group)` runs a group in one transaction, setting each write's `result` or
    `error`; `again(write)` says whether a failed write is tried again (else its `error` is
    final); `lock` is the store's writers' lock, taken within `busy_s()` seconds or the
    group is refused as busy."""

    def __init__(
        self,
        commit: Callable[[list[Write]], None],
        again: Callable[[Write], bool],
        lock: threading.RLock,
        busy_s: Callable[[], float],
    ) -> None:
        self._commit, self._again, self._lock, self._busy_s = commit, again, lock, busy_s
        self.queue: list[Write] = []
        self._ready = threading.Condition(threading.Lock())
        self._thread: threading.Thread | None = None
        self._leader: int | None = None  # the thread committing a group, while it does

    def is_writer_thread(self) -> bool:
        """Whether this is the store's writer thread (committing a group, or telling the
        callers of one: a wait here for a write still queued would wait for itself)."""
        return threading.current_thread() is self._thread

    def on_writer_thread(self) -> bool:
        """Whether this thread is committing a group (a write it makes runs directly)."""
        return self._leader == threading.get_ident()

    def submit(
        self,
        work: Callable[[Any], Any],
        then: Callable[[Any], None] | None = None,
        key: tuple[str, str] | None = None,
    ) -> Any:
        """Queue `work`; wait for it and return its result, or, with `then` inside
        `deferring`, leave it there (added to that list) and return None. A caller that
        waits and finds no group being written writes its own (with whatever queued) on
        its own thread: one sequential writer (a CLI command, stdio) pays no hand-over."""
        left = _LEFT.get() if then is not None else None
        write = Write(work, then if left is not None else None, key)
        with self._ready:
            self.queue.append(write)
        led = left is None and self._lock.acquire(blocking=False)
        if led:
            self._lead()  # its `storage.write` span is this thread's, in the caller's trace
        else:
            self._wake()
        if left is not None:
            left.append(write)
            return None
        if led:
            result = write.wait()
        else:  # written on another thread: the caller's trace shows the wait for it
            with traces.span("storage.write"):
                result = write.wait()
        if then is not None:
            then(result)
        return result

    def _wake(self) -> None:
        with self._ready:
            if self._thread is None or not self._thread.is_alive():  # (not in a fork's child)
                self._thread = threading.Thread(
                    target=self._run, name="toolkit-vault-writer", daemon=True
                )
                self._thread.start()
            else:
                self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                if not self.queue and not self._ready.wait_for(lambda: self.queue, IDLE_S):
                    self._thread = None
                    return
            if not self._lock.acquire(timeout=self._busy_s()):
                with self._ready:
                    group, self.queue = self.queue, []
                for write in group:
                    write.error = StoreError(BUSY)
                self._settle(group)
                continue
            self._lead()

    def _lead(self) -> None:
        """(Writers' lock held, released here.) Commit all that queued until the lock was
        taken, as one group; try again those that lost a race; settle the others."""
        try:
            with self._ready:
                group, self.queue = self.queue, []
            self._leader = threading.get_ident()
            if group:
                self._commit(group)  # never raises: a group that fails fails each write
        finally:
            self._leader = None
            self._lock.release()
        again = [w for w in group if w.error is not None and self._again(w)]
        if again:
            with self._ready:
                self.queue[:0] = again
            self._wake()
        self._settle([w for w in group if w not in again] if again else group)

    @staticmethod
    def _settle(writes: list[Write]) -> None:
        for write in writes:
            if write.error is None and write.then is not None:
                try:
                    write.then(write.result)
                except VaultError as exc:  # refused on purpose (`PrincipalEnded`): told, not logged
                    write.error = exc
                except Exception as exc:  # committed, but not made live: its caller hears
                    log.error("unexpected %s once a write was committed", type(exc).__name__)
                    write.error = exc
            write.settle()
