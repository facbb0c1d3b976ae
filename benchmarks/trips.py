"""`python -m benchmarks.trips`: where a PostgreSQL request's round trips and lock waits go.

The real `toolkit-vault serve` on a scratch PostgreSQL database (as the `http` scenario
runs it), with a `sitecustomize` on its path that counts, inside the server, every round
trip psycopg makes (each statement by its first words, an implicit BEGIN, COMMIT and
ROLLBACK; a pipeline's statements apart, its sync as one round trip) and the time spent
waiting in `pg_advisory_xact_lock`; `wrk` drives HTTP list and configure at 1, 16 and 64
connections, and the counts before and after each run give round trips and lock-wait
milliseconds per request. Issue 42's before and after profiles (BENCHMARKS.md) come from
here.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from .harness import SCALES, Context, postgres_admin_url
from .loadgen import run_wrk
from .network import CONFIGURE, LIST, _serving
from .servers import cpu_seconds

__all__ = ["main"]

# Runs in the server process: counts psycopg's round trips, dumped to a file twice a second.
_SITECUSTOMIZE = r"""
import json, os, threading, time
from collections import Counter
import psycopg

OUT = os.environ["TKV_TRIPS_OUT"]
PIPELINED = "pipelined statements"  # sent in a pipeline: not round trips of their own
counts, lock = Counter(), threading.Lock()
_IDLE = psycopg.pq.TransactionStatus.IDLE

def _name(query):
    text = query.as_string(None) if hasattr(query, "as_string") else str(query)
    words = text.split()
    if "pg_advisory_xact_lock" in text:
        return "advisory lock"
    if "pg_notify" in text or text.upper().startswith("NOTIFY"):
        return "notify"
    if not words:
        return "empty"
    first = words[0].upper()
    if first in ("WITH", "SELECT") and "INSERT INTO" in text.upper():
        return first + " (writes)"
    return first

def _counted(method, many=False):
    def wrapper(self, query, *args, **kwargs):
        conn = self.connection
        name = _name(query)
        with lock:
            if not conn.autocommit and conn.info.transaction_status == _IDLE:
                counts["BEGIN"] += 1
            counts[PIPELINED if conn._pipeline is not None else name] += 1
        started = time.perf_counter()
        try:
            return method(self, query, *args, **kwargs)
        finally:
            if name == "advisory lock":
                with lock:
                    counts["advisory lock wait us"] += int((time.perf_counter() - started) * 1e6)
    return wrapper

def _counted_on_loop(method):  # the lists' shared head read (autocommit, never piped)
    async def wrapper(self, query, *args, **kwargs):
        with lock:
            counts[_name(query)] += 1
        return await method(self, query, *args, **kwargs)
    return wrapper

def _ended(method, name):
    def wrapper(self, *args, **kwargs):
        if self.info.transaction_status != _IDLE:
            with lock:
                counts[name] += 1
        return method(self, *args, **kwargs)
    return wrapper

def _synced(method):
    def wrapper(self, *args, **kwargs):
        with lock:
            counts["pipeline sync"] += 1  # one round trip for every statement queued in it
        return method(self, *args, **kwargs)
    return wrapper

psycopg.Cursor.execute = _counted(psycopg.Cursor.execute)
psycopg.Connection.pipeline = _synced(psycopg.Connection.pipeline)
psycopg.Cursor.executemany = _counted(psycopg.Cursor.executemany)
psycopg.AsyncCursor.execute = _counted_on_loop(psycopg.AsyncCursor.execute)
psycopg.Connection.commit = _ended(psycopg.Connection.commit, "COMMIT")
psycopg.Connection.rollback = _ended(psycopg.Connection.rollback, "ROLLBACK")

def _dump():
    while True:
        time.sleep(0.25)
        with lock:
            data = dict(counts)
        with open(OUT + ".tmp", "w") as f:
            json.dump(data, f)
        os.replace(OUT + ".tmp", OUT)

threading.Thread(target=_dump, daemon=True).start()
"""

CASES = {"HTTP list": LIST, "HTTP configure": CONFIGURE}


def _read(path: Path) -> Counter[str]:
    time.sleep(0.6)  # two dumps: every count of the run is in the file
    return Counter(json.loads(path.read_text())) if path.exists() else Counter()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trips", description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", default="1,16,64")
    args = parser.parse_args(argv)
    connections = [int(c) for c in args.connections.split(",")]
    with tempfile.TemporaryDirectory(prefix="tkv-trips-") as tmp:
        work = Path(tmp)
        hook = work / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        out = work / "counts.json"
        ctx = Context(SCALES["quick"], work, ("postgres",), postgres_admin_url(), log=print)
        with _serving(ctx, "postgres", "trips", hook, {"TKV_TRIPS_OUT": str(out)}) as setup:
            for name, body in CASES.items():
                for conns in connections:
                    before, cpu = _read(out), cpu_seconds(setup.server.pid)
                    try:
                        load = run_wrk(
                            setup.server.port,
                            setup.tokens,
                            setup.sessions,
                            body,
                            conns,
                            args.seconds,
                            setup.work,
                        )
                    except RuntimeError as exc:
                        print(f"{name}, {conns} conn: {exc}")
                        continue
                    cpu = cpu_seconds(setup.server.pid) - cpu
                    after = _read(out)
                    per = {k: (after[k] - before[k]) / load.requests for k in after}
                    wait = per.pop("advisory lock wait us", 0.0) / 1000
                    trips = sum(v for k, v in per.items() if k != "pipelined statements")
                    detail = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items()) if v >= 0.01)
                    print(
                        f"{name}, {conns} conn: {load.rate:.0f} req/s, p99 {load.p99_ms:.1f} ms, "
                        f"CPU {cpu / load.requests * 1000:.2f} ms, {trips:.2f} round trips "
                        f"({detail}), lock wait {wait:.2f} ms a request"
                    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
