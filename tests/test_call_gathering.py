"""A batch of call records gathers the calls under way (`call_records`): its first record
waits, at most `GATHER_S`, for the records of the calls that began and are not in their
tool, so calls at once share a commit even where a commit is fast; a lone call waits for
nothing, a call in a slow tool is not waited for, and a call that ends without a record
(its waiter answered) stops being waited for. Every record is still committed before its
caller hears back. On SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from test_call_audit import draft
from toolkit_vault.access.principals import create_token
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.core.vault import Vault
from toolkit_vault.store import call_records
from toolkit_vault.store.call_records import ExpectedCall
from toolkit_vault.telemetry import traces

SESSION = "s-gather"
LONG_S = 30.0  # a gathering bound no test may reach: a test that waits it out has failed


class Commits:
    """The audit sink: each call-chain commit's records."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, events: Sequence[Mapping[str, Any]]) -> None:
        if any("chain" in e for e in events):
            self.batches.append([e["seq"] for e in events])


@pytest.fixture
def calls(vault: Vault, monkeypatch: pytest.MonkeyPatch) -> Commits:
    monkeypatch.setattr(call_records, "GATHER_S", LONG_S)
    vault.store.create_session(SESSION, create_token(vault.store, "agent", "alice")[0])
    commits = Commits()
    vault.store.audit_sink = commits
    return commits


def _call(vault: Vault, expected: ExpectedCall | None, i: int, told: list[Any]) -> None:
    """One call's thread: under way (as the engine's thread is), then its record."""
    try:
        with call_records.expected_call(expected), vault.store.call_under_way():
            vault.store.record_call(draft(vault, SESSION, {"i": i}))
        told.append(i)
    except Exception as exc:  # pragma: no cover - told below
        told.append(exc)


def test_a_lone_call_waits_for_nothing(vault: Vault, calls: Commits) -> None:
    started = time.monotonic()
    _call(vault, None, 0, told := [])
    assert told == [0] and calls.batches == [[1]]
    assert time.monotonic() - started < LONG_S / 3


def test_the_calls_under_way_share_the_first_ones_commit(vault: Vault, calls: Commits) -> None:
    store = vault.store
    ahead = [store.expect_call() for _ in range(3)]  # begun on a transport's loop
    told: list[Any] = []
    first = threading.Thread(target=_call, args=(vault, ahead[0], 0, told))
    first.start()
    time.sleep(0.3)
    assert told == []  # waiting for the two others: nothing committed yet
    second = threading.Thread(target=_call, args=(vault, ahead[1], 1, told))
    second.start()
    time.sleep(0.3)
    assert told == []
    ahead[2].end()  # answered by its waiter: no record to come
    for thread in (first, second):
        thread.join(LONG_S / 3)
    assert sorted(told) == [0, 1]
    assert calls.batches == [[1, 2]]  # one commit for both, then each heard
    page = list_events(store, EventFilter(actions=("tool_called",)))
    assert len(page.events) == 2


def test_a_call_in_its_tool_is_not_waited_for(vault: Vault, calls: Commits) -> None:
    store = vault.store
    in_tool, release = threading.Event(), threading.Event()

    def slow_call() -> None:
        with store.call_under_way(), store.call_in_tool():
            in_tool.set()
            release.wait(LONG_S)

    slow = threading.Thread(target=slow_call)
    slow.start()
    assert in_tool.wait(10)
    started = time.monotonic()
    _call(vault, None, 0, told := [])
    assert told == [0] and time.monotonic() - started < LONG_S / 3
    release.set()
    slow.join(10)


def test_the_wait_is_bounded(vault: Vault, calls: Commits, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_records, "GATHER_S", 0.2)
    stuck = vault.store.expect_call()  # a call that never records nor ends (yet)
    started = time.monotonic()
    worker = threading.Thread(target=_call, args=(vault, None, 0, told := []), daemon=True)
    worker.start()
    try:
        worker.join(LONG_S / 3)
        assert told == [0] and time.monotonic() - started >= 0.2
    finally:
        stuck.end()


def test_a_call_that_ends_without_a_record_is_no_longer_waited_for(
    vault: Vault, calls: Commits
) -> None:
    store = vault.store
    with pytest.raises(RuntimeError), store.call_under_way():
        raise RuntimeError("the call failed before its record")
    ahead = store.expect_call()
    with call_records.expected_call(ahead), store.call_under_way():
        pass  # its waiter answered: the call's thread records nothing
    ahead.end()
    started = time.monotonic()
    _call(vault, None, 0, told := [])
    assert told == [0] and time.monotonic() - started < LONG_S / 3


def test_a_record_another_calls_batch_carries_is_traced_in_its_own_call(
    vault: Vault, calls: Commits
) -> None:
    exporter = InMemorySpanExporter()
    assert traces.configure_tracing(exporter)
    try:
        ahead = [vault.store.expect_call() for _ in range(2)]  # each waits for the other
        told: list[Any] = []

        def traced(i: int) -> None:
            with traces.span("tool_call", tool=f"t{i}"):
                _call(vault, ahead[i], i, told)

        threads = [threading.Thread(target=traced, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(LONG_S / 3)
        spans = exporter.get_finished_spans()
    finally:
        traces.stop_tracing()
    assert sorted(told) == [0, 1] and calls.batches == [[1, 2]]  # one batch: one joined
    writes = {s.context.span_id: s for s in spans if s.name == "storage.write"}
    joined = []
    for call in (s for s in spans if s.name == "tool_call"):
        beneath = [
            w for w in writes.values() if w.parent and w.parent.span_id == call.context.span_id
        ]
        assert beneath, call.attributes  # every call's trace shows its record's write
        joined += [w for w in beneath if (w.attributes or {}).get("storage.batch") == "joined"]
    (join,) = joined
    (link,) = join.links  # to the write that committed the batch, in the other call's trace
    committed = writes[link.context.span_id]
    assert committed.context.trace_id != join.context.trace_id
    assert not (committed.attributes or {}).get("storage.batch")
