"""call-replicas: do tool calls' audit records add up over `serve` replicas? (PostgreSQL)

Every call is answered only once its `tool_called` record is committed. When those records
went to the one audit chain, each batch held the chain's lock through its commit, so a
second replica added almost nothing. Now each process writes a call chain of its own
(`store.call_chains`). Two real `toolkit-vault serve` processes share one vault home and one
scratch PostgreSQL database (16 agent tokens, the bench toolkit configured for each); `wrk
-t1` drives `tool/call/req` of the no-op tool over HTTP at 16 connections, first on one
replica alone (the other idle), then on both at once, alternating, each run as long as the
`http` scenario's. The figure is records committed per second, counted in `call_records`
(each call's record, not the load generator's count), two replicas against one, the median
of the runs. On this machine both replicas, the load generators and PostgreSQL share two
cores: a ratio under 2 there can be CPU rather than a lock; the `calls_cpu` extra says how
much CPU the servers used per record in each case. SQLite takes one writer per file, so
its replicas cannot add up, and it is not measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text

from .harness import Context, Result
from .loadgen import Load, run_wrk
from .network import _sessions
from .servers import ROOT, Running, cpu_seconds, vault_server
from .toolkit import install_entry_point

__all__ = ["run"]

CALL = '{"type":"tool/call/req","toolkit_name":"bench","tool_name":"call_api","arguments":{}}'
CONNECTIONS = 16
SERVICE = ROOT / "service"
Drive = Callable[[float, bool], tuple[float, float]]
BEFORE = "TOOLKIT_VAULT_BENCH_CALLS_BEFORE"  # a commit to measure the same way, for contrast


def run(ctx: Context) -> list[Result]:
    if "postgres" not in ctx.databases:
        ctx.log("call-replicas: PostgreSQL only (SQLite takes one writer per file)")
        return []
    builds = [("this build", SERVICE, "call-replicas")]
    before = os.environ.get(BEFORE)
    if before:  # the same measure of an earlier build, in the same run, runs interleaved
        source = _checkout(before, ctx.work / "call-replicas-before")
        builds.append((f"build {before[:10]}", source, "calls-before"))
    with contextlib.ExitStack() as stack:
        pairs = [(build, stack.enter_context(_pair(ctx, src, name))) for build, src, name in builds]
        measured: dict[str, dict[str, list[float]]] = {
            build: {"one": [], "two": [], "cpu_one": [], "cpu_two": []} for build, _ in pairs
        }
        for _, pair in pairs:
            pair(2, False)  # warm both replicas: their instances built, their chains begun
        for n in range(max(ctx.scale.http_repeats, 2)):
            for build, pair in pairs:
                ctx.log(f"call-replicas: {build}, run {n + 1}, one replica then two")
                for case, both in (("one", False), ("two", True)):
                    rate, per = pair(ctx.scale.http_seconds, both)
                    measured[build][case].append(rate)
                    measured[build][f"cpu_{case}"].append(per * 1000)
    return [_result(build, measured[build], ctx.scale.http_seconds) for build, _ in pairs]


def _checkout(rev: str, into: Path) -> Path:
    """`service/` and `migrations/` of commit `rev` of this repository, extracted under
    `into`; the path of its `service/`."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "service", "migrations"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "service"


def _result(build: str, measured: dict[str, list[float]], seconds: float) -> Result:
    one, two = statistics.median(measured["one"]), statistics.median(measured["two"])
    extra: dict[str, Any] = {
        "one_replica_records_per_s": measured["one"],
        "two_replicas_records_per_s": measured["two"],
        "server_cpu_ms_per_record": {
            "one": statistics.median(measured["cpu_one"]),
            "two": statistics.median(measured["cpu_two"]),
        },
        "connections_per_replica": CONNECTIONS,
        "seconds": seconds,
    }
    return Result(
        "call-replicas",
        "postgres",
        f"tool calls' records, 2 serve replicas vs 1, {CONNECTIONS} conns each (HTTP), {build}",
        "records/s",
        two,
        "one replica",
        one,
        two / one if one else float("inf"),
        "> 1.5x",
        two / one > 1.5 if one else None,
        extra,
    )


def _tokens_of(source: Path, home: Path, url: str) -> list[str]:
    """The home made and its agent tokens created by `source`'s build (`network._tokens`),
    in a process of its own, so the database is at that build's schema."""
    script = (
        "import json, sys; from pathlib import Path; from benchmarks.network import _tokens; "
        "print(json.dumps(_tokens(Path(sys.argv[1]), sys.argv[2])))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(source), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", script, str(home), url],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    tokens: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return tokens


@contextlib.contextmanager
def _pair(
    ctx: Context, source: Path, name: str
) -> Iterator[Callable[[float, bool], tuple[float, float]]]:
    """Two `serve` replicas of `source`'s build on one scratch database; yields `drive(secs,
    both)`: records committed per second while one replica (or both) is driven, and the
    servers' CPU seconds per record."""
    directory = ctx.work / name
    plugins = install_entry_point(ctx.work / "call-replicas-plugins")
    with ctx.database("postgres", directory) as url, contextlib.ExitStack() as stack:
        home = directory / "home"
        tokens = _tokens_of(source, home, url)
        starting = [
            vault_server(home, url, plugins, directory / f"serve-{n}.log", source=source)
            for n in "ab"
        ]
        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(server.__enter__) for server in starting]
            wait(futures)
        for server, future in zip(starting, futures, strict=True):
            if future.exception() is None:
                stack.push(server)
        servers = [future.result() for future in futures]
        sessions = _sessions(servers[0], tokens)
        engine = create_engine(url)
        stack.callback(engine.dispose)
        count = (  # every call's record, wherever its build keeps them
            "SELECT count(*) FROM call_records"
            if "call_records" in inspect(engine).get_table_names()
            else "SELECT count(*) FROM audit_events WHERE action = 'tool_called'"
        )

        def committed() -> int:
            with engine.connect() as conn:
                return int(conn.execute(text(count)).scalar_one())

        def drive(secs: float, both: bool) -> tuple[float, float]:
            on = servers if both else servers[:1]
            before, cpu = committed(), sum(cpu_seconds(s.pid) for s in servers)
            loads: list[Load] = []
            lock = threading.Lock()

            def one(server: Running) -> None:
                load = run_wrk(server.port, tokens, sessions, CALL, CONNECTIONS, secs, directory)
                with lock:
                    loads.append(load)

            threads = [threading.Thread(target=one, args=(s,)) for s in on]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            records = committed() - before
            used = sum(cpu_seconds(s.pid) for s in servers) - cpu
            return records / max(load.seconds for load in loads), used / max(records, 1)

        yield drive
