"""The `http` scenario's own table (throughput, latency and server CPU side by side, ours
and the no-op's), its prose for BENCHMARKS.md, and the throughput plot."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .harness import Result

__all__ = ["MEANING", "is_network", "markdown_table", "plot", "print_network", "soak_table"]

COLUMNS = (
    "db",
    "request",
    "conns",
    "ours req/s",
    "no-op req/s",
    "ratio",
    "ours p50 / p99 ms",
    "no-op p50 / p99 ms",
    "CPU ms/req ours / no-op",
    "target",
    "holds",
)

MEANING = """\
- **http**: the real `toolkit-vault serve` (JSON request logs on, as deployed; the rate
  limit raised out of the way) against a **no-op FastAPI app** with the same two A2E routes:
  `POST /a2e` parses the JSON body and answers a small JSON object, the WebSocket `/a2e`
  parses each message and echoes a small one. Both run through
  `toolkit_vault.transports.http_server.run` (the same uvicorn, protocol and settings), each
  in its own process, driven in turn (no-op, then ours, twice in a full run; the median is
  shown) by compiled closed-loop load generators: `wrk -t1` for HTTP, and `wsload`
  (`benchmarks/wsload.c`, one epoll thread, compiled by `scripts/bench`: Debian 12 packages
  no WebSocket load generator, and a Python client would use more CPU than the no-op server
  it measures) for WebSockets. HTTP requests rotate over 16 agent tokens, each with its own
  session; each WebSocket has its own token
  and session. `toolkit/list/req` lists 2 registered toolkits (one configured);
  `toolkit/configure/req` stores a distinct config of the bench toolkit (3 public, 2
  secret fields) each time, and over a WebSocket waits for its response and its status
  event. Every answer is checked: an HTTP status other than 200 or an A2E `error` fails
  the run. Ratio = ours / no-op throughput. p50/p99 are the load generators' latencies;
  CPU ms/req is the server process's user + system time (`/proc/<pid>/stat`, every
  thread) over the run, divided by the requests answered. Targets apply on SQLite at 16
  connections; PostgreSQL is reported without one.
- **soak**: `scripts/soak` as it runs by hand: its own vault home (SQLite, or a scratch
  PostgreSQL database) and `toolkit-vault serve`, then agents (half on WebSockets, half on
  HTTP, through aiohttp, one keep-alive connection each, all in one Python process) each
  alternating `toolkit/list/req` and a
  `toolkit/configure/req` of the `filesystem` toolkit with a distinct `root_dir`, for the
  time shown; then every accepted configure must be stored exactly once (`history`) and
  the audit chain must verify. Throughput counts both kinds; the server's CPU is its
  process's, the clients' is theirs (they share the machine).
"""


def is_network(result: Result) -> bool:
    return result.scenario == "http"


def _cells(result: Result) -> list[str]:
    ours, noop = result.extra["ours"], result.extra["noop"]
    return [
        result.database,
        result.extra["request"],
        str(result.extra["connections"]),
        f"{ours['rate']:,.0f}",
        f"{noop['rate']:,.0f}",
        f"{result.ratio:.2f}x",
        f"{ours['p50_ms']:.1f} / {ours['p99_ms']:.1f}",
        f"{noop['p50_ms']:.1f} / {noop['p99_ms']:.1f}",
        f"{ours['cpu_ms']:.2f} / {noop['cpu_ms']:.2f}",
        result.target or "-",
    ]


def print_network(results: Iterable[Result], console: Console) -> None:
    rows = [r for r in results if is_network(r)]
    if not rows:
        return
    table = Table(title="http: the real server against a no-op endpoint on the same uvicorn")
    for column in COLUMNS:
        table.add_column(column, justify="right" if "/" in column or "ratio" in column else "left")
    for result in rows:
        holds = {True: "[green]yes[/]", False: "[red]no[/]", None: "-"}[result.holds]
        table.add_row(*_cells(result), holds)
    console.print(table)


def markdown_table(results: Iterable[Result]) -> list[str]:
    rows = [r for r in results if is_network(r)]
    if not rows:
        return []
    verdict = {True: "yes", False: "**no**", None: "-"}
    return [
        "| " + " | ".join(COLUMNS) + " |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|---|",
        *("| " + " | ".join([*_cells(r), verdict[r.holds]]) + " |" for r in rows),
    ]


def plot(results: Iterable[Result], path: Path) -> Path | None:
    """HTTP throughput against connections, ours and the no-op's, one panel per request."""
    rows = [r for r in results if is_network(r) and r.extra["request"].startswith("HTTP")]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    requests = sorted({r.extra["request"] for r in rows}, reverse=True)
    figure, axes = plt.subplots(1, len(requests), figsize=(6 * len(requests), 4.2), squeeze=False)
    for axis, request in zip(axes[0], requests, strict=True):
        for database in sorted({r.database for r in rows}):
            points = sorted(
                (r for r in rows if r.extra["request"] == request and r.database == database),
                key=lambda r: int(r.extra["connections"]),
            )
            conns = [int(r.extra["connections"]) for r in points]
            axis.plot(
                conns, [r.ours for r in points], marker="o", label=f"toolkit-vault, {database}"
            )
            axis.plot(
                conns,
                [r.baseline for r in points],
                marker="x",
                linestyle="--",
                label=f"no-op FastAPI (during {database})",
            )
        axis.set_xscale("log", base=2)
        axis.set_xlabel("connections (wrk -t1)")
        axis.set_ylabel("requests/s")
        axis.set_title(request)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def soak_table(results: Iterable[Result]) -> list[str]:
    rows = [r for r in results if r.scenario == "soak"]
    if not rows:
        return []
    out = [
        "| db | clients, time | requests | req/s | list p50 / p99 ms | configure p50 / p99 ms "
        "| server CPU (ms/req, share of a core) | clients' CPU | errors | lost writes |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for result in rows:
        s = result.extra["summary"]
        lat = s["latency"]
        out.append(
            f"| {result.database} | {result.case} | {s['requests']:,} | {s['throughput']:,.0f} "
            f"| {lat['list']['p50_ms']:.0f} / {lat['list']['p99_ms']:.0f} "
            f"| {lat['configure']['p50_ms']:.0f} / {lat['configure']['p99_ms']:.0f} "
            f"| {s['server_cpu_ms']:.2f}, {s['server_cpu_share']:.0%} "
            f"| {s['client_cpu_share']:.0%} | {sum(s['errors'].values())} "
            f"| {s['lost']} of {s['accepted']:,} |"
        )
    return out


def _fact(r: Result) -> str:
    ours, noop = r.extra["ours"], r.extra["noop"]
    busy = ours["rate"] * ours["cpu_ms"] / 1000
    return (
        f"{r.extra['request']} on {r.database}: ours {ours['rate']:,.0f} req/s at "
        f"{ours['cpu_ms']:.2f} ms of server CPU a request ({busy:.0%} of a core), p99 "
        f"{ours['p99_ms']:.0f} ms; the no-op {noop['rate']:,.0f} req/s at "
        f"{noop['cpu_ms']:.2f} ms ({r.ratio:.2f}x)"
    )


def bound(results: list[Result]) -> str:
    """What bounds the network path's targets, with this run's figures."""
    rows = [r for r in results if is_network(r) and r.extra["connections"] == 16]
    if not rows:
        return "(no http figures at 16 connections)"
    commit = rows[0].extra.get("durable_commit_ms", float("nan"))
    return BOUND.format(figures="; ".join(_fact(r) for r in rows), commit=commit)


BOUND = """\
In this run, at 16 connections: {figures}. A durable SQLite commit (WAL,
`synchronous=FULL`, one row) took {commit:.2f} ms on this disk at the start of the run.

Both servers run their Python on one core at a time (the GIL), so where both are busy the
throughput ratio is about the inverse of the CPU per request. What ours adds to the no-op's
FastAPI and uvicorn path, for a **list** on SQLite: the token check (a dictionary lookup:
tokens are remembered for a second), the rate limit, parsing and validating the A2E message
(stdlib `json` with duplicate-key checks, then pydantic), the store's commit mark (`PRAGMA
data_version` on a connection of its own: with nothing committed since the session's last
read, the list is answered from memory on the event loop, no worker thread, no read), the
answer (its line written around each toolkit's definition, serialized once), and over
HTTP the JSON request log line. After a commit (most of the soak's lists) the session's
pointers are read on the loop too, on that same connection, which never waits for a lock;
only if they moved (or on PostgreSQL, every list) does the list go to a worker thread: a
pool checkout and one `SELECT`, sent on the driver directly, and the session's toolkits
brought in line. The profile below shows the shares. `POST /a2e` is served before
FastAPI's middleware stack and router (its request log, request id, intake origin and
refusals kept): on this machine a no-op endpoint answered about 9,800 requests a second as
plain ASGI against 3,700 through FastAPI, so the no-op baseline here pays a framework cost
our hot route no longer does (HTTP list +17% in paired A/B runs).

A **configure** on SQLite is one write in a **group commit**: the writes are one sequence
(the audit chain), so they queue in the process for the store's one writer thread (not in
SQLite's busy handler, which sleeps up to 100 ms between tries), which runs every write
queued while it was busy in one transaction, each under a savepoint of its own (its
version, its pointer's compare-and-set and its audit event, in chain order; one that fails
is rolled back alone), then commits them together with one fsync (about 8 configures a
group at 16 connections) and makes each new version live; each answer leaves only after
that. The worker thread that validated and sealed a configure hands its write over and
takes the next request instead of waiting for the commit: threads sitting out commits,
woken one at a time, had cost more CPU a configure than the writes themselves (paired A/B
at 16 connections: HTTP configure 1.22x req/s at 0.82x CPU a request, WebSocket configure
1.18x). The commit time above is therefore paid once per group, not per
configure, and the CPU is the bound: validation, the split and sealing, the row MACs and
chain link, and the statements (compiled once and sent on the driver's own cursor: through
SQLAlchemy's execution machinery, even as plain driver SQL, each cost more CPU than
SQLite's own work on it) come to well over a millisecond over HTTP, against the no-op's
0.1. Measured on this branch in alternating runs on one VM (a slower day than this run's,
if the no-op's figures differ): HTTP configure at 16 connections went from 224-262 to
334-370 req/s (server CPU a request 3.5-4.0 against 2.7-2.9 ms) with the group commit and
the driver's cursor; with the fsync taken out instead (`synchronous=NORMAL`, not durable,
a measurement only), an earlier run had gone from 305-321 to 490-619. On PostgreSQL every
configure is still its own transaction, queued on an advisory lock. A configure reaches a
worker thread by one queue put and comes back by one `call_soon_threadsafe`
(`workers.py`): `run_in_executor` chains a `concurrent.futures.Future` to an asyncio one,
and on a no-op endpoint that hop alone cost 0.35 ms of CPU a request against 0.24-0.33;
paired A/B runs on one machine: HTTP configure +14%, WebSocket configure +11%, then +12%
more for HTTP configure from the route served before FastAPI.

A **WebSocket list** against an echo: at 16 connections the echo cost the server about
0.08 ms of CPU a message (its framework's receive and send included), a list answered from
memory 0.22 ms before this round's changes. Taken apart by removing one piece at a time in
paired runs: the same loop answering a constant over the same framework costs 0.06 ms, the
send queue 0.01 ms more (a response, like a push event, left through one queue in order,
sent by a task of its own), the token check, rate limit and parse about
0.06 ms, the answer about 0.08 ms, of which 0.04 ms was the commit mark's one `PRAGMA
data_version`. In-process the same work takes a third of that (parse 11-14 us, the answer
with its mark 45 us, the `PRAGMA` alone 5 us); in the server, between two messages, the
network stack and the framework push it out of the CPU's caches, so what counts is how
much code a message runs. Hence, each measured in paired runs on one machine: one strict
JSON decoder per thread instead of one built per message and message ids formatted
without `uuid.UUID` (parse 24 -> 14 us in-process; WebSocket list +7%), the token's hash
taken once per WebSocket instead of per message (+7%), and the lists waiting on the event
loop sharing one read of the commit mark (`access.SharedMarks`: it runs after every list
it serves arrived, so each still sees every commit acknowledged before it was sent;
WebSocket list +16%, HTTP list +4%), the list's response line written around its
toolkits without building the response model (byte for byte the model's line; +8%), and
the WebSocket route, like `POST /a2e`, served before FastAPI's stack, its messages on the
raw ASGI `receive` and `send` (Starlette's `WebSocket` and the exception wrapper added
three calls a message; +12.6%, CPU a message -10%), and the send queue replaced by an
`Outbox` that sends an answer in place when the socket is idle, in order behind any send
still waiting (no queue, no second task; +8.9%, CPU a message -8%; a client that stops
reading now stops being read instead of filling a queue), and a list whose session's
last read still holds answered in one lock section (+7.7%, with the store's positional
parameters picked by `itemgetter`: HTTP configure +2.9%). The request log line skips the
source line, thread and process that `logging` gathers for every record and neither of
our formats shows (the logging HOWTO's optimization; HTTP list +15%, CPU a request -12%).

**The server and the JSON library.** uvicorn was measured against granian 2.8.7 (its
embedded ASGI server, HTTP/1, uvloop) in paired runs on one machine, each serving the same
app: ours went +6% (HTTP list), +7% (HTTP configure), +26% (WebSocket list) and +1%
(WebSocket configure), the no-op +7% (HTTP) and +21% (WebSocket echo), so the ratios
stay where they are, while the CPU a request grew by 4-21% (granian's Rust threads take
the second core). uvicorn stays: granian's embedded server is marked experimental, and
the header-read deadline and WebSocket size limit would have to be rebuilt on its
settings. orjson writes the log lines (0.8 against 11 us); the protocol's decoder stays
`json` with hooks, because neither orjson (3.13) nor msgspec (0.23, even decoding to a
Struct) can refuse a duplicate key (both keep the last), and a message whose two `config`
keys two parsers would read differently is refused here.

SQLite's `BEGIN` (`BEGIN IMMEDIATE` for a write) is sent on the driver's connection from
SQLAlchemy's `begin` event rather than through `exec_driver_sql`, which cost a third of an
empty write transaction's CPU (paired: HTTP configure +4.6%, WebSocket configure +9.4%).

Two more, each paired over 16 pairs (HTTP configure at 16 connections). SQLite's pool hands
out the connection returned last: a connection's page cache stays valid only while no other
connection writes, and with the pool rotating through its eight connections the writer
thread began most groups on one whose cache had gone stale, reading its pages again
(strace: 6.6 `pread`s a configure, 1.7 after): 1.089x req/s, 0.926x CPU a request. And the
request log: with no request log at all the server answered 1.13-1.14x the configures
(0.88x CPU), far more than the line's 16 us in isolation, for the logging module's record,
filter and formatter and one `write` a line. The line now skips the logging module where
`serve`'s JSON handler alone takes it (the same bytes) and request lines are written
together within 50 ms: 1.071x, 0.934x CPU (against the pool change). Tried and not kept,
no change measurable over 16 pairs: a group's configures written with one multi-row
statement a table (5% fewer instructions a configure under callgrind; 0.98x req/s), one
savepoint a group instead of one a write (1.01x), the status event no one listens to left
unbuilt (1.02x). Where the rest goes: with its write taken out entirely a configure answers
at 1.92x, with only the version's rows, MACs and chain link taken out at 1.47x: the write
is about half a configure's CPU, in Python code that costs about twice its in-process time
in the server. A configure's p99 also rides on the disk: this VM's fsync now and then takes
100-270 ms (strace), and every write of that group waits for it; the full run therefore
takes the median of three runs a case.

On **PostgreSQL** every transaction costs round trips to the server (a list: the `SELECT`
in the transaction psycopg opens, then the pool's `ROLLBACK` on return; the pool pings a
connection only after an idle second), and configures queue on an advisory lock for the
audit chain, then relay their status event with `pg_notify` in a transaction of its own.
"""
