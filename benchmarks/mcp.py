"""mcp: the vault as an MCP server. `tools/call` of the bench toolkit's no-op tool through
`serve`'s `/mcp` (bearer check, the session's A2E connection, the call engine, the audit
record) at 16 concurrent clients, against a plain `mcp` SDK server's no-op tool
(`mcp_noop`, the SDK's `MCPServer` on uvicorn) on the same machine, in the same run; and
`tools/list` of 200 toolkits' tools at p99, in process (the SDK's in-memory client).

Both HTTP sides are driven by the official Python SDK client (16 sessions on one event
loop in this process), so the client's own cost is in both figures alike.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import httpx
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from toolkit_vault.access.principals import authenticate, create_token
from toolkit_vault.transports.mcp.server import vault_mcp_server
from toolkit_vault.transports.mcp.sessions import McpSessions

from .harness import Context, Result, open_bench_vault
from .network import _serving
from .servers import ROOT, _env, _process
from .toolkit import bench_config, bench_registry

__all__ = ["run"]

CLIENTS = 16
SECONDS = {"full": 10.0, "quick": 4.0, "tiny": 1.0}
LISTS = {"full": 2_000, "quick": 500, "tiny": 50}
TOOLS = 200
CALL_RATIO_TARGET = 0.5
LIST_P99_TARGET_MS = 20.0


def run(ctx: Context) -> list[Result]:
    results = []
    for database in ctx.databases:
        results.append(_calls(ctx, database))
        results.append(_lists(ctx, database))
    return results


async def _drive(url: str, tokens: list[str], tool: str, seconds: float) -> int:
    """Calls answered by `CLIENTS` sessions calling `tool` back to back for `seconds`."""
    done = 0
    stop = time.monotonic() + seconds

    async def one(token: str | None) -> None:
        nonlocal done
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        http = create_mcp_http_client(headers=headers)
        async with (
            http,
            streamable_http_client(url, http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            await session.call_tool(tool, {})  # warm
            while time.monotonic() < stop:
                result = await session.call_tool(tool, {})
                if result.is_error:
                    raise RuntimeError(f"the call failed: {result.content}")
                done += 1

    clients = [tokens[n % len(tokens)] if tokens else None for n in range(CLIENTS)]
    await asyncio.gather(*(one(token) for token in clients))
    return done


def _configure_for_principals(base: str, tokens: list[str]) -> None:
    with httpx.Client(base_url=base, timeout=30) as client:
        for n, token in enumerate(tokens):
            auth = {"Authorization": f"Bearer {token}"}
            hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
            session = client.post("/a2e", json=hello, headers=auth).json()["session_id"]
            configure = {
                "type": "toolkit/configure/req",
                "toolkit_name": "bench",
                "config": bench_config(n),
                "scope": "principal",
            }
            answer = client.post("/a2e", json=configure, headers=auth | {"A2E-Session": session})
            if answer.json().get("status") != "ok":
                raise RuntimeError(f"configure failed: {answer.text}")


def _calls(ctx: Context, database: str) -> Result:
    seconds = SECONDS.get(ctx.scale.name, 4.0)
    with _serving(ctx, database, "mcp", source=ROOT / "service") as setup:
        _configure_for_principals(setup.server.base, setup.tokens)
        url = setup.server.base + "/mcp"
        ours = asyncio.run(_drive(url, setup.tokens, "bench__call_api", seconds)) / seconds
    env = _env({"PYTHONPATH": str(ROOT)})
    argv = [sys.executable, "-m", "benchmarks.mcp_noop"]
    with _process(argv, env, ctx.work / "mcp-noop.log") as plain:
        theirs = asyncio.run(_drive(plain.base + "/mcp", [], "call_api", seconds)) / seconds
    ratio = ours / theirs if theirs else 0.0
    return Result(
        "mcp",
        database,
        f"tools/call of a no-op tool through /mcp, {CLIENTS} clients",
        "calls/s",
        ours,
        "a plain mcp SDK server's no-op tool",
        theirs,
        ratio,
        f">= {CALL_RATIO_TARGET:g}x",
        ratio >= CALL_RATIO_TARGET,
        {"seconds": seconds, "clients": CLIENTS},
    )


def _lists(ctx: Context, database: str) -> Result:
    directory = ctx.work / f"mcp-list-{database}"
    lists = LISTS.get(ctx.scale.name, 500)
    with ctx.database(database, directory) as url:
        vault = open_bench_vault(directory / "home", url, bench_registry(TOOLS))
        try:
            principal = authenticate(vault.store, create_token(vault.store, "agent", "lister")[1])
            assert principal is not None
            sessions = McpSessions(vault)
            server = vault_mcp_server(sessions, lambda _ctx: (principal, "bench"), TOOLS + 1)
            timings = asyncio.run(_list_timings(Client(server), lists))
        finally:
            vault.store.close()
    timings.sort()
    p99 = timings[int(len(timings) * 0.99) - 1]
    p50 = timings[len(timings) // 2]
    return Result(
        "mcp",
        database,
        f"tools/list of {TOOLS} tools (p99, in process)",
        "ms",
        p99,
        "p50",
        p50,
        p99 / p50 if p50 else float("inf"),
        f"< {LIST_P99_TARGET_MS:g} ms",
        p99 < LIST_P99_TARGET_MS,
        {"lists": lists},
    )


async def _list_timings(client: Any, lists: int) -> list[float]:
    timings = []
    async with client:
        for _ in range(20):
            await client.list_tools()
        for _ in range(lists):
            started = time.perf_counter()
            listed = await client.list_tools()
            timings.append((time.perf_counter() - started) * 1000)
            if len(listed.tools) != TOOLS:
                raise RuntimeError(f"listed {len(listed.tools)} tools, not {TOOLS}")
    return timings
