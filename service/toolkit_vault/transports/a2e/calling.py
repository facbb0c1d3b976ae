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
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable
from concurrent.futures import Future

from toolkit_vault.store.call_records import ExpectedCall, expected_call
from toolkit_vault.tools.calls import WAITER_ENDS, CallEngine, Cancellation
from toolkit_vault.tools.refusals import CallRefused
from toolkit_vault.transports.workers import Workers

__all__ = ["answer_call"]

End = Callable[[CallRefused, float], str]  # record a refusal (and when the call began), answer


async def answer_call(
    engine: CallEngine,
    lane: Workers,
    call: Callable[[], str],
    cancellation: Cancellation,
    seconds: float,
    end: End,
    expected: ExpectedCall | None = None,
) -> str:
    """`call()`'s answer (JSON), run on one of `engine`'s threads; or, once `seconds` pass
    or `cancellation` is cancelled first, `end`'s (run on `lane`). `expected`: the call's
    record, to come (`Store.expect_call`), carried to that thread and ended here."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    waiter = _Waiter(loop)
    cancellation.woken = waiter.wake_threadsafe
    if cancellation.cancelled:
        waiter.wake()
    timer = loop.call_later(seconds, waiter.wake)
    with expected_call(expected):  # and the request id reaches the call's log lines
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
        return waiter.answer.result()
    finally:
        timer.cancel()
        cancellation.woken = None
        if expected is not None:
            expected.end()


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
