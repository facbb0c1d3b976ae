"""initialize after restart: a cold `toolkit-vault stdio` process, timed from spawn to the
handshake response that resumes a session whose `bench` toolkit (2 secrets) is configured:
start-up, key load, decrypt and `initialize` all happen before that response. A list then
checks that the toolkit is configured. The baseline is the same cold process answering a
handshake that opens a new session (nothing to decrypt), measured in the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from toolkit_vault.core.connection import connect

from .harness import AGENT, Context, Result, median, open_bench_vault
from .toolkit import bench_config, bench_registry, install_entry_point

__all__ = ["run"]

ROOT = Path(__file__).resolve().parents[1]


def _command() -> list[str]:
    script = Path(sys.executable).parent / "toolkit-vault"
    if script.exists():
        return [str(script), "stdio"]
    return [sys.executable, "-c", "from toolkit_vault.cli import main; main()", "stdio"]


def _cold_handshake(env: dict[str, str], session_id: str | None, errors: Path) -> float:
    hello: dict[str, Any] = {"type": "handshake/req", "capabilities": ["toolkits"]}
    if session_id:
        hello["session_id"] = session_id
    with errors.open("ab") as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen(
            _command(),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(hello) + "\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline() or "{}")
        elapsed = time.perf_counter() - start
        proc.stdin.write('{"type":"toolkit/list/req"}\n')
        proc.stdin.flush()
        listed = json.loads(proc.stdout.readline() or "{}")
        proc.stdin.close()
        proc.wait(timeout=60)
    if reply.get("type") != "handshake/resp":
        raise RuntimeError(f"cold handshake failed: {reply}; see {errors}")
    configured = {t["name"]: t["configured"] for t in listed.get("toolkits", [])}
    if configured.get("bench") is not bool(session_id):
        raise RuntimeError(f"bench is not configured as expected after restart: {configured}")
    return elapsed


def run(ctx: Context) -> list[Result]:
    results = []
    for database in ctx.databases:
        directory = ctx.work / f"restart-{database}"
        with ctx.database(database, directory) as url:
            results.append(_measure(ctx, database, url, directory))
    return results


def _measure(ctx: Context, database: str, url: str, directory: Path) -> Result:
    home = directory / "home"
    vault = open_bench_vault(home, url, bench_registry(1))
    conn = connect(vault, AGENT)
    hello = json.loads(conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')[0])
    session_id = hello["session_id"]
    message = {"type": "toolkit/configure/req", "toolkit_name": "bench", "config": bench_config(1)}
    if json.loads(conn.handle_raw(json.dumps(message))[0])["status"] != "ok":
        raise RuntimeError("could not configure the restart session")
    vault.store.engine.dispose()
    plugins = install_entry_point(directory / "plugins")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env["TOOLKIT_VAULT_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), str(ROOT), env.get("PYTHONPATH", "")])
    errors = directory / "stderr.log"
    _cold_handshake(env, session_id, errors)  # the first start also fills the OS file cache
    resumed: list[float] = []
    fresh: list[float] = []
    for _ in range(ctx.scale.restart_repeats):
        resumed.append(_cold_handshake(env, session_id, errors) * 1000)
        fresh.append(_cold_handshake(env, None, errors) * 1000)
    ours, baseline = median(resumed), median(fresh)
    return Result(
        "restart",
        database,
        "cold process, 1 configured toolkit",
        "ms",
        ours,
        "cold process, new session",
        baseline,
        ours / baseline,
        extra={"runs": {"resumed": resumed, "new": fresh}},
    )
