"""list: `toolkit/list/req` with 200 registered toolkits (10 configured in the listing
session), in a store of 100 and of 10,000 sessions (3 configured toolkits each), through
`A2EConnection.handle_raw`, each list reading the store (as it does after any commit). The
baseline is the same list at 100 sessions, measured in the same run, interleaved;
statements are counted as `harness.count_statements` says.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any

from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault

from .fill import fill_sessions
from .harness import AGENT, Context, Result, count_statements, median, open_bench_vault, timed
from .toolkit import bench_config, bench_registry

__all__ = ["TOOLKITS", "run"]

TOOLKITS = 200
CONFIGURED = 10
LIST = b'{"type":"toolkit/list/req"}'


def run(ctx: Context) -> list[Result]:
    results: list[Result] = []
    for database in ctx.databases:
        results += _measure(ctx, database)
    return results


def _prepare(ctx: Context, database: str, url: str, sessions: int) -> tuple[Vault, A2EConnection]:
    ctx.log(f"list: {database}, filling {sessions:,} sessions")
    registry = bench_registry(TOOLKITS)
    vault = open_bench_vault(ctx.work / f"list-{database}-{sessions}" / "home", url, registry)
    names = [t.definition.name for t in registry.all()]
    fill_sessions(vault, sessions, names[:3])
    conn = connect(vault, AGENT)
    conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')
    for n, name in enumerate(names[:CONFIGURED]):
        message = {"type": "toolkit/configure/req", "toolkit_name": name, "config": bench_config(n)}
        conn.handle_raw(json.dumps(message))
    return vault, conn


def _list(conn: A2EConnection) -> None:
    """One list that reads the store, as every list does after any commit (on SQLite a list
    with nothing committed since the last is answered from memory: not what this measures)."""
    conn.vault.instances.forget_reads()
    reply: dict[str, Any] = json.loads(conn.handle_raw(LIST)[0])
    listed = reply["toolkits"]
    if len(listed) != TOOLKITS or sum(t["configured"] for t in listed) != CONFIGURED:
        raise RuntimeError("the list is not what was configured")


def _measure(ctx: Context, database: str) -> list[Result]:
    small, large = ctx.scale.list_sessions
    calls = ctx.scale.list_calls
    with ExitStack() as stack:
        setups = {}
        for sessions in (small, large):
            directory = ctx.work / f"list-{database}-{sessions}"
            url = stack.enter_context(ctx.database(database, directory))
            setups[sessions] = _prepare(ctx, database, url, sessions)
        statements: dict[int, int] = {}
        costs: dict[int, list[float]] = {small: [], large: []}
        for sessions, (vault, conn) in setups.items():
            _list(conn)  # warm
            with count_statements(vault.store) as counted:
                _list(conn)
            statements[sessions] = counted[0]
        for _ in range(ctx.scale.list_repeats):
            for sessions, (_, conn) in setups.items():

                def lists(conn: A2EConnection = conn) -> None:
                    for _ in range(calls):
                        _list(conn)

                costs[sessions].append(timed(lists) / calls * 1000)
        for vault, _ in setups.values():
            vault.store.engine.dispose()
    ms = {sessions: median(values) for sessions, values in costs.items()}
    ratio = ms[large] / ms[small]
    return [
        Result(
            "list",
            database,
            f"{TOOLKITS} toolkits, {large:,} sessions",
            "ms/list",
            ms[large],
            f"same at {small:,} sessions",
            ms[small],
            ratio,
            "<= 1.5x",
            ratio <= 1.5,
            {"runs": costs},
        ),
        Result(
            "list statements",
            database,
            f"{TOOLKITS} toolkits, {large:,} sessions",
            "statements/list",
            statements[large],
            f"same at {small:,} sessions",
            statements[small],
            statements[large] / statements[small],
            "equal",
            statements[large] == statements[small],
        ),
    ]
