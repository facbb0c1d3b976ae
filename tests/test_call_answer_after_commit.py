"""A call is answered only once its record is committed, also when its record joins a batch
another call's thread is committing: its own thread does not wait for that commit (it is
free at once), the event loop does before it answers (`RecordsToCome`), and a batch that
fails answers each of its calls with the error instead. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from test_call_audit import draft
from test_http import Server, running_server
from test_mcp_endpoint import mcp_over_http
from test_tool_calls_transports import BOTH, CALLING, TOOL_DIST, call, configure
from toolkit_vault.access.principals import create_token
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.core.vault import Vault
from toolkit_vault.store.call_records import RecordsToCome, expected_call

SESSION = "s-answers"
CALLS = 6


@pytest.fixture
def server(vault: Vault, tool_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    with running_server(tool_env, tmp_path / "serve.log") as base:
        yield Server(base, vault)


@pytest.fixture
def tool_env(cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "PYTHONPATH": os.pathsep.join([str(TOOL_DIST), cli_env["PYTHONPATH"]])}


def test_calls_side_by_side_are_answered_only_once_their_batch_commits(
    server: Server, vault: Vault
) -> None:
    """While this process holds the store's write lock, the server's first call cannot
    commit its record and the others join its batch: none is answered until the lock is
    let go; then every one is, each on the chain."""
    with server.socket(server.token("agent", "caller")) as ws:

        def receive() -> dict[str, Any]:
            message = dict(json.loads(ws.recv(timeout=30)))
            while message["type"] == "toolkit/status/event":
                message = dict(json.loads(ws.recv(timeout=30)))
            return message

        def ask(message: dict[str, Any]) -> dict[str, Any]:
            ws.send(json.dumps(message))
            return receive()

        assert ask(BOTH)["type"] == "handshake/resp"
        assert ask(configure("calling", CALLING))["status"] == "ok"
        assert ask(call("w", "calling", "echo", text="warm"))["type"] == "tool/call/resp"
        with vault.store.write() as held:  # the chain's write lock (BEGIN IMMEDIATE, advisory)
            if held.dialect.name == "postgresql":
                held.execute(text("LOCK TABLE call_records IN EXCLUSIVE MODE"))
            for i in range(CALLS):
                ws.send(json.dumps(call(f"e{i}", "calling", "echo", text=str(i))))
            with pytest.raises(TimeoutError):
                ws.recv(timeout=2.0)  # nothing answered while no record can commit
        answers = {m["req_id"]: m for m in (receive() for _ in range(CALLS))}
    assert {a["type"] for a in answers.values()} == {"tool/call/resp"}, answers
    assert sorted(answers) == [f"e{i}" for i in range(CALLS)]
    events = list_events(vault.store, EventFilter(actions=("tool_called",))).events
    assert [e.details["outcome"] for e in events] == ["ok"] * (CALLS + 1)


def test_a_record_left_in_a_failed_batch_answers_its_loop_with_the_failure(
    vault: Vault,
) -> None:
    """In process: the first record's batch cannot commit (an audit device refuses); a
    record that joined it returns at once on its thread, and its loop hears of the
    failure, not of a commit."""
    store = vault.store
    store.create_session(SESSION, create_token(store, "agent", "alice")[0])
    gate = threading.Event()

    def refusing(events: Sequence[Mapping[str, Any]]) -> None:
        gate.wait(10)
        raise OSError("audit device gone")

    store.audit_sink = refusing
    told: list[Any] = []

    def lead(i: int) -> None:
        try:
            store.record_call(draft(vault, SESSION, {"i": i}))
        except Exception as exc:
            told.append(str(exc))

    leaders = [threading.Thread(target=lead, args=(i,)) for i in range(2)]
    for leader in leaders:  # the first batch's write held at the device; the second's
        leader.start()  # first record waiting for its turn, its batch open
        time.sleep(0.3)
    to_come = RecordsToCome()
    started = time.monotonic()
    with expected_call(None, to_come):
        store.record_call(draft(vault, SESSION, {"i": 2}))  # joins, and does not wait
    assert time.monotonic() - started < 5 and len(to_come.batches) == 1

    async def heard() -> str | None:
        waiting = asyncio.ensure_future(to_come.committed())
        await asyncio.sleep(0.2)
        assert not waiting.done()  # not before the batch is settled
        gate.set()
        return await asyncio.wait_for(waiting, 10)

    said = asyncio.run(heard())
    for leader in leaders:
        leader.join(10)
    assert said == "the call's audit record was not written (OSError)"
    assert told == [said, said]
    store.audit_sink = None
    assert list_events(store, EventFilter(actions=("tool_called",))).events == []


def test_mcp_calls_side_by_side_are_answered_only_once_their_batch_commits(
    server: Server, vault: Vault
) -> None:
    """`/mcp` `tools/call`, several at once, while this process holds the store's write
    lock: none is answered until it is let go; then every one is, each on the chain."""
    token = server.token("agent", "mcp-caller")
    with server.socket(token) as ws:  # the principal's own config, which MCP sessions use
        ws.send(json.dumps(BOTH))
        assert json.loads(ws.recv(timeout=30))["type"] == "handshake/resp"
        ws.send(json.dumps({**configure("calling", CALLING), "scope": "principal"}))
        assert json.loads(ws.recv(timeout=30))["status"] == "ok"
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with vault.store.write() as held:
            if held.dialect.name == "postgresql":
                held.execute(text("LOCK TABLE call_records IN EXCLUSIVE MODE"))
            holding.set()
            release.wait(30)

    async def run() -> list[Any]:
        async with mcp_over_http(server.base, token) as session:
            warm = await session.call_tool("calling__echo", {"text": "warm"})
            assert not warm.is_error, warm
            holder = threading.Thread(target=hold)
            holder.start()
            try:
                assert await asyncio.to_thread(holding.wait, 10)
                calls = [
                    asyncio.ensure_future(session.call_tool("calling__echo", {"text": str(i)}))
                    for i in range(CALLS)
                ]
                done, _ = await asyncio.wait(calls, timeout=2.0)
                assert not done, "answered before the calls' records could be committed"
            finally:
                release.set()
                await asyncio.to_thread(holder.join, 30)
            return list(await asyncio.gather(*calls))

    results = asyncio.run(run())
    assert [r.is_error for r in results] == [False] * CALLS, results
    events = list_events(vault.store, EventFilter(actions=("tool_called",))).events
    assert [e.details["outcome"] for e in events] == ["ok"] * (CALLS + 1)
