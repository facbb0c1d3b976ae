"""`python -m benchmarks.metrics_cost`: what `/metrics` adds to an HTTP list and configure,
in CPU a request, in one process.

The A/B of `serve` with metrics on and off (`benchmarks.ab --env TOOLKIT_VAULT_METRICS=off`)
counts requests a second of two servers on a shared VM: its pairs range from 0.4x to 2x,
so a 2% effect takes many quiet runs to show. Here one app (`create_app`, on a SQLite
home with 16 agent sessions, the bench toolkit configured in each, as the network bench
sets it up) answers `POST /a2e` called as plain ASGI on one event loop, no sockets, and
the process's CPU time (`time.process_time`, every thread) is read around blocks of
requests; the blocks alternate between metrics on and off (`METRICS.enabled`, the switch
`serve` sets from `TOOLKIT_VAULT_METRICS`), so both see the same machine, and the median
of the per-pair ratios is the effect. `--profile` writes a cProfile of each setting.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import json
import logging
import os
import pstats
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from toolkit_vault.access.principals import create_token
from toolkit_vault.bootstrap import init_vault, open_provider, open_vault
from toolkit_vault.logs import configure_logging
from toolkit_vault.settings import VaultSettings
from toolkit_vault.telemetry.metrics import METRICS

from .harness import median
from .network import CONFIGURE, HELLO, LIST, PRINCIPALS
from .toolkit import bench_registry

__all__ = ["main"]

App = Any


def _scope(token: str, session: str | None) -> dict[str, Any]:
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode())]
    headers.append((b"content-type", b"application/json"))
    if session:
        headers.append((b"a2e-session", session.encode()))
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/a2e", "raw_path": b"/a2e", "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8200), "state": {},
    }  # fmt: skip


async def _post(app: App, token: str, body: str, session: str | None = None) -> bytes:
    """One `POST /a2e` through the app as uvicorn would call it; the answer's body."""
    sent: list[bytes] = []
    given = [{"type": "http.request", "body": body.encode(), "more_body": False}]

    async def receive() -> dict[str, Any]:
        return given.pop() if given else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message.get("body", b""))

    await app(_scope(token, session), receive, send)
    return b"".join(sent)


async def _setup(app: App, tokens: list[str]) -> list[str]:
    sessions = []
    for n, token in enumerate(tokens):
        session = json.loads(await _post(app, token, HELLO))["session_id"]
        reply = json.loads(await _post(app, token, CONFIGURE.replace("%d", f"s-{n}"), session))
        if reply.get("status") != "ok":
            raise RuntimeError(f"the setup configure failed: {reply}")
        sessions.append(session)
    return sessions


async def _block(app: App, case: str, tokens: list[str], sessions: list[str], n: int) -> float:
    """CPU seconds a request over `n` requests, 16 at a time (one per principal); under
    callgrind (`--instructions`), instructions a request instead."""
    body = LIST if case == "list" else CONFIGURE
    if CALLGRIND:
        await _callgrind("-z")
    started = time.process_time()
    for round_ in range(n // len(tokens)):
        await asyncio.gather(*(
            _post(app, t, body.replace("%d", f"r{round_}-{i}"), s)
            for i, (t, s) in enumerate(zip(tokens, sessions, strict=True))
        ))  # fmt: skip
    spent = time.process_time() - started
    if CALLGRIND:
        spent = await _callgrind("-d")
    return spent / (n // len(tokens) * len(tokens))


CALLGRIND: list[Path] = []  # `--instructions`: the dump file callgrind writes to


async def _callgrind(command: str) -> float:
    """`callgrind_control` on this process (`-z`: zero the counts, `-d`: dump them), the
    loop kept turning meanwhile (callgrind takes a command only while the program runs);
    after a dump, the instructions it counted since the counts were zeroed."""
    before = set(CALLGRIND[0].parent.glob(CALLGRIND[0].name + ".*"))
    control = subprocess.Popen(
        ["callgrind_control", command, str(os.getpid())], stdout=subprocess.DEVNULL
    )
    while control.poll() is None:
        await asyncio.sleep(0.005)
    if command != "-d":
        return 0.0
    (dump,) = set(CALLGRIND[0].parent.glob(CALLGRIND[0].name + ".*")) - before
    for line in dump.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return float(line.split()[1])
    raise RuntimeError(f"no totals in {dump}")


async def _run(args: argparse.Namespace, app: App, tokens: list[str]) -> None:
    sessions = await _setup(app, tokens)
    for case in args.cases:
        await _block(app, case, tokens, sessions, args.requests)  # warm up
        ratios, on_cpu, off_cpu = [], [], []
        for pair in range(args.pairs):
            got = {}
            for enabled in (True, False) if pair % 2 == 0 else (False, True):
                METRICS.enabled = enabled or args.aa
                got[enabled] = await _block(app, case, tokens, sessions, args.requests)
            on_cpu.append(got[True])
            off_cpu.append(got[False])
            ratios.append(got[True] / got[False])
        unit, scale = ("instructions", 1.0) if CALLGRIND else ("us CPU", 1e6)
        print(
            f"HTTP {case}: metrics on {median(on_cpu) * scale:.1f} {unit} a request, off "
            f"{median(off_cpu) * scale:.1f}; on/off {median(ratios):.3f}x (median of "
            f"{args.pairs} pairs of {args.requests} requests; min {min(ratios):.3f}, "
            f"max {max(ratios):.3f})",
            flush=True,
        )
        if args.profile:
            for enabled in (True, False):
                METRICS.enabled = enabled
                profiler = cProfile.Profile()
                profiler.enable()
                await _block(app, case, tokens, sessions, args.requests)
                profiler.disable()
                name = f"{args.profile}-{case}-{'on' if enabled else 'off'}.prof"
                profiler.dump_stats(name)
                stats = pstats.Stats(name, stream=sys.stdout)
                print(f"-- {name}")
                stats.sort_stats("tottime").print_stats(25)
        METRICS.enabled = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.metrics_cost", description=__doc__)
    parser.add_argument("--cases", default="list,configure")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--requests", type=int, default=2000, help="a block (a multiple of 16)")
    parser.add_argument("--aa", action="store_true", help="metrics on in both (calibration)")
    parser.add_argument("--profile", help="write PREFIX-CASE-on.prof and -off.prof")
    parser.add_argument(
        "--instructions",
        type=Path,
        help="run under valgrind --tool=callgrind --callgrind-out-file=THIS: count instructions",
    )
    args = parser.parse_args(argv)
    if args.instructions:
        CALLGRIND.append(args.instructions)
    args.cases = [c.strip() for c in args.cases.split(",")]
    from toolkit_vault.transports.http_api import create_app
    from toolkit_vault.transports.http_guards import MAX_MESSAGE_BYTES, Limits
    from toolkit_vault.transports.http_server import _settle_the_heap

    with (
        tempfile.TemporaryDirectory(prefix="tkv-metrics-", ignore_cleanup_errors=True) as tmp,
        open("/dev/null", "w") as null,
    ):
        home = Path(tmp) / "home"
        settings = VaultSettings(
            home=home, database_url=f"sqlite:///{home}/vault.db", key_provider="file",
            vault_id=str(uuid.uuid4()), initialized=False,
        )  # fmt: skip
        init_vault(settings)
        settings = dataclasses.replace(settings, initialized=True)
        vault = open_vault(settings, bench_registry(1))
        tokens = [create_token(vault.store, "agent", f"bench-{n}")[1] for n in range(PRINCIPALS)]
        stderr, sys.stderr = sys.stderr, null  # the request log, as `serve` writes it
        try:
            configure_logging("INFO", json_lines=True)
            limits = Limits(MAX_MESSAGE_BYTES, 256, 1_000_000, 2_000_000)  # as the bench serves
            app = create_app(vault, open_provider(settings), limits)
            _settle_the_heap()  # as `serve` does
            asyncio.run(_run(args, app, tokens))
        finally:
            vault.store.close()
            for handler in logging.getLogger().handlers:
                handler.flush()
                handler.close()
            logging.getLogger().handlers.clear()
            sys.stderr = stderr
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
