"""capacity: what each request costs in a large vault, for the capacity plan in BENCHMARKS.md.

A capacity plan on paper needs measured costs at the largest scale this machine fills in
minutes, and a second, smaller scale to tell what grows with the data from what does not.
So the scenario fills a database (fast, untimed) as the real writes would have left it: P
principals with tokens, one session each, V / P versions of the bench toolkit per session
(the last one current), and every audit event those writes make (token created, session
created, configure), chained by the store itself (`Store.audit_many`), so `check` and
`audit verify` pass on it. Then, through the public APIs the commands and `serve` call:

- authenticate: a bearer token looked up among P principals (`principals.authenticate`);
- resume: a handshake naming an existing session (ownership, decrypt, initialize);
- list: a `toolkit/list/req` on a resumed session, each after another session's commit;
- configure: a `toolkit/configure/req` on a random session (a new version, its event);
- keys rotate: the master key (`rotate_master_key`) and the vault key (`rotate_vault_key`,
  every data key rewrapped);
- check (every version decrypted, every row's MAC, the chain and the state it vouches for)
  and audit verify (the chain and the state);
- the database's size, and each table's, per version.

It is not part of a default `scripts/bench` run (the fill takes minutes at full scale):
`scripts/bench --only capacity [--quick]` or, at any scale,
`python -m benchmarks.capacity --principals 100000 --versions 1000000`.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import insert, text

from toolkit_vault import crypto
from toolkit_vault.access.principals import authenticate, create_token
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import RecordContext
from toolkit_vault.keys.rotation import rotate_master_key, rotate_vault_key
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import POINTERS, PRINCIPALS, SESSIONS, VERSIONS
from toolkit_vault.store.models import ConfigVersion, CurrentConfig, PrincipalRow, SessionRow
from toolkit_vault.store.records import AuditDraft, VersionDraft

from .fill import public_and_secrets
from .harness import Context, Result, open_bench_vault, scratch_database
from .toolkit import bench_config, bench_registry

__all__ = ["SIZES", "measure", "run"]

SIZES = {  # (principals, versions) by the bench's scale: the large one, then a tenth of it
    "full": ((100_000, 1_000_000), (10_000, 100_000)),
    "quick": ((10_000, 100_000), (1_000, 10_000)),
    "tiny": ((100, 1_000), (10, 100)),
}
CHUNK = 1000  # principals per fill transaction
SAMPLES = 30  # timed calls per request kind
HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
LIST = json.dumps({"type": "toolkit/list/req"})


@dataclasses.dataclass(frozen=True)
class Fill:
    principals: int
    versions: int

    @property
    def per_session(self) -> int:
        return max(1, self.versions // self.principals)


def _token(n: int) -> str:
    """Principal n's bearer token, shaped as `create_token` makes them (known here only)."""
    digest = hashlib.sha256(f"capacity-{n}".encode()).digest()
    return "tkv_" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _principal_rows(vault: Vault, first: int, count: int) -> list[dict[str, Any]]:
    rows = []
    for n in range(first, first + count):
        row = {
            "principal_id": str(uuid.UUID(int=n + 1)),
            "name": f"cap-{n:07d}",
            "role": "agent",
            "token_hash": hashlib.sha256(_token(n).encode()).hexdigest(),
            "created_at": float(n),
            "revoked_at": None,
            "expires_at": None,
        }
        rows.append({**row, "mac": vault.store.mac(PRINCIPALS, row)})
    return rows


def _version_rows(
    vault: Vault, session: str, actor: str, count: int, digest: str, seed: int
) -> list[dict[str, Any]]:
    rows = []
    for version in range(1, count + 1):
        public, secrets = public_and_secrets(seed + version)
        context = RecordContext(session, "bench", version, digest, crypto.public_digest(public))
        sealed = crypto.seal_config(vault.ring, vault._fingerprint_key, context, secrets)
        draft = VersionDraft.of(
            "ok", "Toolkit configured successfully", actor, digest, public, sealed
        )
        row = draft.columns(session, "bench", version, float(seed + version))
        rows.append({**row, "mac": vault.store.mac(VERSIONS, row)})
    return rows


def fill(vault: Vault, size: Fill, log: Callable[[str], Any] = print) -> float:
    """`size` as the real writes would leave it, chunk by chunk; returns the seconds taken."""
    started = time.perf_counter()
    digest = vault.registry.get("bench").schema.digest
    changed = sorted(public_and_secrets(0)[1])
    per = size.per_session
    for first in range(0, size.principals, CHUNK):
        count = min(CHUNK, size.principals - first)
        principals = _principal_rows(vault, first, count)
        sessions: list[dict[str, Any]] = []
        versions: list[dict[str, Any]] = []
        pointers: list[dict[str, Any]] = []
        events: list[AuditDraft] = []
        for p in principals:
            pid = p["principal_id"]
            details = {"principal_id": pid, "name": p["name"], "role": "agent"}
            events.append(AuditDraft("operator", AuditAction.TOKEN_CREATED, details=details))
        for p in principals:
            pid, session = p["principal_id"], f"cap-{p['name'][4:]}-{uuid.uuid4().hex[:8]}"
            row = {"session_id": session, "principal_id": pid, "created_at": p["created_at"]}
            sessions.append({**row, "mac": vault.store.mac(SESSIONS, row)})
            events.append(AuditDraft(pid, AuditAction.SESSION_CREATED, session_id=session))
            versions += _version_rows(vault, session, pid, per, digest, len(versions) + first * per)
            for version in range(1, per + 1):
                details = {"status": "ok", "changed": changed}
                events.append(
                    AuditDraft(pid, AuditAction.CONFIGURE, session, "bench", version, details)
                )
            target = {"session_id": session, "toolkit_name": "bench", "version": per}
            pointers.append({**target, "updated_at": 0.0, "mac": vault.store.mac(POINTERS, target)})
        with vault.store.engine.begin() as conn:
            conn.execute(insert(PrincipalRow), principals)
            conn.execute(insert(SessionRow), sessions)
            for start in range(0, len(versions), 2000):
                conn.execute(insert(ConfigVersion), versions[start : start + 2000])
            conn.execute(insert(CurrentConfig), pointers)
            vault.store.audit_many(conn, events)
        done = first + count
        if done % (CHUNK * 10) == 0 or done == size.principals:
            log(f"capacity: filled {done:,} of {size.principals:,} principals")
    return time.perf_counter() - started


FIGURES = (  # key in `measure`'s figures, label, unit
    ("open_s", "open the vault (a replica's start)", "s"),
    ("keys_rotate_s", "keys rotate", "s"),
    ("vault_key_rotate_s", "keys rotate --vault-key", "s"),
    ("check_s", "check", "s"),
    ("audit_verify_s", "audit verify", "s"),
    ("bytes_per_version", "database size per version", "bytes"),
)


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def _timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _sessions(vault: Vault, count: int) -> list[tuple[str, str]]:
    """`count` random (session, principal id) pairs of the fill."""
    with vault.store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT session_id, principal_id FROM sessions WHERE session_id LIKE 'cap-%' "
                "ORDER BY random() LIMIT :n"
            ),
            {"n": count},
        ).all()
    return [(r[0], r[1]) for r in rows]


def _principal(vault: Vault, principal_id: str) -> Any:
    """The principal a fill session belongs to, as `authenticate` would hand it out."""
    with vault.store.engine.connect() as conn:
        name = conn.execute(
            text("SELECT name FROM principals WHERE principal_id = :p"), {"p": principal_id}
        ).scalar_one()
    found = authenticate(vault.store, _token(int(name[4:])))
    if found is None:
        raise RuntimeError("a filled principal's token does not authenticate")
    return found


def _requests(vault: Vault) -> dict[str, float]:
    """Median milliseconds of authenticate, resume, list and configure on random sessions."""
    picked = _sessions(vault, SAMPLES * 2)
    timings: dict[str, list[float]] = {
        "authenticate": [],
        "resume": [],
        "list": [],
        "configure": [],
    }
    samples = len(picked) // 2  # SAMPLES, unless the fill is smaller
    for n, (session, principal_id) in enumerate(picked[:samples]):
        token = _token(int(session.split("-")[1]))
        timings["authenticate"].append(_timed(partial(authenticate, vault.store, token)))
        principal = _principal(vault, principal_id)
        agent = connect(vault, principal)
        hello = json.dumps(HELLO | {"session_id": session})
        timings["resume"].append(_timed(partial(agent.handle_raw, hello)))
        other_session, other_principal = picked[samples + n]
        writer = connect(vault, _principal(vault, other_principal))
        writer.handle_raw(json.dumps(HELLO | {"session_id": other_session}))
        body = {"type": "toolkit/configure/req", "toolkit_name": "bench"}
        configure = json.dumps(body | {"config": bench_config(10_000_000 + n)})
        started = time.perf_counter()
        answers = writer.handle_raw(configure)
        timings["configure"].append(time.perf_counter() - started)
        if '"status":"ok"' not in answers[0]:
            raise RuntimeError("a configure on the fill failed")
        # the list comes after another session's commit: it reads the store
        started = time.perf_counter()
        listed = agent.handle_raw(LIST)
        timings["list"].append(time.perf_counter() - started)
        if '"configured":true' not in listed[0].replace(" ", ""):
            raise RuntimeError("a filled session lists its toolkit as not configured")
        agent.close()
        writer.close()
    return {kind: _median_ms(values) for kind, values in timings.items()}


def _sizes(vault: Vault, versions: int) -> dict[str, Any]:
    """The database's size and each large table's (with its indexes), per version."""
    with vault.store.engine.connect() as conn:
        total = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
        tables = {
            name: conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": name}).scalar_one()
            for name in (
                "config_versions",
                "audit_events",
                "principals",
                "sessions",
                "current_configs",
            )
        }
    return {
        "database_bytes": int(total),
        "bytes_per_version": round(total / versions),
        "tables_bytes": {k: int(v) for k, v in tables.items()},
    }


def measure(url: str, home: Path, size: Fill, log: Callable[[str], Any] = print) -> dict[str, Any]:
    """Fill `size` into the empty PostgreSQL database at `url`, then time every request."""
    vault = open_bench_vault(home, url, bench_registry(1))
    try:
        create_token(vault.store, "operator", "capacity-operator")
        filled = fill(vault, size, log)
        with vault.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(text("VACUUM ANALYZE"))
        log(f"capacity: {size.versions:,} versions filled in {filled:.0f} s; timing requests")
        settings = VaultSettings(home, url, "file", "bench", initialized=True)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cold: list[Vault] = []
        opened = _timed(lambda: cold.append(open_vault(settings, bench_registry(1))))
        first = _timed(lambda: cold[0].store.chain_state())  # a replica's start walks the chain
        cold[0].store.engine.dispose()
        figures: dict[str, Any] = {
            "principals": size.principals,
            "versions": size.principals * size.per_session,
            "fill_s": round(filled, 1),
            "open_s": round(opened + first, 2),
            "open_rss_mb": round(
                (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1024, 1
            ),
            "requests_ms": _requests(vault),
        }
        provider = open_provider(settings)
        figures["keys_rotate_s"] = round(
            _timed(lambda: rotate_master_key(vault.store, provider)), 3
        )
        log("capacity: check")
        checked: dict[str, Any] = {}
        figures["check_s"] = round(_timed(lambda: checked.update(vault.check())), 1)
        if not checked.get("ok") or checked.get("versions", 0) < figures["versions"]:
            raise RuntimeError(f"check failed on the fill: {checked.get('state_problems')}")
        log("capacity: audit verify")
        figures["audit_verify_s"] = round(_timed(vault.verify_audit), 1)
        log("capacity: keys rotate --vault-key")
        figures["vault_key_rotate_s"] = round(
            _timed(lambda: rotate_vault_key(vault.store, provider, vault.ring)), 1
        )
        figures |= _sizes(vault, figures["versions"])
        return figures
    finally:
        vault.store.engine.dispose()


def run(ctx: Context) -> list[Result]:
    """`scripts/bench --only capacity`: PostgreSQL, the two sizes of this scale."""
    if "postgres" not in ctx.databases:
        ctx.log("capacity: PostgreSQL only; skipped")
        return []
    measured = []
    for principals, versions in SIZES[ctx.scale.name]:
        directory = ctx.work / f"capacity-{versions}"
        with ctx.database("postgres", directory / "db") as url:
            ctx.log(f"capacity: {principals:,} principals, {versions:,} versions")
            measured.append(measure(url, directory / "home", Fill(principals, versions), ctx.log))
    large, small = measured
    rows = []
    cases = [
        (k, "ms", large["requests_ms"][k], small["requests_ms"][k]) for k in large["requests_ms"]
    ]
    cases += [(label, unit, large[k], small[k]) for k, label, unit in FIGURES]
    for name, unit, big, little in cases:
        rows.append(
            Result(
                "capacity",
                "postgres",
                f"{name}, {large['principals']:,} principals, {large['versions']:,} versions",
                unit,
                float(big),
                f"at {small['principals']:,} / {small['versions']:,}",
                float(little),
                big / little if little else 0.0,
                extra={"large": large, "small": small},
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__)
    parser.add_argument("--principals", type=int, default=10_000)
    parser.add_argument("--versions", type=int, default=100_000)
    parser.add_argument("--database-url", default=None, help="default: a scratch database")
    args = parser.parse_args(argv)
    size = Fill(args.principals, args.versions)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="tkv-capacity-") as work:
        if args.database_url:
            figures = measure(args.database_url, Path(work) / "home", size, log)
        else:
            from .harness import postgres_admin_url

            with scratch_database("postgres", Path(work), postgres_admin_url()) as url:
                figures = measure(url, Path(work) / "home", size, log)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
