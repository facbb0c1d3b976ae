"""history: a vault with a long audit chain answers as soon as an empty one (issue 53).

The fill builds a large vault fast through the store's own write path: `Store.write` (the
chain's lock, the witness, the ledger) and `Store.audit_many`, `BATCH` events a
transaction. Most are tool calls (what a busy vault's chain is mostly made of); every
`STATE_EVERY`-th is a token made or revoked, so the state a checkpoint holds grows with
live entities. At the end the fill writes a checkpoint, as a server following the chain
does every `checkpoints.EVERY_EVENTS` events.

Then, alternating between the empty vault and the large one (same run, same machine
state), each a cold process: `tokens list`, `toolkits list`, the first answer of `stdio`
(spawn to handshake response), and a replica's first list (`open_vault`, the chain
followed, a session's `toolkit/list`), with its peak memory (`ru_maxrss` of the child).
`--no-checkpoint` leaves checkpoints out (none written, by the fill or by the processes
timed, which otherwise write one after a long walk): the whole walk, for comparison.

    python -m benchmarks.history --events 100000 [--database postgres] [--runs 5]

`scripts/bench --only history` runs the same as a scenario of the table (on demand: it
fills 1,000,000 events at full scale, 100,000 at `--quick`), each figure against the empty
vault's with issue 53's line (<= 2x).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from toolkit_vault.access.principals import create_token, revoke
from toolkit_vault.core.vault import Vault
from toolkit_vault.store import checkpoints
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.checkpoints import CHECKPOINT_RECORD
from toolkit_vault.store.records import AuditDraft

from .harness import Context, Result, open_bench_vault, postgres_admin_url, scratch_database
from .restart import _cold_handshake
from .toolkit import bench_registry, install_entry_point

__all__ = ["fill_events", "main", "run"]

ROOT = Path(__file__).resolve().parents[1]
BATCH = 5000  # events a transaction
NEVER = 10**15  # `--no-checkpoint`'s checkpoint interval
SCENARIO_EVENTS = {"full": 1_000_000, "quick": 100_000, "tiny": 2_000}
TARGET = 2.0  # issue 53: the large vault's figure at most twice the empty one's
CASES = {  # figure: (the table's case, unit)
    "tokens_list_s": ("`tokens list`, a cold process", "s"),
    "toolkits_list_s": ("`toolkits list`, a cold process", "s"),
    "stdio_first_answer_s": ("`stdio`: spawn to the handshake's answer", "s"),
    "replica_first_list_s": ("a replica's first list", "s"),
    "replica_peak_rss_mb": ("a replica's peak memory (+ live entities)", "MB"),
}
STATE_EVERY = 100  # one state event in this many: a token made (and every 4th revoked)

_REPLICA = r"""
import json, sys, time
started = time.perf_counter()
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.settings import load_settings
from benchmarks.harness import AGENT
vault = open_vault(load_settings())
conn = connect(vault, AGENT)
conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')
listed = json.loads(conn.handle_raw(b'{"type":"toolkit/list/req"}')[0])
elapsed = time.perf_counter() - started
assert listed["type"] == "toolkit/list/resp", listed
print(json.dumps({
    "s": elapsed,
    "rss_mb": next(  # VmHWM: this process's own peak (ru_maxrss keeps the forking parent's)
        int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")
    ) / 1024,
    "started_from": vault.store.checkpoints.started_from,
}))
"""


def fill_events(vault: Vault, events: int, log: Any = print) -> float:
    """`events` audit events through the store's write path; returns the seconds taken."""
    started = time.perf_counter()
    store, written, made = vault.store, 0, 0
    while written < events:
        drafts: list[AuditDraft] = []
        for n in range(written, min(events, written + BATCH)):
            if n % STATE_EVERY == 0:
                made += 1
                details = {"principal_id": f"fill-{made}", "name": f"fill-{made}", "role": "agent"}
                drafts.append(AuditDraft("operator", AuditAction.TOKEN_CREATED, details=details))
            elif n % (STATE_EVERY * 4) == 1:
                details = {"principal_id": f"fill-{made}"}
                drafts.append(AuditDraft("operator", AuditAction.TOKEN_REVOKED, details=details))
            else:
                details = {"tool": "bench_echo", "outcome": "ok", "ms": n % 97}
                drafts.append(
                    AuditDraft(
                        f"fill-{made}", AuditAction.TOOL_CALLED, f"s-{made}", "bench", None, details
                    )
                )
        with store.write() as conn:
            store.audit_many(conn, drafts)
        written += len(drafts)
        if written % (BATCH * 20) == 0:
            log(f"history: {written:,} of {events:,} events")
    return time.perf_counter() - started


def _cli_s(env: dict[str, str], *argv: str) -> float:
    script = Path(sys.executable).parent / "toolkit-vault"
    start = time.perf_counter()
    done = subprocess.run([str(script), *argv], env=env, capture_output=True, timeout=3600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv} failed: {done.stderr.decode()[-800:]}")
    return elapsed


def _replica(env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _REPLICA],
        env=env,
        capture_output=True,
        text=True,
        timeout=7200,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the replica failed: {done.stderr[-1500:]}")
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _home(work: Path, name: str, url: str, events: int, checkpoint: bool, log: Any) -> Path:
    home = work / name
    vault = open_bench_vault(home, url, bench_registry(1))
    try:
        create_token(vault.store, "agent", "history-agent")
        _, _ = create_token(vault.store, "agent", "history-revoked")
        revoke(vault.store, "history-revoked")
        if events:
            took = fill_events(vault, events, log)
            log(f"history: {events:,} events filled in {took:.1f} s ({events / took:,.0f}/s)")
        if checkpoint and events:
            seq = vault.store.write_checkpoint()
            log(f"history: checkpoint at event {seq}")
        if vault.store.witness is not None:
            vault.store.witness.flush()
    finally:
        vault.store.engine.dispose()
    if not checkpoint:
        (home / CHECKPOINT_RECORD).unlink(missing_ok=True)
    return home


def measure(
    url_of: Any, work: Path, events: int, runs: int, checkpoint: bool, log: Any
) -> dict[str, Any]:
    plugins = install_entry_point(work / "plugins")
    homes = {
        "empty": _home(work, "empty", url_of("empty"), 0, checkpoint, log),
        "large": _home(work, "large", url_of("large"), events, checkpoint, log),
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    if not checkpoint:
        base["TOOLKIT_VAULT_CHECKPOINT_EVENTS"] = str(NEVER)
    base["PYTHONPATH"] = os.pathsep.join([str(plugins), str(ROOT), base.get("PYTHONPATH", "")])
    envs = {name: {**base, "TOOLKIT_VAULT_HOME": str(home)} for name, home in homes.items()}
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in homes}

    def add(name: str, figure: str, value: float) -> None:
        samples[name].setdefault(figure, []).append(value)

    def timed(name: str, figure: str, work: Any) -> Any:
        """`work()`'s wall time, and its child's CPU time (the machine is shared: CPU
        seconds move less with the load than wall seconds)."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        value = work()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        add(name, figure.replace("_s", "_cpu_s"), cpu)
        return value

    for env in envs.values():  # warm the OS cache (and the first start's file reads)
        _cli_s(env, "tokens", "list")
    for n in range(runs):
        for name, env in envs.items():
            add(
                name,
                "tokens_list_s",
                timed(name, "tokens_list_s", partial(_cli_s, env, "tokens", "list")),
            )
            add(
                name,
                "toolkits_list_s",
                timed(name, "toolkits_list_s", partial(_cli_s, env, "toolkits", "list")),
            )
            stdio = partial(_cold_handshake, env, None, work / "stdio.log")
            add(name, "stdio_first_answer_s", timed(name, "stdio_s", stdio))
            replica = timed(name, "replica_s", partial(_replica, env))
            add(name, "replica_first_list_s", replica["s"])
            add(name, "replica_peak_rss_mb", replica["rss_mb"])
            add(name, "started_from", replica["started_from"])
        log(f"history: run {n + 1} of {runs}")
    figures: dict[str, Any] = {"events": events, "runs": runs, "checkpoint": checkpoint}
    for name in homes:
        figures[name] = {k: round(statistics.median(v), 3) for k, v in samples[name].items()}
    figures["ratio"] = {
        k: round(figures["large"][k] / figures["empty"][k], 2)
        for k in figures["empty"]
        if k != "started_from" and figures["empty"][k]
    }
    figures["fill_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return figures


def run(ctx: Context) -> list[Result]:
    events = SCENARIO_EVENTS.get(ctx.scale.name, 100_000)
    runs = 3 if ctx.scale.name == "full" else 1
    results: list[Result] = []
    for database in ctx.databases:
        work = ctx.work / f"history-{database}"
        with (
            ctx.database(database, work / "empty") as empty,
            ctx.database(database, work / "large") as large,
        ):
            urls = {"empty": empty, "large": large}
            figures = measure(urls.__getitem__, work, events, runs, True, ctx.log)
        for figure, (case, unit) in CASES.items():
            ours, theirs = figures["large"][figure], figures["empty"][figure]
            ratio = ours / theirs if theirs else float("inf")
            results.append(
                Result(
                    "history",
                    database,
                    f"{case}, {events:,} events",
                    unit,
                    ours,
                    "the same on an empty vault",
                    theirs,
                    ratio,
                    f"<= {TARGET:g}x",
                    ratio <= TARGET,
                    {"cpu": {k: v for k, v in figures["ratio"].items() if "cpu" in k}},
                )
            )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history", description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--no-checkpoint", action="store_true")
    args = parser.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    checkpoint = not args.no_checkpoint
    if not checkpoint:  # none written by the fill, nor by the processes timed (their env)
        checkpoints.EVERY_EVENTS = NEVER
        os.environ["TOOLKIT_VAULT_CHECKPOINT_EVENTS"] = str(NEVER)
    with tempfile.TemporaryDirectory(prefix="tkv-history-") as where:
        work = Path(where)
        if args.database == "sqlite":
            figures = measure(
                lambda name: f"sqlite:///{work / name}.db",
                work,
                args.events,
                args.runs,
                checkpoint,
                log,
            )
        else:
            admin = postgres_admin_url()
            with (
                scratch_database("postgres", work / "pg-empty", admin) as empty,
                scratch_database("postgres", work / "pg-large", admin) as large,
            ):
                urls = {"empty": empty, "large": large}
                figures = measure(urls.__getitem__, work, args.events, args.runs, checkpoint, log)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
