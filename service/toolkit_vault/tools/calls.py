"""One call of a live instance's tool, whatever asked for it (A2E or MCP): its arguments
checked before the tool sees them, the tool run off the caller's thread under a deadline
and a cancel switch, and its result bounded and searched for the scope's secrets before
anyone sees it.

The order is the protection: arguments are checked against the tool's input schema (the
same compiled validator, depth and value bounds as configs) and a size bound before the
tool runs; a result is bounded and then withheld whole if it carries a secret of the
calling scope (`withhold`). The caller's answer never waits on a tool that does not end:
a deadline passed or a cancel answers at once, and the tool is told (`CallContext`) but
cannot be stopped; its thread is the pool's until it returns.

What a tool's own failure says is an `is_error` result: the message of a `VaultError` it
raises (searched like any result), otherwise only the exception's type.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from toolkit_vault.canonical import canonical_json
from toolkit_vault.errors import ConfigInvalid, VaultError
from toolkit_vault.plugin import (
    CallContext,
    PluginAnswerRefused,
    Progress,
    ToolResult,
    as_tool_result,
)
from toolkit_vault.protocol import MAX_MESSAGE_BYTES
from toolkit_vault.schema import CompiledSchema
from toolkit_vault.toolkits.server_processes import ServerRefused
from toolkit_vault.tools.refusals import CallOutcome, CallRefused
from toolkit_vault.tools.withhold import Withholder

__all__ = [
    "DEADLINES_ENV",
    "DEADLINE_ENV",
    "CallEngine",
    "CallLimits",
    "CallRecord",
    "Cancellation",
    "checked_arguments",
]

DEADLINE_ENV = "TOOLKIT_VAULT_TOOL_DEADLINE"  # seconds, every toolkit
DEADLINES_ENV = "TOOLKIT_VAULT_TOOL_DEADLINES"  # "name=seconds,name=seconds": per toolkit
DEFAULT_DEADLINE = 30.0
MAX_DEADLINE = 3600.0
# Arguments come in one message; a result goes out in one, beside its envelope.
MAX_ARGUMENT_BYTES = MAX_MESSAGE_BYTES // 2
MAX_RESULT_BYTES = MAX_MESSAGE_BYTES - 16 * 1024
TOOL_THREADS = 64  # tools running at once in this process; the rest wait their turn
NOT_A_RESULT = "the tool did not answer with a tool result"
CALL_ENDS = "call"  # `Cancellation.end`: the call's own thread answers it
WAITER_ENDS = "waiter"  # ... an event loop's waiter does (`timeout`, `cancelled`)
log = logging.getLogger(__name__)
_ENDS = threading.Lock()
# `json.dumps(..., ensure_ascii=False, separators=(",", ":"), allow_nan=False)`, its
# encoder made once rather than at every call's result
_RESULT_TEXT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def _seconds(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where} must be a number of seconds") from None
    if not 0 < value <= MAX_DEADLINE:
        raise ValueError(f"{where} must be more than 0 and at most {MAX_DEADLINE:g} seconds")
    return value


@dataclass(frozen=True)
class CallLimits:
    """How long a call may run (every toolkit's `deadline`, or its own in `deadlines`) and
    how large its arguments and result may be. An operator's settings, read once at
    start-up (`from_environment`); a bad one stops the start."""

    deadline: float = DEFAULT_DEADLINE
    deadlines: Mapping[str, float] = field(default_factory=dict)
    argument_bytes: int = MAX_ARGUMENT_BYTES
    result_bytes: int = MAX_RESULT_BYTES

    def __post_init__(self) -> None:
        for name, seconds in [("deadline", self.deadline), *self.deadlines.items()]:
            if not 0 < seconds <= MAX_DEADLINE:
                raise ValueError(f"the deadline of {name} is out of range")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> CallLimits:
        deadline = (
            _seconds(environ[DEADLINE_ENV], DEADLINE_ENV)
            if environ.get(DEADLINE_ENV)
            else DEFAULT_DEADLINE
        )
        deadlines: dict[str, float] = {}
        for entry in (environ.get(DEADLINES_ENV) or "").split(","):
            if not entry.strip():
                continue
            name, equals, seconds = entry.partition("=")
            if not equals or not name.strip():
                raise ValueError(f"{DEADLINES_ENV} entries are name=seconds")
            deadlines[name.strip()] = _seconds(seconds.strip(), f"{DEADLINES_ENV} {name.strip()}")
        return cls(deadline, deadlines)

    def deadline_of(self, toolkit_name: str) -> float:
        return self.deadlines.get(toolkit_name, self.deadline)


class Cancellation:
    """One call's cancel switch, held by everyone who may end it: its connection
    (`tool/cancel/req`, or the connection closing) and its live instance's entry (a purge,
    a reconfigure, an expiry, a removal). Cancelling tells the tool and wakes the caller.

    Where a call runs whole on a tool thread while an event loop waits for it (`run_here`),
    either may answer it: the call's thread with its outcome, or the waiter with `timeout`
    or `cancelled` at once. `end` says which, once: the one that answers records the call,
    the other neither records nor answers. `slot` gives back the call's place in its
    instance (`limits`), so a call the waiter answered frees it at once, as one whose
    caller stopped waiting does."""

    __slots__ = ("_ended", "_wake", "context", "slot", "woken")

    def __init__(self, progress: Progress | None = None) -> None:
        self.context = CallContext(deadline=0.0, progress=progress)
        self._wake = threading.Event()
        self._ended: str | None = None
        self.woken: Callable[[], None] | None = None  # an event loop's waiter, told at a cancel
        self.slot: Callable[[], None] | None = None  # gives the instance's slot back, once

    def cancel(self) -> None:
        self.context.cancelled.set()
        self._wake.set()
        woken = self.woken
        if woken is not None:
            woken()

    @property
    def cancelled(self) -> bool:
        return self.context.cancelled.is_set()

    def end(self, by: str) -> bool:
        """Whether `by` answers (and records) the call: the first to ask does."""
        with _ENDS:
            if self._ended is None:
                self._ended = by
            return self._ended == by


def checked_arguments(
    schema: CompiledSchema, arguments: Mapping[str, Any], limit: int = MAX_ARGUMENT_BYTES
) -> bytes:
    """The arguments' canonical JSON, once they match the tool's input schema and fit
    `limit`; else `CallRefused` naming pointers and keywords only, never a value."""
    try:
        schema.validate(arguments)
    except ConfigInvalid as exc:
        raise CallRefused(
            "invalid_arguments",
            "the arguments do not match the tool's input schema",
            details=exc.details,
        ) from None
    try:
        canonical = canonical_json(dict(arguments))
    except (ValueError, TypeError):
        raise CallRefused("invalid_arguments", "the arguments are not I-JSON") from None
    if len(canonical) > limit:
        raise CallRefused("too_large", f"the arguments are over {limit} bytes")
    return canonical


class _ToolThreads:
    """Daemon threads that run tools, started as needed up to `size`; more calls wait in
    line. Daemon, unlike `ThreadPoolExecutor`'s (which the interpreter joins at exit): a
    tool that never returns must not keep the vault from stopping."""

    def __init__(self, size: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]]
        self._jobs = queue.SimpleQueue()
        self._size, self._name = size, name
        # threads started, threads waiting for a job, jobs not yet taken: a thread counts
        # as idle until it has taken its job, so a job is in line behind a running one
        # only when every thread runs one (a job counted against a thread that was just
        # taking another waited out that one's tool)
        self._started = self._idle = self._waiting = 0
        self._lock = threading.Lock()

    def submit(self, work: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._jobs.put((future, work, args))
        with self._lock:
            self._waiting += 1
            if self._waiting <= self._idle or self._started >= self._size:
                return future
            self._started += 1
            name = f"{self._name}_{self._started}"
        threading.Thread(target=self._serve, name=name, daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            future, work, args = self._jobs.get()
            with self._lock:
                self._idle -= 1
                self._waiting -= 1
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work(*args))
                except BaseException as exc:  # handed to the waiting caller
                    future.set_exception(exc)
            del future, work, args  # an idle thread keeps nothing of a call


class CallEngine:
    """Runs tools off the caller's thread (threads of its own), under a deadline and a
    cancel switch, and checks what they answer."""

    def __init__(self, limits: CallLimits | None = None, threads: int = TOOL_THREADS) -> None:
        self.limits = limits or CallLimits()
        self._pool = _ToolThreads(threads, "toolkit-vault-tool")

    def run(
        self,
        toolkit_name: str,
        tool: Callable[[CallContext], Any],
        cancellation: Cancellation,
        withholder: Callable[[], Withholder],
    ) -> ToolResult:
        """`tool(context)`'s result, bounded and searched; `CallRefused` (`timeout`,
        `cancelled`, `too_large`, `withheld`) otherwise, at once when a deadline passes or
        the call is cancelled."""
        seconds, context = self._context(toolkit_name, cancellation)
        future = self._pool.submit(_answer, tool, context)
        _wait(future, seconds, cancellation)  # a tool left runs on: its thread is its own
        if cancellation.cancelled:
            raise CallRefused("cancelled", "the call was cancelled")
        return self.checked(future.result(), withholder)

    def run_started(
        self,
        toolkit_name: str,
        start: Callable[[CallContext], AbstractContextManager[Future[Any]]],
        cancellation: Cancellation,
        withholder: Callable[[], Withholder],
    ) -> ToolResult:
        """`run`, for a tool that only waits on an event loop (an imported server's call):
        `start(context)` hands the call to the loop and gives its future (within a context
        it keeps open while the call is waited for: its trace span), and the caller's
        thread waits for that future itself, woken as `run` is (the answer, the deadline,
        or a cancel, at once): no hand-over to a tool thread and back, two thread wake-ups
        a call. A call abandoned here is told through `context` (its session sends MCP's
        cancellation to the server)."""
        seconds, context = self._context(toolkit_name, cancellation)
        with contextlib.ExitStack() as stack:
            try:
                future = stack.enter_context(start(context))
            except Exception as exc:  # refused before it reached the loop: as a tool's failure
                return self.checked(_answer(_raising(exc), context), withholder)
            _wait(future, seconds, cancellation)  # one left is abandoned by its session
        if cancellation.cancelled or future.cancelled():  # its loop's task was cancelled
            raise CallRefused("cancelled", "the call was cancelled")
        return self.checked(_answer(lambda _: future.result(0), context), withholder)

    def _context(self, toolkit_name: str, cancellation: Cancellation) -> tuple[float, CallContext]:
        """The call's deadline in seconds and its context; refused if already cancelled."""
        seconds = self.limits.deadline_of(toolkit_name)
        context = CallContext(
            time.monotonic() + seconds,
            cancellation.context.cancelled,
            cancellation.context.progress,
        )
        if cancellation.cancelled:
            raise CallRefused("cancelled", "the call was cancelled")
        return seconds, context

    def submit(self, work: Callable[..., Any], *args: Any) -> Future[Any]:
        """`work(*args)` on one of the engine's threads (a call run whole there: `run_here`)."""
        return self._pool.submit(work, *args)

    def run_here(
        self,
        toolkit_name: str,
        tool: Callable[[CallContext], Any],
        cancellation: Cancellation,
        withholder: Callable[[], Withholder],
    ) -> ToolResult:
        """`run`, on the engine's thread the caller is on (`submit`), while an event loop
        waits for the call with its deadline and cancel switch: the tool runs here, with no
        hand-over to another thread and back. A call the waiter answered first (`end`)
        is `cancelled` here, and its tool's result is dropped unseen."""
        seconds = self.limits.deadline_of(toolkit_name)
        context = CallContext(time.monotonic() + seconds, cancellation.context.cancelled)
        if cancellation.cancelled:
            raise CallRefused("cancelled", "the call was cancelled")
        result = _answer(tool, context)
        if not cancellation.end(CALL_ENDS) or cancellation.cancelled:
            raise CallRefused("cancelled", "the call was cancelled")
        return self.checked(result, withholder)

    def checked(self, result: ToolResult, withholder: Callable[[], Withholder]) -> ToolResult:
        """The result, if it fits and carries no secret of the scope: as plain JSON (what
        is searched is what is sent; a value JSON cannot carry makes it no result)."""
        try:
            blocks = [dict(block) for block in result.content]
            structured = result.structured_content
            shown = [blocks, None if structured is None else dict(structured)]
            text = _RESULT_TEXT(shown)
        except (TypeError, ValueError):
            return ToolResult.text(NOT_A_RESULT, is_error=True)
        size = len(text) if text.isascii() else len(text.encode())  # bytes: UTF-8's
        if size > self.limits.result_bytes:
            raise CallRefused("too_large", f"the result is over {self.limits.result_bytes} bytes")
        # keys as text, tuples as lists: what the wire carries; and a copy of the tool's own,
        # which its thread could still change once searched
        plain = json.loads(text)
        if withholder().withholds_json(text, plain):
            raise CallRefused("withheld", "the result was withheld: it carried a secret")
        return ToolResult(plain[0], plain[1], bool(result.is_error))


def _answer(tool: Callable[[CallContext], Any], context: CallContext) -> ToolResult:
    """Run the tool; its own failure becomes an `is_error` result that says no more than a
    `VaultError`'s message (searched like any result) or the exception's type."""
    try:
        return as_tool_result(tool(context))
    except ServerRefused as refused:  # an imported server that cannot take it: a refusal
        raise CallRefused(refused.reason, refused.message) from None
    except PluginAnswerRefused:
        return ToolResult.text(NOT_A_RESULT, is_error=True)
    except VaultError as exc:
        return ToolResult.text(exc.message, is_error=True)
    except Exception as exc:
        log.warning("a tool failed (%s)", type(exc).__name__)
        return ToolResult.text(f"the tool failed ({type(exc).__name__})", is_error=True)


def _wait(future: Future[Any], seconds: float, cancellation: Cancellation) -> None:
    """Wait for `future`, woken at once by its answer or a cancel; a call that has not ended
    by then is told it is left (`context.cancelled`) and refused: cancelled or timed out."""
    wake = cancellation._wake
    future.add_done_callback(lambda _: wake.set())
    wake.wait(seconds)
    if not future.done():
        cancellation.context.cancelled.set()
        if wake.is_set():
            raise CallRefused("cancelled", "the call was cancelled")
        raise CallRefused("timeout", f"the tool did not answer within {seconds:g} seconds")


def _raising(exc: Exception) -> Callable[[CallContext], Any]:
    def tool(_: CallContext) -> Any:
        raise exc

    return tool


@dataclass(frozen=True)
class CallRecord:
    """What the audit keeps of one call (`tool_called`): who, where, which tool of which
    version, how it ended and how long it took, and the HMAC of its arguments; never an
    argument or result value. `fields` are the keyword arguments of the audit draft."""

    actor: str
    session_id: str
    toolkit_name: str | None  # None: a name the vault does not know (the agent's own text)
    version: int | None
    tool: str | None
    outcome: CallOutcome
    duration_ms: int
    arguments_hmac: str

    def fields(self) -> dict[str, Any]:
        return dict(self.__dict__)
