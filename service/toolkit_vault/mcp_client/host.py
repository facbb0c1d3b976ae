"""The synchronous face of the MCP client for the tool engine, whose calls run in worker
threads: one event loop thread per vault process hosting every upstream session, and
blocking methods that hand work to it (`run`) and wait, bounded.

One loop for all sessions (not a loop per session or per call) because a session's
transport and `mcp.ClientSession` are bound to the loop they started on, and a process
may hold many servers; the SDK is async, the engine is not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
import time
from collections.abc import Coroutine, Iterator, Mapping
from concurrent.futures import Future
from contextvars import Context
from functools import partial
from typing import Any, TypeVar

from toolkit_vault.telemetry import traces

from .descriptions import ToolDescription
from .errors import CallCancelled, CallTimedOut
from .results import OutputCheck
from .session import Progress, RemoteServer, StdioServer, ToolsChanged, UpstreamSession

__all__ = ["UpstreamHandle", "UpstreamHost"]

T = TypeVar("T")
_STOP_TIMEOUT = 1.0  # a session's stop: the process group is killed well within it


class UpstreamHost:
    """The loop thread. `run(coro, timeout)` runs a coroutine on it from any thread;
    `open` starts a session; `close` stops every session it opened and then the loop.
    `output_check` compiles a tool's output schema for its sessions (`OutputCheck`)."""

    def __init__(self, output_check: OutputCheck) -> None:
        self._output_check = output_check
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="mcp-upstream", daemon=True
        )
        self._thread.start()
        self._handles: set[UpstreamHandle] = set()
        self._lock = threading.Lock()
        self._handed: list[tuple[Coroutine[Any, Any, Any], Future[Any], Context]] = []
        self._handing = threading.Lock()  # guards `_handed` and `_woken`
        self._woken = False  # the loop is to take `_handed`

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """`coro` run on the loop, in a copy of the caller's context (its trace), its
        future given back at once (what `asyncio.run_coroutine_threadsafe` does;
        cancelling the future cancels the run).
        Coroutines handed over while the loop has yet to take the last ones go with them:
        one wake-up of the loop for a burst of calls from many threads, not one a call."""
        future: Future[T] = Future()
        context = contextvars.copy_context()  # each its own: a batch shares no caller's
        with self._handing:
            self._handed.append((coro, future, context))
            wake, self._woken = not self._woken, True
        if wake:
            self._loop.call_soon_threadsafe(self._take_handed)
        return future

    def _take_handed(self) -> None:
        with self._handing:
            handed, self._handed, self._woken = self._handed, [], False
        for coro, future, context in handed:
            if future.cancelled():  # by its waiter, before it ever ran
                coro.close()
                continue
            task = self._loop.create_task(_settled(coro, future), context=context)
            future.add_done_callback(partial(_cancel_if_cancelled, self._loop, task))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """Run `coro` on the loop and wait for it at most `timeout` seconds (then it is
        cancelled and `TimeoutError` raised)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("UpstreamHost.run called from its own loop thread")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError("the upstream operation did not finish in time") from None

    def open(
        self,
        server: StdioServer | RemoteServer,
        *,
        timeout: float,
        on_tools_changed: ToolsChanged | None = None,
    ) -> UpstreamHandle:
        """Start a session and list its tools within `timeout` seconds (`UpstreamError` on
        failure: nothing is left running)."""

        async def start() -> UpstreamSession:
            session = UpstreamSession(server, self._output_check, on_tools_changed)
            await session.start(timeout)
            return session

        session = self.run(start(), timeout + _STOP_TIMEOUT)
        handle = UpstreamHandle(self, session)
        with self._lock:
            self._handles.add(handle)
        return handle

    def close(self) -> None:
        """Stop every open session, then the loop."""
        with self._lock:
            handles, self._handles = list(self._handles), set()
        for handle in handles:
            handle.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_STOP_TIMEOUT)

    def _forget(self, handle: UpstreamHandle) -> None:
        with self._lock:
            self._handles.discard(handle)


class UpstreamHandle:
    """A session seen from a worker thread."""

    def __init__(self, host: UpstreamHost, session: UpstreamSession) -> None:
        self._host = host
        self.session = session

    @property
    def tools(self) -> tuple[ToolDescription, ...]:
        return self.session.tools

    @property
    def pid(self) -> int | None:
        return self.session.pid

    @property
    def state(self) -> str:
        return self.session.state

    def list_tools(self, timeout: float) -> tuple[ToolDescription, ...]:
        return self._host.run(self.session.list_tools(), timeout)

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        deadline: float,
        cancel: threading.Event | None = None,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """`UpstreamSession.call_tool` from a worker thread; `cancel` is the engine's flag
        (a `threading.Event`): once set, the call is abandoned with MCP cancellation;
        `progress` hears the server's progress notifications (on the host's thread)."""
        with self.started_call(
            name, arguments, deadline=deadline, cancel=cancel, progress=progress
        ) as future:
            return self._wait(future, deadline)

    @contextlib.contextmanager
    def started_call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        deadline: float,
        cancel: threading.Event | None = None,
        progress: Progress | None = None,
    ) -> Iterator[Future[dict[str, Any]]]:
        """The call handed to the loop, its future given to wait for (`call_tool`, or the
        engine's caller itself: `CallEngine.run_started`), within an `mcp.upstream` span
        whose W3C context the request carries in `_meta` (MCP's `traceparent`: the
        server's own spans become its children). The session ends the call at its
        deadline or once `cancel` is set (its watcher looks at the flag), so a waiter
        neither polls nor wakes before the answer."""
        with traces.span("mcp.upstream", toolkit=self.session.server.label, tool=name):
            meta = dict(traces.inject({}))
            call = self.session.call_tool(
                name, arguments, deadline=deadline, cancel=cancel, progress=progress, meta=meta
            )
            yield self._host.submit(call)

    def _wait(self, future: Future[dict[str, Any]], deadline: float) -> dict[str, Any]:
        """The call's answer, waited for once: a moment past the deadline at most, should
        the loop itself be stuck."""
        label = self.session.server.label
        try:
            return future.result(max(0.0, deadline - time.monotonic()) + _STOP_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise CallTimedOut(f"{label}: the call ran past its deadline") from None
        except concurrent.futures.CancelledError:
            raise CallCancelled(f"{label}: the call was cancelled") from None

    def close(self) -> None:
        """Stop the session (a local server's process group is killed within a second)."""
        self._host._forget(self)
        with contextlib.suppress(TimeoutError):
            self._host.run(self.session.close(), _STOP_TIMEOUT + 0.5)


async def _settled(coro: Coroutine[Any, Any, T], future: Future[T]) -> None:
    """Run `coro` and give its outcome to `future` from within the task (one step less
    than chaining the task's own future to it). A future cancelled by its waiter meanwhile
    takes nothing."""
    try:
        result = await coro
    except asyncio.CancelledError:
        future.cancel()
        raise
    except BaseException as exc:
        if future.set_running_or_notify_cancel():
            future.set_exception(exc)
        if not isinstance(exc, Exception):
            raise
    else:
        if future.set_running_or_notify_cancel():
            future.set_result(result)


def _cancel_if_cancelled(
    loop: asyncio.AbstractEventLoop, task: asyncio.Task[None], future: Future[Any]
) -> None:
    """A future its waiter cancelled cancels its task (on the loop's thread)."""
    if future.cancelled():
        loop.call_soon_threadsafe(task.cancel)
