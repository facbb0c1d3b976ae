"""Soak test: many WebSocket and HTTP agents on loopback, mixing list and configure.

Starts its own vault (a temporary home, SQLite unless --database-url) and its own
`toolkit-vault serve` on a free loopback port, runs the clients for a bounded time, then
checks that every accepted configure is stored exactly once and the audit chain verifies.
Prints latency percentiles and throughput; exits non-zero on any error or lost write.

The agents speak through aiohttp (C-accelerated HTTP and WebSocket parsing), one keep-alive
connection each: through httpx and websockets the clients took most of a core of their own
and left the server short of one, so the soak measured the clients (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import httpx

BIN = Path(sys.executable).parent
HELLO = json.dumps({"type": "handshake/req", "capabilities": ["toolkits"]})
LIST = json.dumps({"type": "toolkit/list/req"})


def configure() -> str:
    config = {"root_dir": tempfile.gettempdir()}  # must exist: filesystem refuses a missing one
    return json.dumps(
        {"type": "toolkit/configure/req", "toolkit_name": "filesystem", "config": config}
    )


class Tally:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = {"list": [], "configure": []}
        self.errors: Counter[str] = Counter()
        self.accepted: Counter[str] = Counter()  # session id -> configures answered "ok"

    def record(self, kind: str, started: float, reply: dict[str, Any], session: str) -> None:
        self.latency[kind].append(time.perf_counter() - started)
        if reply.get("type") == "error" or reply.get("status") not in (None, "ok"):
            self.errors[f"{kind}: {reply.get('code') or reply.get('status')}"] += 1
        elif kind == "configure":
            self.accepted[session] += 1


async def websocket_agent(
    http: aiohttp.ClientSession, url: str, token: str, deadline: float, tally: Tally
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with http.ws_connect(url, headers=headers, max_msg_size=2**22) as ws:
        await ws.send_str(HELLO)
        session = json.loads(await ws.receive_str())["session_id"]
        n = 0
        while time.monotonic() < deadline:
            n += 1
            kind, message = ("configure", configure()) if n % 2 else ("list", LIST)
            started = time.perf_counter()
            await ws.send_str(message)
            reply = json.loads(await ws.receive_str())
            tally.record(kind, started, reply, session)
            if kind == "configure" and reply.get("type") == "toolkit/configure/resp":
                await ws.receive_str()  # its status event


async def http_agent(
    http: aiohttp.ClientSession, base: str, token: str, deadline: float, tally: Tally
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with http.post(base + "/a2e", data=HELLO, headers=headers) as response:
        session = (await response.json())["session_id"]
    headers = headers | {"A2E-Session": session}
    n = 0
    while time.monotonic() < deadline:
        n += 1
        kind, message = ("configure", configure()) if n % 2 else ("list", LIST)
        started = time.perf_counter()
        async with http.post(base + "/a2e", data=message, headers=headers) as response:
            reply = json.loads(await response.read())
        tally.record(kind, started, reply, session)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "toolkit-vault"), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def stored_versions(env: dict[str, str]) -> Counter[str]:
    versions = json.loads(cli(env, "history", "--json"))["versions"]
    return Counter(v["session_id"] for v in versions if v["toolkit_name"] == "filesystem")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def run(base: str, tokens: list[str], duration: float, tally: Tally) -> float:
    deadline = time.monotonic() + duration
    ws_url = base.replace("http://", "ws://") + "/a2e"
    half = len(tokens) // 2
    started = time.perf_counter()
    # one connection per agent, kept alive, as each agent's own client would
    limits = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=limits, timeout=timeout) as http:
        results = await asyncio.gather(
            *(websocket_agent(http, ws_url, t, deadline, tally) for t in tokens[:half]),
            *(http_agent(http, base, t, deadline, tally) for t in tokens[half:]),
            return_exceptions=True,
        )
    for result in results:
        if isinstance(result, BaseException):
            tally.errors[f"client: {type(result).__name__}"] += 1
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50, help="half WebSocket, half HTTP")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (at most 600)")
    parser.add_argument("--database-url", default=None, help="default: SQLite in a temp home")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args()
    if not 2 <= args.clients <= 500 or not 1 <= args.duration <= 600:
        parser.error("--clients must be 2..500 and --duration 1..600")
    with tempfile.TemporaryDirectory(prefix="tkv-soak-") as home:
        env = {**os.environ, "TOOLKIT_VAULT_HOME": home}
        if args.database_url:
            env["TOOLKIT_VAULT_DATABASE_URL"] = args.database_url
        cli(env, "init", "--key-provider", "file")
        tokens = [
            json.loads(
                cli(env, "tokens", "create", "--role", "agent", "--name", f"soak-{i}", "--json")
            )["token"]
            for i in range(args.clients)
        ]
        port = free_port()
        server = subprocess.Popen(
            [
                str(BIN / "toolkit-vault"),
                "serve",
                "--port",
                str(port),
                "--rate",
                "100000",
                "--slow-connections-per-ip",
                "256",
                "--log-format",
                "text",
            ],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            tally = Tally()
            server_cpu, client_cpu = cpu_seconds(server.pid), time.process_time()
            elapsed = asyncio.run(run(base, tokens, args.duration, tally))
            server_cpu = cpu_seconds(server.pid) - server_cpu
            client_cpu = time.process_time() - client_cpu
        finally:
            server.terminate()
            server.wait(timeout=30)
        stored = stored_versions(env)
        lost = {s: n - stored.get(s, 0) for s, n in tally.accepted.items() if stored.get(s, 0) != n}
        audit_ok = json.loads(cli(env, "audit", "verify", "--json"))["ok"]
    accepted, kept = sum(tally.accepted.values()), sum(stored.values())
    total = sum(len(v) for v in tally.latency.values())
    summary = {
        "clients": args.clients,
        "seconds": round(elapsed, 2),
        "requests": total,
        "throughput": round(total / elapsed, 1),
        "server_cpu_ms": round(server_cpu / total * 1000, 3),
        "server_cpu_share": round(server_cpu / elapsed, 3),
        "client_cpu_share": round(client_cpu / elapsed, 3),
        "latency": {
            kind: {
                "n": len(values),
                "p50_ms": round(statistics.median(values) * 1000 if values else 0.0, 1),
                "p99_ms": round(percentile(values, 0.99), 1),
            }
            for kind, values in tally.latency.items()
        },
        "errors": dict(tally.errors),
        "accepted": accepted,
        "stored": kept,
        "lost": sum(lost.values()),
        "audit_verifies": audit_ok,
    }
    print(json.dumps(summary) if args.json else report(summary))
    return 0 if not tally.errors and not lost and audit_ok else 1


def report(s: dict[str, Any]) -> str:
    half = s["clients"] // 2
    lines = [
        f"clients {s['clients']} ({half} WebSocket, {s['clients'] - half} HTTP), {s['seconds']} s",
        f"requests {s['requests']}, throughput {s['throughput']} req/s",
        f"CPU: server {s['server_cpu_share']:.0%} of a core ({s['server_cpu_ms']:.2f} ms a "
        f"request), these clients {s['client_cpu_share']:.0%}",
        *(
            f"{kind:10} n={v['n']:6}  p50 {v['p50_ms']:7.1f} ms  p99 {v['p99_ms']:7.1f} ms"
            for kind, v in s["latency"].items()
        ),
        f"errors {sum(s['errors'].values())} {s['errors'] or ''}",
        f"configures accepted {s['accepted']}, stored {s['stored']}, lost {s['lost']}",
        f"audit chain {'verifies' if s['audit_verifies'] else 'BROKEN'}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
