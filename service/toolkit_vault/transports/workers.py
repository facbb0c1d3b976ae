"""The server's worker threads: where the event loop sends the service's blocking calls.

`loop.run_in_executor` builds a `concurrent.futures.Future` (a condition and a lock), an
asyncio future chained to it, and a work item per call, and each hand-over costs the GIL
that much more. Here a call is one queue put and one `call_soon_threadsafe` back, a
cheaper hop than through `ThreadPoolExecutor` (what it saves a request: BENCHMARKS.md).
The threads start on first use and end once the pool is collected.
They are daemon threads, as no one joins them: uvicorn's graceful shutdown waits for the
requests that await them, and a write cut short by the process ending is one transaction
the database rolls back.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

from toolkit_vault.store.writer import Write

__all__ = ["Workers"]

T = TypeVar("T")
_Job = tuple[
    asyncio.AbstractEventLoop,
    "asyncio.Future[Any]",
    contextvars.Context,
    Callable[..., Any],
    tuple[Any, ...],
    bool,
]


class HasWrites(Protocol):
    writes: list[Write]


R = TypeVar("R", bound=HasWrites)


class Workers:
    def __init__(self, size: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._size, self._name = size, name
        self._started = False
        self._lock = threading.Lock()
        weakref.finalize(self, _stop, self._jobs, size)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` in a worker thread, in a copy of the caller's context (the
        request id reaches the worker's log lines); its result or its exception."""
        result: T = await self._submit(work, args, False)
        return result

    async def run_settled(self, work: Callable[..., R], *args: Any) -> R:
        """`run`, for work that leaves writes committing (`result.writes`, see `writer`):
        its result once each of them is settled too. The worker hands its result back only
        then, from the thread that settles the last write: one wake of the event loop a
        request, not one for the result and one more for the writes."""
        result: R = await self._submit(work, args, True)
        return result

    def _submit(
        self, work: Callable[..., Any], args: tuple[Any, ...], writes: bool
    ) -> asyncio.Future[Any]:
        if not self._started:
            self._start()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((loop, done, contextvars.copy_context(), work, args, writes))
        return done

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            for n in range(self._size):
                name = f"{self._name}_{n}"
                threading.Thread(target=_serve, args=(self._jobs,), name=name, daemon=True).start()
            self._started = True


def _serve(jobs: queue.SimpleQueue[_Job | None]) -> None:
    while (job := jobs.get()) is not None:
        _run(*job)
        del job  # an idle thread keeps nothing of a request (its body may hold secrets)


def _run(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    context: contextvars.Context,
    work: Callable[..., Any],
    args: tuple[Any, ...],
    writes: bool,
) -> None:
    try:
        result = context.run(work, *args)
    except BaseException as exc:  # the awaiting request gets it, as from any await
        _settle(loop, done, None, exc)
        return
    _when_all_settled(result.writes if writes else [], partial(_settle, loop, done, result, None))


def _when_all_settled(writes: list[Write], then: Callable[[], None], start: int = 0) -> None:
    """`then()` once every write of `writes` is settled, on the thread that settles the
    last (here, if all are)."""
    for n in range(start, len(writes)):
        if not writes[n].settled:
            writes[n].when_settled(partial(_when_all_settled, writes, then, n + 1))
            return
    then()


def _settle(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if done.cancelled():
            return  # the request went away; its work is done all the same
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits
        loop.call_soon_threadsafe(settle)


def _stop(jobs: queue.SimpleQueue[_Job | None], size: int) -> None:
    for _ in range(size):
        jobs.put(None)
