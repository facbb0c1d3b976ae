"""stdio: `tool/call` through the vault to an imported local (stdio) MCP server, against the
official `mcp` SDK client calling the same server directly, in the same run.

The server is our test server (tests/mcp_servers/api_key_server.py, its no-op tool
`noop`), imported from a client-config entry and configured for the agent's principal, so
the sixteen sessions calling it share one process, run in the sandbox. The vault's calls
go in process through `A2EConnection.handle_raw` (parse, scope, arguments checked against
the server's own schema, the engine's thread, the MCP session, the result searched for
the scope's secrets, the audit record), sixteen at once from sixteen threads; the SDK's
are sixteen tasks on one `ClientSession` over the SDK's own `stdio_client`, the server
started without a sandbox. Both report calls a second and the p50 latency at sixteen in
flight, and the p50 of one call at a time (the vault's overhead: its p50 less the SDK's).
The SDK's client here shakes hands with `initialize`; the vault negotiates as the SDK's own
`mcp.Client` does (`server/discover` first), so it speaks the newest revision, whose
requests each carry the client's envelope for the server to take apart: the SDK's rate at
that revision is logged beside it (`sdk_discover_calls_s`), the target judged as before.
The ceiling has a line of its own (unjudged): the vault's own session with the server
(the `UpstreamSession` its calls go through, on its loop), called by sixteen tasks there
with nothing else of the vault's (no checks, no record, no thread): how much of the
target's budget the server at that revision and the SDK leave for the vault.
Cold start: launch to first answer, a new session's configure and first call (the
configure's check launches the server in the sandbox, handshakes and lists its tools; the
version is stored and that process becomes its server, which the call reaches) against the
SDK starting the server, initializing and calling once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.toolkits.imports import import_package
from toolkit_vault.toolkits.registry import ToolkitRegistry
from toolkit_vault.toolkits.served import upstream_host

from .harness import AGENT, Context, Result, median, open_bench_vault

__all__ = ["run"]

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "mcp_servers" / "api_key_server.py"
SITE = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p, "mcp").is_dir())
NAME = "api-key-test"
KEY = "sk-bench-stdio-5c1f2a9e7b"
CONCURRENCY = 16
CALLS = {"full": 4_000, "quick": 1_600, "tiny": 160}
COLD = {"full": 7, "quick": 5, "tiny": 2}
RATIO_TARGET, OVERHEAD_TARGET_MS = 0.7, 3.0
CALL = json.dumps(
    {"type": "tool/call/req", "toolkit_name": NAME, "tool_name": "noop", "arguments": {}}
).encode()


def run(ctx: Context) -> list[Result]:
    results: list[Result] = []
    for database in ctx.databases:
        results += _measure(ctx, database)
    return results


def _client_config() -> bytes:
    entry = {
        "command": "/usr/bin/python3",
        "args": [str(SERVER)],
        "env": {"API_KEY": "your-key-here", "PYTHONPATH": str(SITE)},
    }
    return json.dumps({"mcpServers": {NAME: entry}}).encode()


def _servers_environment() -> None:
    """Where the servers' private directories go, and what they may read (the SDK's
    site-packages, our test server): read by `open_vault`. Lifted call limits: sixteen
    callers of one principal are the load, not a misbehaving agent."""
    private = Path(tempfile.mkdtemp(prefix="tkv-bench-servers-", dir="/tmp"))
    os.chmod(private, 0o711)  # noqa: S103 (the sandbox's user passes through, as root)
    os.environ["TOOLKIT_VAULT_SERVERS_DIR"] = str(private)
    os.environ["TOOLKIT_VAULT_SERVER_BINDS"] = f"{SITE}:{SERVER.parent}"
    os.environ["TOOLKIT_VAULT_CALL_RATE"] = "off"
    os.environ["TOOLKIT_VAULT_CALL_CONCURRENCY"] = "off"


def _call(conn: A2EConnection) -> None:
    reply: dict[str, Any] = json.loads(conn.handle_raw(CALL)[0])
    if reply.get("type") != "tool/call/resp" or reply.get("is_error"):
        raise RuntimeError(f"the call was refused: {reply.get('details') or reply}")


def _session(vault: Any) -> A2EConnection:
    conn = connect(vault, AGENT)
    conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits","tools"]}')
    return conn


def _configure(conn: A2EConnection, scope: str) -> None:
    message = {
        "type": "toolkit/configure/req",
        "toolkit_name": NAME,
        "config": {"api_key": KEY, "pythonpath": str(SITE)},
        "scope": scope,
    }
    reply = json.loads(conn.handle_raw(json.dumps(message))[0])
    if reply.get("status") != "ok":
        raise RuntimeError(f"configure failed: {reply}")


def _concurrently(work: list[Callable[[], None]], calls: int) -> tuple[float, list[float]]:
    """`calls` calls spread over one thread per `work`; (calls a second, latencies ms)."""
    each = calls // len(work)
    latencies: list[list[float]] = [[] for _ in work]
    start = threading.Barrier(len(work) + 1)

    def loop(index: int) -> None:
        start.wait()
        for _ in range(each):
            began = time.perf_counter()
            work[index]()
            latencies[index].append((time.perf_counter() - began) * 1000)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(work))]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - began
    return each * len(work) / took, [ms for part in latencies for ms in part]


async def _sdk_load(calls: int, discover: bool = False) -> tuple[float, list[float], list[float]]:
    """The SDK's client at `initialize`'s revision (the target's baseline), or with
    `discover` at the newest (`server/discover`), the revision the vault negotiates, as the
    SDK's own `mcp.Client` does: its server does more a request there."""
    params = StdioServerParameters(
        command="/usr/bin/python3",
        args=[str(SERVER)],
        env={"API_KEY": KEY, "PYTHONPATH": str(SITE), "PATH": "/usr/bin:/bin"},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await (session.discover() if discover else session.initialize())
        for _ in range(20):
            await session.call_tool("noop", {})
        one: list[float] = []
        for _ in range(calls // 4):
            began = time.perf_counter()
            await session.call_tool("noop", {})
            one.append((time.perf_counter() - began) * 1000)
        each = calls // CONCURRENCY
        latencies: list[float] = []

        async def loop() -> None:
            for _ in range(each):
                began = time.perf_counter()
                result = await session.call_tool("noop", {})
                latencies.append((time.perf_counter() - began) * 1000)
                if result.is_error:
                    raise RuntimeError("the SDK's call failed")

        began = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
        return each * CONCURRENCY / (time.perf_counter() - began), latencies, one


def _session_alone(vault: Any, session_id: str, calls: int) -> float:
    """Calls a second of the session's server through the vault's own MCP session alone:
    sixteen tasks on the upstream loop, as the SDK's baseline calls, with none of the
    vault's work around a call. Reached through the instance's private `_held` (a
    benchmark's look inside, not an API)."""
    process = vault.instances.instance(session_id, NAME)._held()
    handle = process.enter()
    each = calls // CONCURRENCY

    async def load() -> float:
        async def loop() -> None:
            for _ in range(each):
                await handle.session.call_tool("noop", {})

        began = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
        return each * CONCURRENCY / (time.perf_counter() - began)

    try:
        return upstream_host().run(load(), 300)
    finally:
        process.leave()


async def _sdk_cold() -> float:
    params = StdioServerParameters(
        command="/usr/bin/python3",
        args=[str(SERVER)],
        env={"API_KEY": KEY, "PYTHONPATH": str(SITE), "PATH": "/usr/bin:/bin"},
    )
    began = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("noop", {})
        return (time.perf_counter() - began) * 1000


def _measure(ctx: Context, database: str) -> list[Result]:
    directory = ctx.work / f"stdio-{database}"
    calls = CALLS.get(ctx.scale.name, 1_600)
    _servers_environment()
    with ctx.database(database, directory) as url:
        vault = open_bench_vault(directory / "home", url, ToolkitRegistry.default())
        try:
            import_package(vault.store, vault.registry, _client_config(), "local")
            first = _session(vault)
            _configure(first, "principal")
            sessions = [first, *(_session(vault) for _ in range(CONCURRENCY - 1))]
            for conn in sessions:
                for _ in range(5):  # warm: the server started, every session's instance made
                    _call(conn)
            ours_one = []
            for _ in range(calls // 4):
                began = time.perf_counter()
                _call(first)
                ours_one.append((time.perf_counter() - began) * 1000)
            ours_rate, ours_ms = _concurrently([lambda c=c: _call(c) for c in sessions], calls)
            assert first.plugin is not None
            alone_rate = _session_alone(vault, first.plugin.session_id, calls)
            theirs_rate, theirs_ms, theirs_one = asyncio.run(_sdk_load(calls))
            same_revision_rate = asyncio.run(_sdk_load(calls, discover=True))[0]
            cold_ours, cold_theirs = [], []
            for _ in range(COLD.get(ctx.scale.name, 5)):
                conn = _session(vault)
                began = time.perf_counter()
                _configure(conn, "session")  # its check launches the session's own server
                _call(conn)  # ... which answers (the checked process, taken over)
                cold_ours.append((time.perf_counter() - began) * 1000)
                cold_theirs.append(asyncio.run(_sdk_cold()))
        finally:
            vault.instances.drop(lambda *_: True)
            vault.store.close()
    overhead = median(ours_one) - median(theirs_one)  # what the vault adds to one call
    alone_ratio = alone_rate / theirs_rate if theirs_rate else float("inf")
    ratio = ours_rate / theirs_rate if theirs_rate else float("inf")
    extra = {
        "ours_p50_ms": median(ours_one),
        "sdk_p50_ms": median(theirs_one),
        "p50_overhead_ms": overhead,
        "ours_p50_ms_16_in_flight": median(ours_ms),
        "sdk_p50_ms_16_in_flight": median(theirs_ms),
        "sdk_discover_calls_s": same_revision_rate,  # at the vault's revision
        "ratio_same_revision": ours_rate / same_revision_rate if same_revision_rate else None,
        "session_alone_calls_s": alone_rate,  # the ceiling: the vault's session, nothing else
        "ratio_session_alone": alone_ratio,
        "calls": calls,
        "concurrency": CONCURRENCY,
    }
    ctx.log(f"stdio {database}: {json.dumps(extra)}")
    return [
        Result(
            "stdio",
            database,
            f"tool/call to a local stdio server, {CONCURRENCY} in flight",
            "calls/s",
            ours_rate,
            "the mcp SDK client calling it directly",
            theirs_rate,
            ratio,
            f">= {RATIO_TARGET:g}x, p50 overhead <= {OVERHEAD_TARGET_MS:g} ms",
            ratio >= RATIO_TARGET and overhead <= OVERHEAD_TARGET_MS,
            extra,
        ),
        Result(
            "stdio",
            database,
            f"the ceiling: the vault's MCP session alone, {CONCURRENCY} tasks",
            "calls/s",
            alone_rate,
            "the mcp SDK client calling it directly",
            theirs_rate,
            alone_ratio,
            "",
            None,
        ),
        Result(
            "stdio",
            database,
            "cold start: launch to first answer",
            "ms",
            median(cold_ours),
            "the mcp SDK client starting it (no sandbox)",
            median(cold_theirs),
            median(cold_ours) / median(cold_theirs) if cold_theirs else float("inf"),
            "",
            None,
            {"ours_ms": cold_ours, "sdk_ms": cold_theirs},
        ),
    ]
