"""configure: one call = validate, split, seal, initialize, append a version and audit it,
in one transaction, through the service API (`A2EConnection.handle_raw`, as every transport).

Baselines on the same engine (same connection settings, same write transaction):
- floor: a plain insert of the same config JSON, in clear, into one table;
- StringEncryptedType: sqlalchemy-utils `StringEncryptedType(Unicode, key, AesGcmEngine)`
  holding the whole config JSON (what many Python apps do).
A third variant of ours, the transaction alone (`Store.append_version` of a version sealed
once beforehand: the state read, the four writes and the audit link, none of the parsing,
validation, sealing or initialization), shows how the cost divides between the two.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, Text, Unicode, insert

from toolkit_vault import crypto
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.store.records import VersionDraft

from .harness import (
    AGENT,
    Context,
    Result,
    count_statements,
    median,
    open_bench_vault,
    profile_top,
    timed,
    write_connection,
)
from .toolkit import bench_config, bench_registry

__all__ = ["run"]

WARMUP = 5
INTERLEAVE = 5  # each repeat alternates the three variants in this many slices


def _tables(key: str) -> tuple[MetaData, Table, Table]:
    try:
        from sqlalchemy_utils import StringEncryptedType  # type: ignore[import-untyped]
        from sqlalchemy_utils.types.encrypted.encrypted_type import (  # type: ignore[import-untyped]
            AesGcmEngine,
        )
    except ImportError:
        raise SystemExit(
            "scripts/bench: sqlalchemy-utils is missing (the `bench` extra); run scripts/bench, "
            "which installs it, or pip install -e '.[bench]'"
        ) from None

    metadata = MetaData()
    plain = Table(
        "bench_plain_configs",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("session_id", String(64), nullable=False),
        Column("toolkit_name", String(200), nullable=False),
        Column("config", Text, nullable=False),
    )
    encrypted = Table(
        "bench_encrypted_configs",
        metadata,
        Column("id", Integer, primary_key=True),
        Column("session_id", String(64), nullable=False),
        Column("toolkit_name", String(200), nullable=False),
        Column("config", StringEncryptedType(Unicode, key, AesGcmEngine), nullable=False),
    )
    return metadata, plain, encrypted


def run(ctx: Context) -> list[Result]:
    results: list[Result] = []
    for database in ctx.databases:
        with ctx.database(database, ctx.work / f"configure-{database}") as url:
            results += _measure(ctx, database, url)
    return results


def _measure(ctx: Context, database: str, url: str) -> list[Result]:
    home = ctx.work / f"configure-{database}" / "home"
    vault = open_bench_vault(home, url, bench_registry(1))
    engine = vault.store.engine
    metadata, plain, encrypted = _tables(os.urandom(32).hex())
    metadata.create_all(engine)
    conn = connect(vault, AGENT)
    hello = json.loads(conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')[0])
    session_id = hello["session_id"]
    counter = [0]

    def ours(n: int) -> None:
        for _ in range(n):
            counter[0] += 1
            _configure(conn, counter[0])

    def baseline(table: Table) -> Callable[[int], None]:
        def insert_configs(n: int) -> None:
            for _ in range(n):
                counter[0] += 1
                config = json.dumps(bench_config(counter[0]))
                with write_connection(engine) as db:
                    db.execute(
                        insert(table).values(
                            session_id=session_id, toolkit_name="bench", config=config
                        )
                    )

        return insert_configs

    def transaction_only(n: int) -> None:
        for _ in range(n):
            vault.store.append_version(session_id, "bench", prebuilt, "configure")

    prebuilt = _prebuilt_draft(vault, session_id)
    runs = {
        "ours": ours,
        "floor": baseline(plain),
        "encrypted": baseline(encrypted),
        "transaction": transaction_only,
    }
    for work in runs.values():
        work(WARMUP)
    statements = {}
    for name in ("ours", "floor"):
        with count_statements(vault.store) as counted:
            runs[name](1)
        statements[name] = counted[0]
    calls = ctx.scale.configure_calls
    rates: dict[str, list[float]] = {name: [] for name in runs}
    chunk = max(1, calls // INTERLEAVE)
    for _ in range(ctx.scale.configure_repeats):
        spent = dict.fromkeys(runs, 0.0)
        for start in range(0, calls, chunk):  # interleaved finely: disk drift hits all alike
            for name, work in runs.items():
                spent[name] += timed(partial(work, min(chunk, calls - start)))
        for name in runs:
            rates[name].append(calls / spent[name])
    vault.store.engine.dispose()
    ours_rate, transaction_rate = median(rates["ours"]), median(rates["transaction"])
    floor, encrypted_rate = median(rates["floor"]), median(rates["encrypted"])
    case = f"{calls} calls x {ctx.scale.configure_repeats}"
    return [
        Result(
            "configure",
            database,
            case,
            "configs/s",
            ours_rate,
            "plain insert (floor)",
            floor,
            ours_rate / floor,
            ">= 0.5x",
            ours_rate / floor >= 0.5,
            {"runs": rates},
        ),
        Result(
            "configure",
            database,
            case,
            "configs/s",
            ours_rate,
            "StringEncryptedType",
            encrypted_rate,
            ours_rate / encrypted_rate,
            ">= 1.0x",
            ours_rate >= encrypted_rate,
        ),
        Result(
            "configure transaction only",
            database,
            case,
            "configs/s",
            transaction_rate,
            "plain insert (floor)",
            floor,
            transaction_rate / floor,
        ),
        Result(
            "configure statements",
            database,
            "one call",
            "statements/call",
            statements["ours"],
            "plain insert (floor)",
            statements["floor"],
            statements["ours"] / statements["floor"],
        ),
    ]


def _prebuilt_draft(vault: Vault, session_id: str) -> Callable[[int, str], VersionDraft]:
    """`build` for `append_version` returning one version sealed once, whatever its number:
    the store neither reads envelopes back nor checks them, so the row is as costly to write
    (a real configure reseals only when its number was taken meanwhile)."""
    toolkit = vault.registry.get("bench")
    public, secrets = toolkit.schema.split(bench_config(0))
    public_bound = crypto.public_digest(public)
    context = crypto.RecordContext(session_id, "bench", 1, toolkit.schema.digest, public_bound)
    sealed = crypto.seal_config(vault.ring, crypto.new_key(), context, secrets)
    draft = VersionDraft.of("ok", None, AGENT.principal_id, toolkit.schema.digest, public, sealed)
    return lambda _version, _primary: draft


def _configure(conn: A2EConnection, n: int) -> None:
    message = {"type": "toolkit/configure/req", "toolkit_name": "bench", "config": bench_config(n)}
    reply: dict[str, Any] = json.loads(conn.handle_raw(json.dumps(message))[0])
    if reply.get("status") != "ok":
        raise RuntimeError(f"configure failed: {reply}")


def bound(results: list[Result]) -> str:
    """What bounds the missed configure targets, with this run's figures."""
    rows = {(r.scenario, r.database, r.baseline_name): r for r in results}
    figures = []
    for database in dict.fromkeys(r.database for r in results):
        whole = rows[("configure", database, "plain insert (floor)")]
        alone = rows[("configure transaction only", database, "plain insert (floor)")]
        encrypted = rows[("configure", database, "StringEncryptedType")]
        figures.append(
            f"on {database}, the floor took {1000 / whole.baseline:.2f} ms a call and "
            f"StringEncryptedType {1000 / encrypted.baseline:.2f} ms; the transaction alone "
            f"{1000 / alone.ours:.2f} ms ({alone.ratio:.2f}x the floor's rate) and the whole "
            f"configure {1000 / whole.ours:.2f} ms ({whole.ratio:.2f}x)"
        )
    return _BOUND.format(figures="; ".join(figures))


_BOUND = """\
What bounds the ratio is the write transaction the design requires, and the `configure
transaction only` rows time it alone in the same run: `Store.append_version` of a version
sealed once beforehand, none of the parsing, validation, sealing or initialization. It reads
the write state in one statement (latest version, primary KEK, current pointer, the audit
chain's end), inserts the version, moves the current pointer by compare-and-set, appends the
audit event (RFC 8785 payload, two HMACs) and moves the authenticated chain head. On SQLite
that is `BEGIN IMMEDIATE` and five statements where the floor sends one insert, and a commit
that writes the pages of four tables and their indexes instead of one. On PostgreSQL it is
the advisory lock that queues the audit chain's writers, the read, and the four writes as one
statement of data-modifying CTEs: six round trips with psycopg's `BEGIN`, SQLAlchemy's pool
pre-ping and `COMMIT`, against the floor's four. In this run {figures}. The transaction alone
runs at about half the floor's rate or below, so any validation and sealing at all puts a
whole configure under 0.5x on this machine, whose fsync is fast (a commit costs a fraction
of a millisecond, so the statements and the CPU show). Both sides pay one commit, so the
ratio rises with the disk's commit latency: in an earlier full run with a busy disk, SQLite
reached 0.85x. `StringEncryptedType` is one insert plus one AES-GCM and runs within about
10% of the floor: the >= 1x target asks a configure to cost no more than a plain insert,
which no version history, compare-and-set pointer and audit chain in the same transaction
can meet. The profile below shows where the rest goes.
Fixed along the way: every statement was built anew per call (SQLAlchemy statement
construction cost more CPU than everything else in a configure); a separate read fetched the
next version number before the write; the chain end was a second read; on PostgreSQL the four
writes were four round trips (they are one statement now: 5.9 to 3.9 ms a configure, measured
alone); the secret split recomputed its schema closure on every call (now memoized per schema
node set, bounded: 0.10 to 0.05 ms); and the sealed config was opened again before
`initialize` (the toolkit now gets the validated config it was sent)."""


def profile(ctx: Context, database: str) -> list[str]:
    """Our configure loop under cProfile, on a fresh store."""
    directory = ctx.work / f"configure-profile-{database}"
    with ctx.database(database, directory) as url:
        vault = open_bench_vault(directory / "home", url, bench_registry(1))
        conn = connect(vault, AGENT)
        conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')
        for n in range(WARMUP):
            _configure(conn, n)
        calls = ctx.scale.configure_calls

        def work() -> None:
            for n in range(calls):
                _configure(conn, WARMUP + n)

        lines = profile_top(work)
        vault.store.engine.dispose()
    return [f"{calls} configure calls on {database}", *lines]
