"""calls: what the vault adds to one tool call, in process. `tool/call/req` of the bench
toolkit's no-op tool through `A2EConnection.handle_raw` (parse, scope, arguments checked,
the tool run on the engine's thread, result bounded and searched, answer serialized, the
call's audit record, committed before the answer), against calling the same live
instance's `call_tool` directly, measured in the same run, interleaved; each figure the
median of single calls, one at a time, so each waits for a durable commit of its own
(what one costs on the disk then is in the result's extras). The target holds on SQLite;
on PostgreSQL a process with no commit notices (no `serve`) reads the store before each
call, as before each list, and that round trip is the figure.
"""

from __future__ import annotations

import json
import time
from typing import Any

from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.plugin import CallContext
from toolkit_vault.tools.limits import CallAdmission

from .harness import AGENT, Context, Result, median, open_bench_vault
from .network import _durable_commit_ms
from .toolkit import bench_config, bench_registry

__all__ = ["run"]

CALL = b'{"type":"tool/call/req","toolkit_name":"bench","tool_name":"call_api","arguments":{}}'
CALLS = {"full": 5_000, "quick": 1_000, "tiny": 50}
TARGET_MS = 1.0


def run(ctx: Context) -> list[Result]:
    return [_measure(ctx, database) for database in ctx.databases]


def _through_the_vault(conn: A2EConnection) -> None:
    reply: dict[str, Any] = json.loads(conn.handle_raw(CALL)[0])
    if reply["type"] != "tool/call/resp":
        raise RuntimeError(f"the call was refused: {reply}")


def _measure(ctx: Context, database: str) -> Result:
    directory = ctx.work / f"calls-{database}"
    calls = CALLS.get(ctx.scale.name, 1_000)
    with ctx.database(database, directory) as url:
        vault = open_bench_vault(directory / "home", url, bench_registry(1))
        # one agent makes every call, back to back: its rate limit out of the way, as
        # `servers.vault_server` lifts it for the network cases
        vault.call_limits = CallAdmission(rate=None, concurrency=None)
        try:
            conn = connect(vault, AGENT)
            conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits","tools"]}')
            configure = {"type": "toolkit/configure/req", "toolkit_name": "bench"}
            conn.handle_raw(json.dumps({**configure, "config": bench_config(0)}))
            (instance,) = vault.instances.active().values()
            tool = instance.call_tool  # type: ignore[attr-defined]

            def direct() -> None:
                tool("call_api", {}, CallContext(time.monotonic() + 30))

            ours: list[float] = []
            theirs: list[float] = []
            cpu = {id(ours): 0.0, id(theirs): 0.0}
            for _ in range(20):  # warm
                _through_the_vault(conn)
            for _ in range(calls):
                for work, into in ((direct, theirs), (lambda: _through_the_vault(conn), ours)):
                    started, used = time.perf_counter(), time.process_time()
                    work()
                    into.append((time.perf_counter() - started) * 1000)
                    cpu[id(into)] += time.process_time() - used
        finally:
            vault.store.close()
    cpu_ms = (cpu[id(ours)] / calls * 1000, cpu[id(theirs)] / calls * 1000)
    ours_ms, direct_ms = median(ours), median(theirs)
    overhead = ours_ms - direct_ms
    return Result(
        "calls",
        database,
        "no-op tool, in process, overhead per call (p50)",
        "ms/call",
        overhead,
        "calling the tool directly",
        direct_ms,
        ours_ms / direct_ms if direct_ms else float("inf"),
        f"<= {TARGET_MS:g} ms" if database == "sqlite" else "",
        overhead <= TARGET_MS if database == "sqlite" else None,
        {
            "ours_p50_ms": ours_ms,
            "direct_p50_ms": direct_ms,
            "calls": calls,
            # the process's CPU a call (every thread's: the tool's and the writer's too), less
            # swayed by a loaded machine than the wall times above
            "ours_cpu_ms": cpu_ms[0],
            "direct_cpu_ms": cpu_ms[1],
            # each call waits for its audit record's commit: what one costs on this disk now
            "durable_commit_ms": _durable_commit_ms(directory) if database == "sqlite" else None,
        },
    )
