"""call-replicas: do tool calls' audit records add up over `serve` replicas? (PostgreSQL)

Every call is answered only once its `tool_called` record is committed. When those records
went to the one audit chain, each batch held the chain's lock through its commit, so a
second replica added almost nothing. Now each process writes a call chain of its own
(`store.call_chains`). Two real `toolkit-vault serve` processes share one vault home and one
scratch PostgreSQL database (16 agent tokens, the bench toolkit configured for each); `wrk
-t1` drives `tool/call/req` of the no-op tool over HTTP at 16 connections, first on one
replica alone (the other idle), then on both at once, alternating, each run as long as the
`http` scenario's. The figure is records committed per second, counted in the database
(each call's record, not the load generator's count), two replicas against one, the median
of the runs. On this machine both replicas, the load generators and PostgreSQL share two
cores, so the HTTP figure is bounded by CPU as much as by any lock (the extra
`server_cpu_ms_per_record` says how much the servers spent). The direct case takes HTTP
away: one process (or two) of the same build, each with 16 threads calling
`Store.record_call` (each waiting for its record's commit, as a call does), for as long.
With `TOOLKIT_VAULT_BENCH_CALLS_BEFORE=REV` an earlier build (its `service/` and
`migrations/` from git) is measured the same way in the same run, its runs interleaved
with this build's: before call chains, its records went to the main chain. SQLite takes
one writer per file, so its replicas cannot add up, and it is not measured.
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
from dataclasses import dataclass
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
THREADS = 16  # callers per process in the direct case
# The direct case: a process of `source`'s build that opens the vault, waits for the start
# time, then records calls from THREADS threads (each waiting for its record's commit, as a
# call does) until the end time, and prints how many it recorded.
_RECORDER = """
import sys, threading, time
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.settings import load_settings
from toolkit_vault.tools.call_audit import tool_called_draft
seconds, threads = float(sys.argv[1]), int(sys.argv[2])
vault = open_vault(load_settings())
draft = tool_called_draft(actor="p-bench", session_id="s-bench", toolkit_name="bench",
    version=1, tool="call_api", outcome="ok", duration_ms=0.1, arguments_hmac="0" * 64)
vault.store.record_call(draft)
counts = [0] * threads
print("ready", flush=True)
sys.stdin.readline()
end = time.monotonic() + seconds
def calls(n):
    while time.monotonic() < end:
        vault.store.record_call(draft)
        counts[n] += 1
workers = [threading.Thread(target=calls, args=(n,)) for n in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
print(sum(counts), flush=True)
vault.store.close()
"""
BEFORE = "TOOLKIT_VAULT_BENCH_CALLS_BEFORE"  # a commit to measure the same way, for contrast


@dataclass(frozen=True)
class Pair:
    drive: Drive  # (secs, both) -> records/s over HTTP, servers' CPU seconds per record
    record: Callable[[float, bool], float]  # (secs, both) -> records/s, direct


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
            build: {
                **{"one": [], "two": [], "cpu_one": [], "cpu_two": []},
                **{"direct_one": [], "direct_two": []},
            }
            for build, _ in pairs
        }
        for _, pair in pairs:
            pair.drive(2, False)  # warm both replicas: their instances built, chains begun
        for n in range(max(ctx.scale.http_repeats, 2)):
            for build, pair in pairs:
                ctx.log(f"call-replicas: {build}, run {n + 1}, one replica then two")
                for case, both in (("one", False), ("two", True)):
                    rate, per = pair.drive(ctx.scale.http_seconds, both)
                    measured[build][case].append(rate)
                    measured[build][f"cpu_{case}"].append(per * 1000)
                    rate = pair.record(ctx.scale.http_seconds, both)
                    measured[build][f"direct_{case}"].append(rate)
    results = []
    for build, _ in pairs:
        results += _results(build, measured[build], ctx.scale.http_seconds)
        ctx.log(f"call-replicas, {build}: {json.dumps(measured[build])}")
    return results


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


def _results(build: str, measured: dict[str, list[float]], seconds: float) -> list[Result]:
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
    alone = statistics.median(measured["direct_one"])
    side_by_side = statistics.median(measured["direct_two"])
    direct: dict[str, Any] = {
        "one_process_records_per_s": measured["direct_one"],
        "two_processes_records_per_s": measured["direct_two"],
        "threads_per_process": THREADS,
        "seconds": seconds,
    }
    return [
        Result(
            "call-replicas",
            "postgres",
            f"calls' records, 2 serve replicas vs 1, {CONNECTIONS} HTTP conns each, {build}",
            "records/s",
            two,
            "one replica",
            one,
            two / one if one else float("inf"),
            "> 1.5x",
            two / one > 1.5 if one else None,
            extra,
        ),
        Result(
            "call-replicas",
            "postgres",
            f"calls' records, 2 processes vs 1, {THREADS} callers each (no HTTP), {build}",
            "records/s",
            side_by_side,
            "one process",
            alone,
            side_by_side / alone if alone else float("inf"),
            "> 1.5x",
            side_by_side / alone > 1.5 if alone else None,
            direct,
        ),
    ]


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

        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
        env |= {
            "PYTHONPATH": os.pathsep.join([str(source), str(ROOT)]),
            "TOOLKIT_VAULT_HOME": str(home),
            "TOOLKIT_VAULT_DATABASE_URL": url,
        }

        def record(secs: float, both: bool) -> float:
            """Records per second, committed by one process (or two) calling
            `record_call` directly from THREADS threads each, for `secs`."""
            argv = [sys.executable, "-c", _RECORDER, str(secs), str(THREADS)]
            running = [
                subprocess.Popen(
                    argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
                for _ in range(2 if both else 1)
            ]
            for process in running:  # each has opened its vault and written a record
                assert process.stdout is not None
                if process.stdout.readline().strip() != "ready":
                    raise RuntimeError("a recording process did not start")
            for process in running:  # then all start at once
                assert process.stdin is not None
                process.stdin.write("go\n")
                process.stdin.flush()
            counts = []
            for process in running:
                assert process.stdout is not None
                counts.append(int(process.stdout.readline().strip()))
                process.communicate(timeout=60)
            if any(p.returncode for p in running):
                raise RuntimeError("a recording process failed")
            return sum(counts) / secs

        yield Pair(drive, record)
