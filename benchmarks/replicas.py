"""replicas: two `toolkit-vault serve` processes on one database behave as one vault under load.

Users outgrow one machine by running replicas over one PostgreSQL; each replica keeps caches
(tokens believed for a second, bound sessions, lists answered from memory while nothing was
committed), so the question is whether the two still act as one vault while busy. This soak
starts two real `serve` processes on one vault home and database and spreads agents over
both: half on WebSockets, half on HTTP, two per principal, each alternating configure (a
distinct secret every time) and list, and moving its session to the other process now and
then (a resume: the handshake names the session) or starting a new one. Meanwhile, on the
side, it checks what must cross from one process to the other:

- a token created through process A's `/v1/tokens` works on B at once; revoked through A's
  `/v1/tokens/revoke`, it is refused by B (HTTP and an open WebSocket) from one second
  after A acknowledged the revocation on (every process believes a token at most that long,
  `transports.http_access.PrincipalCache`): every probe sent later must be refused;
- a session bound on both and configured for the first time through A is configured in
  B's next list; purged through A's `/v1/purge`, it is no longer configured in B's next one;
- a toolkit imported by `toolkits import` (a third process) is in both processes' next lists;
- a configure on A reaches the session's WebSocket on B (PostgreSQL: the relay).

At the end nothing may be wrong: no error, no lost write (every acknowledged configure is a
version in `history`, and the current version of every session holds the secret its last
acknowledged configure sent: opened through the service API in this process and compared
here, never printed), `audit verify` and `check` pass.

`run(ctx)` is the `scripts/bench --only replicas` scenario (PostgreSQL, the soak's clients
and seconds: 60 s at full scale); `python -m benchmarks.replicas --database-url URL` runs one
soak and prints its JSON summary (tests/test_replicas.py runs it for a few seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from toolkit_vault.access.principals import create_token
from toolkit_vault.bootstrap import init_vault, open_vault
from toolkit_vault.settings import VaultSettings

from .harness import Context, Result
from .servers import BIN_ARGV, ROOT, Running, cpu_seconds, vault_server
from .toolkit import bench_registry, install_entry_point

__all__ = ["REVOCATION_BOUND", "run", "soak"]

REVOCATION_BOUND = 1.0  # seconds after A acknowledges a revocation that B must refuse
ROUNDS_PER_VISIT = 8  # requests a client sends to one process before its session moves
VISITS_PER_SESSION = 4  # then it starts a new session
WAIT = 30.0  # seconds any single answer may take, however loaded the machine
HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
LIST = {"type": "toolkit/list/req"}
STATUS_EVENT = "toolkit/status/event"


def _configure(api_key: str) -> dict[str, Any]:
    config = {
        "endpoint": "https://api.example.test/v1",
        "region": "eu-west-1",
        "timeout_s": 30,
        "api_key": api_key,
        "password": f"pw-{uuid.uuid4().hex}",
    }
    return {"type": "toolkit/configure/req", "toolkit_name": "bench", "config": config}


def _fresh_secret() -> str:
    return f"sk-replica-{uuid.uuid4().hex}"


@dataclass
class Tally:
    """What the clients saw. `last` holds secrets: compared in memory, never printed."""

    requests: list[int] = field(default_factory=lambda: [0, 0])  # per process
    latency: dict[str, list[float]] = field(default_factory=lambda: {"list": [], "configure": []})
    errors: Counter[str] = field(default_factory=Counter)
    acked: Counter[str] = field(default_factory=Counter)  # session -> configures answered ok
    last: dict[str, str] = field(default_factory=dict, repr=False)  # session -> its api_key
    purged: set[str] = field(default_factory=set)

    def answered(self, process: int, kind: str, started: float, reply: dict[str, Any]) -> bool:
        self.requests[process] += 1
        self.latency.setdefault(kind, []).append(time.perf_counter() - started)
        if reply.get("type") == "error" or reply.get("status") not in (None, "ok"):
            self.errors[f"{kind}: {reply.get('code') or reply.get('status')}"] += 1
            return False
        return True


class Channel:
    """One agent's A2E connection to one process: a WebSocket or HTTP requests naming the
    session. `ask` returns the answer to a request; status events pushed meanwhile (this
    session's configures, relayed or not) are counted, not taken for answers."""

    def __init__(self, http: aiohttp.ClientSession, server: Running, token: str) -> None:
        self.http, self.server = http, server
        self.headers = {"Authorization": f"Bearer {token}"}
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def open_websocket(self) -> None:
        url = self.server.base.replace("http://", "ws://") + "/a2e"
        self.ws = await self.http.ws_connect(url, headers=self.headers, max_msg_size=2**22)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()

    async def handshake(self, session: str | None = None) -> dict[str, Any]:
        reply = await self.ask(HELLO | ({"session_id": session} if session else {}))
        if reply.get("type") == "handshake/resp":
            self.session = reply["session_id"]
        return reply

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(message)
        if self.ws is None:
            headers = self.headers | ({"A2E-Session": self.session} if self.session else {})
            async with self.http.post(self.server.base + "/a2e", data=body, headers=headers) as r:
                answer: dict[str, Any] = json.loads(await r.read())
                answer.setdefault("http_status", r.status)
                return answer
        await self.ws.send_str(body)
        while True:
            received = await self.ws.receive(timeout=WAIT)
            if received.type != aiohttp.WSMsgType.TEXT:
                return {"type": "error", "code": f"websocket {received.type.name}"}
            answer = json.loads(received.data)
            if answer.get("type") != STATUS_EVENT:
                return answer
            self.events.append(answer)

    async def next_event(self, timeout: float) -> dict[str, Any] | None:
        """The next status event pushed to this WebSocket, or None within `timeout`."""
        assert self.ws is not None
        if self.events:
            return self.events.pop(0)
        with contextlib.suppress(TimeoutError):
            received = await self.ws.receive(timeout=timeout)
            if received.type == aiohttp.WSMsgType.TEXT:
                answer: dict[str, Any] = json.loads(received.data)
                return answer
        return None


@contextlib.asynccontextmanager
async def _channel(
    http: aiohttp.ClientSession, server: Running, token: str, websocket: bool
) -> AsyncIterator[Channel]:
    channel = Channel(http, server, token)
    if websocket:
        await channel.open_websocket()
    try:
        yield channel
    finally:
        await channel.close()


def _configured(reply: dict[str, Any], toolkit: str) -> bool | None:
    """Whether a list answer says `toolkit` is configured (None: not listed at all)."""
    for listed in reply.get("toolkits", []):
        if listed.get("name") == toolkit:
            return bool(listed.get("configured"))
    return None


async def _agent(
    http: aiohttp.ClientSession,
    servers: list[Running],
    token: str,
    index: int,
    stop: asyncio.Event,
    tally: Tally,
) -> None:
    """A closed loop: configure and list in turn, moving the session between processes."""
    websocket, where = index % 2 == 0, (index // 2) % 2
    session: str | None = None
    visits = 0
    while not stop.is_set():
        async with _channel(http, servers[where], token, websocket) as channel:
            started = time.perf_counter()
            hello = await channel.handshake(session)
            if not tally.answered(where, "handshake", started, hello):
                return
            session = channel.session
            assert session is not None
            for n in range(ROUNDS_PER_VISIT):
                if stop.is_set():
                    break
                started = time.perf_counter()
                if n % 2 == 0:
                    secret = _fresh_secret()
                    reply = await channel.ask(_configure(secret))
                    if tally.answered(where, "configure", started, reply):
                        tally.acked[session] += 1
                        tally.last[session] = secret
                else:
                    reply = await channel.ask(LIST)
                    if tally.answered(where, "list", started, reply) and not _configured(
                        reply, "bench"
                    ):
                        tally.errors["list: bench not configured after a configure"] += 1
        where, visits = 1 - where, visits + 1
        if visits % VISITS_PER_SESSION == 0:
            session = None


@dataclass
class Crossings:
    """What crossed between the processes, as the side checks saw it."""

    token_created_on_a_works_on_b: bool = False
    revoked_refused_after_s: float | None = None  # first refused probe, from A's answer on
    accepted_after_bound: int = 0  # probes sent to B past REVOCATION_BOUND and accepted
    probes_after_bound: int = 0
    websocket_refused: bool = False
    configure_seen_by_next_list: bool = False  # a first configure on A, in B's next list
    purge_seen_by_next_list: bool = False
    purge_seen_after_s: float | None = None
    import_seen_by_next_lists: bool = False
    import_seen_after_s: float | None = None
    push_relayed_after_s: float | None = None  # None on SQLite: no relay between processes


async def _admin(
    http: aiohttp.ClientSession, server: Running, token: str, path: str, body: dict[str, Any]
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with http.post(server.base + path, json=body, headers=headers) as response:
        answer: dict[str, Any] = await response.json()
        if response.status not in (200, 201):
            raise RuntimeError(f"{path} answered {response.status}: {answer.get('message')}")
        return answer


async def _revocation(
    http: aiohttp.ClientSession, a: Running, b: Running, operator: str, seen: Crossings
) -> None:
    """A token made on A, used on B (cached there), revoked on A, probed on B until past
    the bound: every probe sent past it must be refused."""
    name = f"replica-victim-{uuid.uuid4().hex[:8]}"
    made = await _admin(http, a, operator, "/v1/tokens", {"role": "agent", "name": name})
    token = made["token"]
    async with (
        _channel(http, b, token, websocket=False) as probe,
        _channel(http, b, token, websocket=True) as socket,
    ):
        hello = await probe.handshake()
        await socket.handshake()
        warm = [await probe.ask(LIST) for _ in range(5)]
        seen.token_created_on_a_works_on_b = hello.get("type") == "handshake/resp" and all(
            w.get("type") == "toolkit/list/resp" for w in warm
        )
        asked = time.monotonic()
        await _admin(http, a, operator, "/v1/tokens/revoke", {"principal": name, "confirm": name})
        acknowledged = time.monotonic()
        give_up = acknowledged + REVOCATION_BOUND + WAIT
        while time.monotonic() < give_up:
            sent = time.monotonic()
            reply = await probe.ask(LIST)
            refused = reply.get("http_status") == 401 and reply.get("code") == "UNAUTHORIZED"
            if not refused and reply.get("type") != "toolkit/list/resp":
                raise RuntimeError(f"the revocation probe got {reply.get('code')}")
            if refused and seen.revoked_refused_after_s is None and sent >= asked:
                seen.revoked_refused_after_s = round(max(0.0, sent - acknowledged), 3)
            if sent >= acknowledged + REVOCATION_BOUND:
                seen.probes_after_bound += 1
                seen.accepted_after_bound += not refused
                if seen.probes_after_bound >= 3:
                    break
            await asyncio.sleep(0.02)
        try:  # sent past the bound too: an UNAUTHORIZED error, then the close
            answer = await socket.ask(LIST)
        except (ConnectionError, aiohttp.ClientError):
            answer = {"type": "error", "code": "websocket closed"}
        seen.websocket_refused = answer.get("code") == "UNAUTHORIZED" or (
            answer.get("type") == "error" and str(answer.get("code", "")).startswith("websocket")
        )


async def _purge(
    http: aiohttp.ClientSession,
    a: Running,
    b: Running,
    operator: str,
    token: str,
    tally: Tally,
    seen: Crossings,
) -> None:
    """A session bound on both, configured for the first time on A: B's next list says so;
    purged on A: B's next list says so too."""
    async with _channel(http, a, token, False) as on_a, _channel(http, b, token, False) as on_b:
        await on_a.handshake()
        session = on_a.session
        assert session is not None
        await on_b.handshake(session)
        if _configured(await on_b.ask(LIST), "bench") is not False:
            raise RuntimeError("B lists a toolkit nobody configured")
        secret = _fresh_secret()
        if (await on_a.ask(_configure(secret))).get("status") != "ok":
            raise RuntimeError("the purge check's configure failed")
        tally.acked[session] += 1
        tally.purged.add(session)
        seen.configure_seen_by_next_list = _configured(await on_b.ask(LIST), "bench") is True
        await _admin(http, a, operator, "/v1/purge", {"session": session, "confirm": session})
        acknowledged = time.monotonic()
        seen.purge_seen_by_next_list = _configured(await on_b.ask(LIST), "bench") is False
        while time.monotonic() < acknowledged + WAIT:
            if _configured(await on_b.ask(LIST), "bench") is False:
                seen.purge_seen_after_s = round(time.monotonic() - acknowledged, 3)
                break
            await asyncio.sleep(0.05)


async def _import(
    http: aiohttp.ClientSession,
    servers: list[Running],
    token: str,
    env: dict[str, str],
    work: Path,
    seen: Crossings,
) -> None:
    """`toolkits import` in a process of its own: both servers list the toolkit next."""
    name = f"replica-import-{uuid.uuid4().hex[:8]}"
    source = work / "import.json"
    server = {"command": "npx", "args": ["-y", "@example/replica-probe"]}
    source.write_text(json.dumps({"mcpServers": {name: server}}))
    async with (
        _channel(http, servers[0], token, False) as on_a,
        _channel(http, servers[1], token, False) as on_b,
    ):
        await on_a.handshake()
        await on_b.handshake()
        done = await asyncio.to_thread(
            subprocess.run,
            [*BIN_ARGV, "toolkits", "import", str(source), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"toolkits import failed: {done.stderr.strip()[-500:]}")
        acknowledged = time.monotonic()
        first = [await c.ask(LIST) for c in (on_a, on_b)]
        seen.import_seen_by_next_lists = all(_configured(r, name) is not None for r in first)
        while time.monotonic() < acknowledged + WAIT:
            lists = [await c.ask(LIST) for c in (on_a, on_b)]
            if all(_configured(r, name) is not None for r in lists):
                seen.import_seen_after_s = round(time.monotonic() - acknowledged, 3)
                break
            await asyncio.sleep(0.05)


async def _push(
    http: aiohttp.ClientSession, a: Running, b: Running, token: str, seen: Crossings
) -> None:
    """A session's WebSocket on B hears the status event of a configure made on A."""
    async with _channel(http, b, token, True) as on_b, _channel(http, a, token, False) as on_a:
        await on_b.handshake()
        await on_a.handshake(on_b.session)
        sent = time.monotonic()
        if (await on_a.ask(_configure(_fresh_secret()))).get("status") != "ok":
            raise RuntimeError("the push check's configure failed")
        # acknowledged, but the soak's tally does not own this session: history counts it
        event = await on_b.next_event(WAIT)
        if event is not None and event.get("type") == STATUS_EVENT:
            seen.push_relayed_after_s = round(time.monotonic() - sent, 3)


async def _drive(
    servers: list[Running],
    agents: list[str],
    side: dict[str, str],
    env: dict[str, str],
    work: Path,
    seconds: float,
    relay: bool,
) -> tuple[Tally, Crossings, float, dict[str, float]]:
    tally, seen = Tally(), Crossings()
    stop = asyncio.Event()
    a, b = servers
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        started = time.monotonic()
        load = [
            asyncio.create_task(_agent(http, servers, token, i, stop, tally))
            for i, token in enumerate(agents)
        ]
        crossed: dict[str, float] = {}
        try:
            await asyncio.sleep(min(1.0, seconds / 5))
            await asyncio.gather(  # at once: the slowest, the import's cold CLI, sets the pace
                _revocation(http, a, b, side["operator"], seen),
                _purge(http, a, b, side["operator"], side["purged"], tally, seen),
                _import(http, servers, side["observer"], env, work, seen),
                *([_push(http, a, b, side["pushed"], seen)] if relay else []),
            )
            crossed["side_checks_s"] = round(time.monotonic() - started, 1)
            await asyncio.sleep(max(0.0, started + seconds - time.monotonic()))
        finally:
            stop.set()
            outcomes = await asyncio.gather(*load, return_exceptions=True)
        elapsed = time.monotonic() - started
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            tally.errors[f"client: {type(outcome).__name__}"] += 1
    return tally, seen, elapsed, crossed


def _commands(env: dict[str, str], *commands: list[str]) -> list[tuple[int, Any]]:
    """Run CLI commands side by side (each a cold process); their exit codes and JSON."""
    running = [
        subprocess.Popen(
            [*BIN_ARGV, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for args in commands
    ]
    answers = []
    for process in running:
        out, err = process.communicate(timeout=600)
        try:
            answers.append((process.returncode, json.loads(out)))
        except ValueError:
            answers.append((process.returncode, {"stderr": err.strip()[-500:]}))
    return answers


def _stale_sessions(settings: VaultSettings, tally: Tally) -> list[str]:
    """Sessions whose current version does not hold the secret of their last acknowledged
    configure: each opened through the service API here (the values stay in memory)."""
    vault = open_vault(settings, bench_registry(1))
    stale = []
    try:
        for session, secret in tally.last.items():
            if session in tally.purged:
                continue
            current = [
                r for r in vault.store.current_versions(session) if r.toolkit_name == "bench"
            ]
            if len(current) != 1 or vault.decrypt(current[0]).get("api_key") != secret:
                stale.append(session)
    finally:
        vault.store.engine.dispose()
    return stale


def _start_both(
    stack: contextlib.ExitStack[Any],
    home: Path,
    url: str,
    plugins: Path,
    work: Path,
    extra: dict[str, str],
) -> list[Running]:
    """Process A and process B, started side by side (a cold start takes seconds)."""
    starting = [
        vault_server(home, url, plugins, work / f"serve-{n}.log", extra=extra) for n in "ab"
    ]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(server.__enter__) for server in starting]
        wait(futures)
    for server, future in zip(starting, futures, strict=True):
        if future.exception() is None:
            stack.push(server)  # stopped on the way out, whatever happens next
    return [future.result() for future in futures]


def soak(
    url: str, work: Path, clients: int, seconds: float, log: Callable[[str], Any]
) -> dict[str, Any]:
    """One soak of two `serve` processes on `url` (an empty database); its JSON summary."""
    plugins = install_entry_point(work / "plugins")
    home = work / "home"
    settings = VaultSettings(home, url, "file", str(uuid.uuid4()), initialized=False)
    init_vault(settings)
    settings = dataclasses.replace(settings, initialized=True)
    vault = open_vault(settings, bench_registry(1))
    try:
        principals = [
            create_token(vault.store, "agent", f"replica-agent-{n}")[1]
            for n in range((clients + 1) // 2)
        ]
        agents = [principals[n // 2] for n in range(clients)]  # two clients a principal
        side = {
            "operator": create_token(vault.store, "operator", "replica-operator")[1],
            "purged": create_token(vault.store, "agent", "replica-purged")[1],
            "observer": create_token(vault.store, "agent", "replica-observer")[1],
            "pushed": create_token(vault.store, "agent", "replica-pushed")[1],
        }
    finally:
        vault.store.engine.dispose()
    # an inherited PYTHONPATH stays first: scripts/mutants puts its mutated copy there
    paths = [os.environ.get("PYTHONPATH", ""), str(plugins), str(ROOT)]
    python_path = {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env |= {"TOOLKIT_VAULT_HOME": str(home), "TOOLKIT_VAULT_DATABASE_URL": url} | python_path
    relay = url.startswith("postgresql")
    with contextlib.ExitStack() as stack:
        servers = _start_both(stack, home, url, plugins, work, python_path)
        log(f"replicas: {clients} clients over 2 processes for {seconds:g} s")
        cpu = [cpu_seconds(s.pid) for s in servers]
        tally, seen, elapsed, crossed = asyncio.run(
            _drive(servers, agents, side, env, work, seconds, relay)
        )
        cpu = [cpu_seconds(s.pid) - before for s, before in zip(servers, cpu, strict=True)]
    (_, history), (verified, audit), (checked, check) = _commands(
        env,
        ["history", "--toolkit", "bench", "--json"],
        ["audit", "verify", "--json"],
        ["check", "--json"],
    )
    stored = Counter(v["session_id"] for v in history["versions"])
    lost = sum(max(0, n - stored.get(s, 0)) for s, n in tally.acked.items())
    unacknowledged = sum(max(0, stored[s] - tally.acked.get(s, 0)) for s in tally.acked)
    stale = _stale_sessions(settings, tally)
    total = sum(tally.requests)
    return {
        "clients": clients,
        "seconds": round(elapsed, 2),
        "requests": total,
        "throughput": round(total / elapsed, 1),
        "per_process": [round(n / elapsed, 1) for n in tally.requests],
        "server_cpu_ms": [
            round(c / n * 1000, 3) if n else None for c, n in zip(cpu, tally.requests, strict=True)
        ],
        "latency": {
            kind: {
                "n": len(values),
                "p50_ms": round(statistics.median(values) * 1000, 1),
                "p99_ms": round(sorted(values)[int(0.99 * (len(values) - 1))] * 1000, 1),
            }
            for kind, values in tally.latency.items()
            if values
        },
        "errors": dict(tally.errors),
        "sessions": len(tally.acked),
        "acknowledged": sum(tally.acked.values()),
        "stored": sum(stored[s] for s in tally.acked),
        "lost": lost,
        "unacknowledged_stored": unacknowledged,
        "stale_sessions": len(stale),
        "audit_verifies": verified == 0 and audit.get("ok") is True,
        "check_passes": checked == 0 and check.get("ok") is True,
        "check_problems": None if checked == 0 else _problems(check),
        **dataclasses.asdict(seen),
        **crossed,
    }


def _problems(check: dict[str, Any]) -> dict[str, Any]:
    """What `check --json` found wrong: counts and names (it never prints a value)."""
    keys = ("failed", "no_ciphertext", "failed_versions", "state_problems", "audit", "stderr")
    return {k: check[k] for k in keys if check.get(k)}


def clean(summary: dict[str, Any]) -> bool:
    """Whether a soak's summary shows two processes acting as one vault."""
    return (
        not summary["errors"]
        and summary["lost"] == 0
        and summary["unacknowledged_stored"] == 0
        and summary["stale_sessions"] == 0
        and summary["audit_verifies"]
        and summary["check_passes"]
        and summary["token_created_on_a_works_on_b"]
        and summary["accepted_after_bound"] == 0
        and summary["probes_after_bound"] > 0
        and summary["websocket_refused"]
        and summary["configure_seen_by_next_list"]
        and summary["purge_seen_by_next_list"]
        and summary["import_seen_by_next_lists"]
    )


def run(ctx: Context) -> list[Result]:
    """The scenario: PostgreSQL only (replicas share a server; two processes on one SQLite
    file are one machine). Rows: requests/s of each process, then the crossings."""
    if "postgres" not in ctx.databases:
        ctx.log("replicas: PostgreSQL only; skipped")
        return []
    clients, seconds = ctx.scale.soak_clients, ctx.scale.soak_seconds
    with ctx.database("postgres", ctx.work / "replicas") as url:
        summary = soak(url, ctx.work / "replicas", clients, seconds, ctx.log)
    ok = clean(summary)
    ctx.log(f"replicas: {json.dumps(summary)}")
    case = f"2 processes, {clients} clients, {summary['seconds']:g} s"
    rows = []
    for name, rate, cpu in zip("AB", summary["per_process"], summary["server_cpu_ms"], strict=True):
        rows.append(
            Result(
                "replicas",
                "postgres",
                f"{case}: process {name} ({cpu:.2f} ms CPU a request)",
                "req/s",
                rate,
                "-",
                0.0,
                0.0,
                "no error, no lost write",
                ok,
                {"summary": summary},
            )
        )
    errors = sum(summary["errors"].values())
    delay = summary["revoked_refused_after_s"]
    for label, value, target in (
        ("errors", float(errors), "0"),
        ("lost writes", float(summary["lost"] + summary["stale_sessions"]), "0"),
        ("revocation on A refused by B after", -1.0 if delay is None else delay, "<= 1 s"),
    ):
        unit = "s" if label.startswith("revocation") else "count"
        rows.append(
            Result(
                "replicas", "postgres", f"{case}: {label}", unit, value, "-", 0.0, 0.0, target, ok
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replicas", description=__doc__)
    parser.add_argument("--database-url", required=True, help="an empty database")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    if not 2 <= args.clients <= 500 or not 1 <= args.seconds <= 600:
        parser.error("--clients must be 2..500 and --seconds 1..600")
    with tempfile.TemporaryDirectory(prefix="tkv-replicas-") as work:
        summary = soak(
            args.database_url,
            Path(work),
            args.clients,
            args.seconds,
            lambda m: print(m, file=sys.stderr),
        )
    print(json.dumps(summary))
    return 0 if clean(summary) else 1


if __name__ == "__main__":
    raise SystemExit(main())
