"""What the MCP client takes from a `tools/call` answer (mcp_client/results.py) and how a
call is handed to its loop and back (mcp_client/host.py, stdio.py), against a server
written by hand (tests/mcp_servers/odd_results_server.py): a result whose structured
content its tool's output schema refuses is no result, as the SDK's `call_tool` had it;
an error result is not held to the schema; a line over the bound ends the session.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from pathlib import Path

import pytest

from mcp_support import our_server, unconfined
from toolkit_vault.mcp_client import StdioServer, UpstreamFailed, UpstreamHandle, UpstreamHost

CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


@pytest.fixture
def odd(host: UpstreamHost, tmp_path: Path) -> UpstreamHandle:
    launch = unconfined(our_server("odd_results_server.py"), {}, tmp_path)
    server = StdioServer(label="odd", launch=launch, redact=lambda text: text)
    return host.open(server, timeout=30)


@pytest.fixture
def modern(host: UpstreamHost, tmp_path: Path) -> UpstreamHandle:
    launch = unconfined(our_server("odd_results_server.py", "--modern"), {}, tmp_path)
    server = StdioServer(label="odd", launch=launch, redact=lambda text: text)
    return host.open(server, timeout=30)


def _call(handle: UpstreamHandle, name: str, seconds: float = 20) -> dict:  # type: ignore[type-arg]
    return handle.call_tool(name, {}, deadline=time.monotonic() + seconds)


def test_a_result_its_output_schema_accepts_is_taken(odd: UpstreamHandle) -> None:
    assert odd.session.protocol_version == "2025-11-25"
    result = _call(odd, "fits")
    assert result["structuredContent"] == {"n": 1}
    assert result["content"] == [{"type": "text", "text": "1"}]
    assert result["isError"] is False


def test_structured_content_its_output_schema_refuses_is_no_result(odd: UpstreamHandle) -> None:
    with pytest.raises(UpstreamFailed, match="fails its schema"):
        _call(odd, "mismatch")
    with pytest.raises(UpstreamFailed, match="lacks its structured content"):
        _call(odd, "missing")
    with pytest.raises(UpstreamFailed, match="output schema cannot be used"):
        _call(odd, "bad_schema")
    assert _call(odd, "fits")["structuredContent"] == {"n": 1}  # the session lives on


def test_an_output_schemas_pattern_runs_in_linear_time(odd: UpstreamHandle) -> None:
    """The output schema is the server's text and is checked on the loop thread every
    upstream session shares: `^(a+)+$` against 27 a's and a "!" takes seconds on Python's
    `re` (jsonschema's, the SDK's), microseconds on the vault's compiler (RE2)."""
    started = time.monotonic()
    with pytest.raises(UpstreamFailed, match="fails its schema"):
        _call(odd, "backtracks")
    assert time.monotonic() - started < 1.5
    assert _call(odd, "fits")["structuredContent"] == {"n": 1}


def test_on_2026_07_28_a_result_asking_for_input_is_no_result(modern: UpstreamHandle) -> None:
    assert modern.session.protocol_version == "2026-07-28"
    with pytest.raises(UpstreamFailed, match="asked for input"):
        _call(modern, "asks_for_input")
    with pytest.raises(UpstreamFailed, match="fails its schema"):
        _call(modern, "mismatch")
    result = _call(modern, "fits")
    assert (result["structuredContent"], result["isError"]) == ({"n": 1}, False)


def test_an_answer_that_is_no_tool_result_fails_without_its_text(
    odd: UpstreamHandle, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(UpstreamFailed, match="not a tool result") as raised:
        _call(odd, "not_a_result")
    assert "sk-odd-canary" not in str(raised.value) + caplog.text
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_an_error_result_is_not_held_to_the_output_schema(odd: UpstreamHandle) -> None:
    result = _call(odd, "failing")
    assert result["isError"] is True
    assert "structuredContent" not in result


def test_a_line_over_the_bound_ends_the_session(odd: UpstreamHandle) -> None:
    began = time.monotonic()
    with pytest.raises(UpstreamFailed):
        _call(odd, "huge_line", seconds=10)
    assert time.monotonic() - began < 8
    with pytest.raises(UpstreamFailed):
        _call(odd, "fits")


def test_calls_from_many_threads_at_once_are_each_answered(odd: UpstreamHandle) -> None:
    failures: list[BaseException] = []

    def caller() -> None:
        try:
            for _ in range(25):
                assert _call(odd, "fits")["structuredContent"] == {"n": 1}
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures


def test_coroutines_handed_over_together_run_each_in_its_callers_context(
    host: UpstreamHost,
) -> None:
    """The loop takes what waits in one go; each coroutine still runs in a copy of its own
    caller's context (a call's trace context is its caller's span, never another's)."""
    held, release = threading.Event(), threading.Event()

    async def hold() -> None:
        held.set()
        release.wait(10)  # the loop is stopped here while the others are handed over

    async def seen() -> str:
        await asyncio.sleep(0)
        return CALLER.get()

    first = host.submit(hold())
    assert held.wait(10)
    futures: dict[str, object] = {}

    def caller(name: str) -> None:
        CALLER.set(name)
        futures[name] = host.submit(seen())

    threads = [threading.Thread(target=caller, args=(f"caller-{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    release.set()
    first.result(10)
    assert {name: future.result(10) for name, future in futures.items()} == {  # type: ignore[attr-defined]
        name: name for name in futures
    }


def test_a_future_cancelled_before_the_loop_took_it_never_runs(host: UpstreamHost) -> None:
    held, release, ran = threading.Event(), threading.Event(), threading.Event()

    async def hold() -> None:
        held.set()
        release.wait(10)

    async def runs() -> None:
        ran.set()

    first = host.submit(hold())
    assert held.wait(10)
    future = host.submit(runs())
    assert future.cancel()
    release.set()
    first.result(10)
    host.run(asyncio.sleep(0.05), 5)
    assert not ran.is_set()


def test_a_future_cancelled_while_its_coroutine_runs_cancels_it(host: UpstreamHost) -> None:
    started, stopped = threading.Event(), threading.Event()

    async def waits() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise

    future = host.submit(waits())
    assert started.wait(10)
    assert future.cancel()
    assert stopped.wait(5)
