"""A tool call answered on an event loop: the call runs whole on one of the engine's
threads (its checks, the tool, the search of its result, its audit record), and the loop
only waits, with the call's deadline and cancel switch.

A worker thread that handed the tool to the engine's thread and waited for it made three
hand-overs a call (the loop to the worker, the worker to the tool's thread and back), each
a wake under the GIL; this makes one and one back. The waiter still answers at once when
the deadline passes or the call is cancelled (`tool/cancel/req`, the connection closing, a
purge): it takes the call's end first (`Cancellation.end`), tells the tool, gives back the
call's slot, and answers once the call's record is committed (on a worker: the loop never
waits on a write). When the call's thread took the end first (its tool had returned), its
answer is the one, and the waiter waits for it.

A call whose record joins a batch another call's thread is committing leaves it there and
its thread is free (`RecordsToCome`); the loop waits for that commit before it answers,
and answers an error instead when the batch failed: still answered only once recorded,
with one hop to the loop a batch instead of a wake of each waiting thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Future

from toolkit_vault.protocol import ErrorMessage, ToolCallRequest, dump_message
from toolkit_vault.store.call_records import ExpectedCall, RecordsToCome, expected_call
from toolkit_vault.tools.calls import WAITER_ENDS, CallEngine, Cancellation
from toolkit_vault.tools.refusals import CallRefused
from toolkit_vault.transports.workers import Workers

__all__ = ["answer_call", "record_failed"]

End = Callable[[CallRefused, float], str]  # record a refusal (and when the call began), answer


async def answer_call(
    engine: CallEngine,
    lane: Workers,
    call: Callable[[], str],
    cancellation: Cancellation,
    seconds: float,
    end: End,
    expected: ExpectedCall | None = None,
    failed: Callable[[str], str] | None = None,
) -> str:
    """`call()`'s answer (JSON), run on one of `engine`'s threads; or, once `seconds` pass
    or `cancellation` is cancelled first, `end`'s (run on `lane`). `expected`: the call's
    record, to come (`Store.expect_call`), carried to that thread and ended here. `failed`
    (the answer of a call whose record was not written, given why): the call's thread
    leaves its record in another's batch without waiting for its commit, and this waits
    for it on the loop before answering."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    waiter = _Waiter(loop)
    cancellation.woken = waiter.wake_threadsafe
    if cancellation.cancelled:
        waiter.wake()
    timer = loop.call_later(seconds, waiter.wake)
    to_come = None if failed is None else RecordsToCome()
    with expected_call(expected, to_come):  # and the request id reaches the call's logs
        context = contextvars.copy_context()
    engine.submit(context.run, call).add_done_callback(waiter.answered_threadsafe)
    try:
        await waiter.woken
        if waiter.answer is None:
            if cancellation.end(WAITER_ENDS):
                refusal = (
                    CallRefused("cancelled", "the call was cancelled")
                    if cancellation.cancelled
                    else CallRefused(
                        "timeout", f"the tool did not answer within {seconds:g} seconds"
                    )
                )
                cancellation.context.cancelled.set()  # the tool is told; its thread is its own
                if cancellation.slot is not None:
                    cancellation.slot()
                return await lane.run(end, refusal, started)
            while waiter.answer is None:  # the call's thread answers it: its record is on
                waiter.woken = loop.create_future()
                await waiter.woken
        answer = waiter.answer.result()
        if to_come is not None and failed is not None:
            not_written = await to_come.committed()  # answered only once recorded
            if not_written is not None:
                return failed(not_written)
        return answer
    finally:
        timer.cancel()
        cancellation.woken = None
        if expected is not None:
            expected.end()


def record_failed(request: ToolCallRequest, why: str) -> str:
    """The answer of a call whose record was not written (`why`: the store's words), as
    the call's thread would have answered it had it waited for the commit."""
    return dump_message(
        ErrorMessage(req_id=request.id, code="RUNTIME_ERROR", message=why, details=[])
    )


class _Waiter:
    """What woke the loop's wait for a call: its answer, a cancel, or its deadline."""

    __slots__ = ("answer", "loop", "woken")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.woken: asyncio.Future[None] = loop.create_future()
        self.answer: Future[str] | None = None

    def wake(self) -> None:
        if not self.woken.done():
            self.woken.set_result(None)

    def _answered(self, answer: Future[str]) -> None:
        self.answer = answer
        self.wake()

    def answered_threadsafe(self, answer: Future[str]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one waits
            self.loop.call_soon_threadsafe(self._answered, answer)

    def wake_threadsafe(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.wake)
