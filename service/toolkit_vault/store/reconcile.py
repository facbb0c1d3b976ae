"""Stored state against the audit chain: rows that are forged, replayed or deleted.

A row's MAC (see `integrity`) proves the vault wrote it, not that it is still current: a
pointer, a principal or an imported definition can be put back as it was, MAC and all, from
an older copy. The audit chain, whose every link and whose head are keyed, says what the
latest state must be; this module compares the two, table by table, and names each row
that disagrees. `audit verify` and `check` report what it finds; the upgrade backfill
(`upgrade`) signs only rows it finds consistent.

Each rule yields (row as read, its name, what disagrees or None); callers decide whether a
missing or wrong MAC is itself the problem. The events are trusted only after the chain
walk (`audit.verify_audit_chain`) has verified them in the same snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, and_, func, select

from toolkit_vault.canonical import parse_json
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import (
    IMPORTED,
    MASTER_KEYS,
    POINTERS,
    PRINCIPALS,
    RECOVERY,
    SESSIONS,
    VAULT_KEYS,
    VERSIONS,
    Row,
)
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.models import (
    AuditEvent,
    CurrentConfig,
    ImportedToolkitRow,
    MasterKey,
    PrincipalRow,
    RecoveryKey,
    SessionRow,
    VaultKey,
)
from toolkit_vault.store.reconcile_versions import Finding, Kind, VersionKey, versions_rule

__all__ = [
    "LOCAL_PRINCIPAL_ID",
    "Finding",
    "Kind",
    "StateProblem",
    "StateReport",
    "imported_as_audited",
    "reconcile",
    "recovery_wraps",
    "rules",
]

LOCAL_PRINCIPAL_ID = "local"  # the tokenless principal `init` makes; it has no token event
MAX_LISTED = 100


@dataclass(frozen=True)
class StateProblem:
    table: str
    row: str  # a name for the row: "session/toolkit v3", a principal's name, a key id
    problem: Kind
    detail: str
    version: VersionKey | None = None  # for config versions: which one

    def as_json(self) -> dict[str, str]:
        return {
            "table": self.table,
            "row": self.row,
            "problem": self.problem,
            "detail": self.detail,
        }

    @classmethod
    def of(cls, table: str, name: str | VersionKey, problem: Kind, detail: str) -> StateProblem:
        if isinstance(name, tuple):
            return cls(table, f"{name[0]}/{name[1]} v{name[2]}", problem, detail, name)
        return cls(table, name, problem, detail)


@dataclass
class StateReport:
    rows: dict[str, int] = field(default_factory=dict)  # rows checked, per table
    problems: list[StateProblem] = field(default_factory=list)  # the first MAX_LISTED
    count: int = 0

    def add(self, problem: StateProblem) -> None:
        self.count += 1
        if len(self.problems) < MAX_LISTED:
            self.problems.append(problem)


def reconcile(
    conn: Connection,
    authentic: Callable[[str, Row], bool],
    batch_size: int,
    state: ChainState | None = None,
    versions: Callable[[Row, bool], None] | None = None,
) -> StateReport:
    """Every authenticated table, row by row: a missing or bad MAC first, then the chain
    (recovery wraps too, authenticated by opening: `integrity`). `state`: the state the
    verified chain makes, when the caller built it on its walk (None: built here).
    `versions`: handed each config version row once, whole, with its MAC's verdict."""
    report = StateReport()
    every = {**rules(batch_size, authentic, state), RECOVERY: recovery_wraps}
    for table, rule in every.items():
        report.rows[table] = 0
        for row, name, disagreement in rule(conn):
            if row is not None:
                report.rows[table] += 1
                holds = authentic(table, row)
                if versions is not None and table == VERSIONS:
                    versions(row, holds)
                if not holds:
                    what = "no MAC" if row.get("mac") is None else "its MAC does not match"
                    if table == RECOVERY:
                        what = "its wrap does not open under the vault's recovery key"
                    report.add(StateProblem.of(table, name, "unauthenticated", what))
                    continue
            if disagreement is not None:
                report.add(StateProblem.of(table, name, *disagreement))
    return report


def rules(
    batch_size: int, authentic: Callable[[str, Row], bool], made: ChainState | None = None
) -> dict[str, Callable[[Connection], Iterator[Finding]]]:
    """One rule per authenticated table. Versions and pointers are held to the state the
    chain's events make (`ledger.ChainState`, the definition the hot path uses too), built
    once, on first use, from the events as stored (trusted once the walk verified them)."""
    chain: list[ChainState] = [] if made is None else [made]

    def state(conn: Connection) -> ChainState:
        if not chain:
            chain.append(chain_state(conn, batch_size))
        return chain[0]

    return {
        VAULT_KEYS: _vault_keys,
        MASTER_KEYS: _master_keys,
        PRINCIPALS: _principals,
        SESSIONS: lambda conn: _sessions(conn, batch_size),
        VERSIONS: lambda conn: versions_rule(conn, batch_size, state(conn)),
        POINTERS: lambda conn: _pointers(conn, state(conn)),
        IMPORTED: _imported,
    }


def chain_state(conn: Connection, batch_size: int) -> ChainState:
    """The state every stored event makes, in seq order."""
    made = ChainState()
    query = select(AuditEvent).order_by(AuditEvent.seq).execution_options(yield_per=batch_size)
    with closing(conn.execute(query)) as result:
        for event in result:
            made.apply(event._mapping)
    return made


def _unindexed(action: Any) -> Any:
    """The action column in a join on a row's session: with it bare, SQLite looks the
    event up by `ix_audit_events_action` and scans every event of that kind for each row
    (quadratic); wrapped, it takes `ix_audit_events_session` (PostgreSQL does either way)."""
    return func.coalesce(action, "")


def _events(conn: Connection, *actions: AuditAction) -> Sequence[Any]:
    query = select(AuditEvent).where(AuditEvent.action.in_(actions)).order_by(AuditEvent.seq)
    return conn.execute(query).all()


def _details(event: Any) -> dict[str, Any]:
    try:
        value = parse_json(event.details)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


# -- vault keys and (before the key hierarchy) master keys ------------------------------------


def _vault_keys(conn: Connection) -> Iterator[Finding]:
    """A vault key record must have been added by an event (`vault_initialized` names the
    first one); the last one added is the active one; retired exactly when an event says."""
    added: list[str] = []
    retired: set[str] = set()
    for event in _events(
        conn,
        AuditAction.VAULT_INITIALIZED,
        AuditAction.VAULT_KEY_ADDED,
        AuditAction.VAULT_KEY_RETIRED,
    ):
        key_id = _details(event).get("key_id")
        if not isinstance(key_id, str):
            continue  # `vault_initialized` of a vault made before the hierarchy
        if event.action == AuditAction.VAULT_KEY_RETIRED:
            retired.add(key_id)
        else:
            added.append(key_id)
    active = added[-1] if added else None
    rows = conn.execute(select(VaultKey).order_by(VaultKey.key_id)).all()
    for row in rows:
        if row.key_id not in added:
            found: tuple[Kind, str] | None = ("unaudited", "no event added this vault key")
        elif bool(row.is_active) != (row.key_id == active):
            found = ("replayed", f"the audit chain makes {active} the active vault key")
        elif (row.retired_at is not None) != (row.key_id in retired):
            found = ("replayed", "its retirement disagrees with the audit chain (vault key)")
        else:
            found = None
        yield row._mapping, row.key_id, found
    for key_id in sorted(set(added) - {row.key_id for row in rows}):
        yield None, key_id, ("deleted", "the audit chain added it; its record is gone")


def recovery_wraps(conn: Connection) -> Iterator[Finding]:
    """The recovery wraps must be the chain's current share set (its latest
    `recovery_initialized`), one per vault key it covers: those the event names, and each
    vault key added since (a rotation covers its new key in the same transaction), less
    each retired since (a retirement destroys its wrap). A replaced set's rows put back,
    a wrap with no event and a deleted wrap are each named."""
    current: str | None = None
    expected: set[str] = set()
    for event in _events(
        conn,
        AuditAction.RECOVERY_INITIALIZED,
        AuditAction.VAULT_KEY_ADDED,
        AuditAction.VAULT_KEY_RETIRED,
    ):
        details = _details(event)
        if event.action == AuditAction.RECOVERY_INITIALIZED:
            current = str(details.get("set_id"))
            covered = details.get("vault_keys")
            expected = {str(k) for k in covered} if isinstance(covered, list) else set()
        elif current is not None and isinstance(details.get("key_id"), str):
            if event.action == AuditAction.VAULT_KEY_ADDED:
                expected.add(details["key_id"])
            else:
                expected.discard(details["key_id"])
    rows = conn.execute(select(RecoveryKey).order_by(RecoveryKey.key_id)).all()
    for row in rows:
        if current is None:
            found: tuple[Kind, str] | None = ("unaudited", "no event made a recovery share set")
        elif row.set_id != current:
            found = (
                "replayed",
                f"a wrap of share set {row.set_id}; the audit chain's current set is {current}",
            )
        elif row.key_id not in expected:
            found = ("unaudited", f"the audit chain's share set does not cover {row.key_id}")
        else:
            found = None
        yield row._mapping, row.key_id, found
    present = {row.key_id for row in rows if row.set_id == current}
    for key_id in sorted(expected - present):
        what = f"the audit chain's share set {current} covers it; its recovery wrap is gone"
        yield None, key_id, ("deleted", what)


def _master_keys(conn: Connection) -> Iterator[Finding]:
    added: list[str] = []
    retired: set[str] = set()
    for event in _events(
        conn, AuditAction.VAULT_INITIALIZED, AuditAction.KEK_ADDED, AuditAction.KEK_RETIRED
    ):
        found_id = _details(event).get("kek_id")
        if found_id is None:
            continue  # `vault_initialized` of a vault made with the key hierarchy
        kek_id = str(found_id)
        if event.action == AuditAction.KEK_RETIRED:
            retired.add(kek_id)
        else:
            added.append(kek_id)
    primary = added[-1] if added else None
    rows = conn.execute(select(MasterKey).order_by(MasterKey.kek_id)).all()
    for row in rows:
        if row.kek_id not in added:
            found: tuple[Kind, str] | None = ("unaudited", "no event added this master key")
        elif bool(row.is_primary) != (row.kek_id == primary):
            found = ("replayed", f"the audit chain makes {primary} the primary key")
        elif (row.retired_at is not None) != (row.kek_id in retired):
            found = ("replayed", "its retirement disagrees with the audit chain")
        else:
            found = None
        yield row._mapping, row.kek_id, found
    for kek_id in sorted(set(added) - {row.kek_id for row in rows}):
        yield None, str(kek_id), ("deleted", "the audit chain added it; its record is gone")


# -- principals and sessions ------------------------------------------------------------------


def _principals(conn: Connection) -> Iterator[Finding]:
    """A principal is what its latest `token_*` event says: its name, role and expiry as
    created, revoked once `token_revoked` names it. The local principal never has a token."""
    expected: dict[str, dict[str, Any]] = {}
    for event in _events(conn, AuditAction.TOKEN_CREATED, AuditAction.TOKEN_REVOKED):
        details = _details(event)
        principal_id = str(details.get("principal_id"))
        if event.action == AuditAction.TOKEN_CREATED:
            expected[principal_id] = {**details, "revoked": False}
        elif principal_id in expected:
            expected[principal_id]["revoked"] = True
    rows = conn.execute(select(PrincipalRow).order_by(PrincipalRow.created_at)).all()
    for row in rows:
        name = f"{row.name} ({row.principal_id})"
        want = expected.get(row.principal_id)
        found: tuple[Kind, str] | None = None
        if want is None:
            local = row.principal_id == LOCAL_PRINCIPAL_ID
            if not (local and row.role == "agent" and row.token_hash is None):
                found = ("unaudited", "no token_created event names this principal")
        elif (row.name, row.role) != (want.get("name"), want.get("role")):
            found = ("unaudited", "its name or role differs from its token_created event")
        elif row.expires_at != want.get("expires_at"):
            found = ("unaudited", "its expiry differs from its token_created event")
        elif want["revoked"] and row.revoked_at is None:
            found = ("replayed", "the audit chain revoked this token; the row is not revoked")
        elif not want["revoked"] and row.revoked_at is not None:
            found = ("unaudited", "revoked without a token_revoked event")
        yield row._mapping, name, found
    for principal_id in sorted(set(expected) - {row.principal_id for row in rows}):
        yield None, principal_id, ("deleted", "the audit chain created it; its row is gone")


def _sessions(conn: Connection, batch_size: int) -> Iterator[Finding]:
    created = and_(
        _unindexed(AuditEvent.action) == AuditAction.SESSION_CREATED,
        AuditEvent.session_id == SessionRow.session_id,
    )
    query = (
        select(SessionRow, AuditEvent.actor.label("event_actor"))
        .outerjoin(AuditEvent, created)
        .order_by(SessionRow.session_id)
        .execution_options(yield_per=batch_size)
    )
    with closing(conn.execute(query)) as result:
        for row in result:
            found: tuple[Kind, str] | None = None
            if row.event_actor is None:
                found = ("unaudited", "no session_created event")
            elif row.event_actor != row.principal_id:
                found = ("unaudited", "its owner differs from its session_created event")
            yield row._mapping, row.session_id, found


# -- config versions and pointers -------------------------------------------------------------


def _pointers(conn: Connection, chain: ChainState) -> Iterator[Finding]:
    """A pointer must name the version the chain makes current; a current version with no
    pointer means it was deleted."""
    live = {(s, t): v for s, pointers in chain.pointers.items() for t, v in pointers.items()}
    rows = conn.execute(
        select(CurrentConfig).order_by(CurrentConfig.session_id, CurrentConfig.toolkit_name)
    ).all()
    for row in rows:
        want = live.pop((row.session_id, row.toolkit_name), None)
        name = f"{row.session_id}/{row.toolkit_name} -> v{row.version}"
        found: tuple[Kind, str] | None = None
        if want is None:
            found = ("replayed", "no live version: the toolkit was purged or never configured")
        elif want != row.version:
            found = ("replayed", f"the latest live version is v{want}")
        yield row._mapping, name, found
    for (session_id, toolkit_name), version in sorted(live.items()):
        name = f"{session_id}/{toolkit_name} -> v{version}"
        yield None, name, ("deleted", "a live version has no current pointer")


# -- imported toolkits -----------------------------------------------------------------------


def _imported(conn: Connection) -> Iterator[Finding]:
    """An imported definition must be the one its latest import event names (by package
    digest and schema digest); a removed one must stay removed."""
    latest: dict[str, Any] = {}
    for event in _events(conn, AuditAction.TOOLKIT_IMPORTED, AuditAction.TOOLKIT_REMOVED):
        latest[event.toolkit_name] = event
    rows = conn.execute(select(ImportedToolkitRow).order_by(ImportedToolkitRow.name)).all()
    for row in rows:
        event = latest.pop(row.name, None)
        found: tuple[Kind, str] | None = None
        if event is None:
            found = ("unaudited", "no toolkit_imported event names it")
        elif event.action == AuditAction.TOOLKIT_REMOVED:
            found = ("replayed", "the audit chain removed this toolkit")
        elif not imported_as_audited(row._mapping, _imported_by(event)):
            found = ("replayed", "it is not the definition last imported")
        yield row._mapping, row.name, found
    for name, event in sorted(latest.items()):
        if event.action == AuditAction.TOOLKIT_IMPORTED:
            yield None, name, ("deleted", "the audit chain imported it; its row is gone")


def _imported_by(event: Any) -> tuple[Any, Any]:
    details = _details(event)
    return details.get("digest"), details.get("schema_digest")


def imported_as_audited(row: Row, imported: tuple[Any, Any] | None) -> bool:
    """Whether an imported definition is the one the chain last imported under its name
    (`ChainState.imported`: package digest and schema digest; a re-import may change only
    the secret marks); None (removed, or never imported) matches nothing."""
    if imported is None:
        return False
    from toolkit_vault.schema import schema_digest  # jsonschema: not at every CLI start

    try:
        digest = schema_digest(json.loads(row["definition"])["schema"])
    except (TypeError, ValueError, KeyError):
        return False
    return imported == (row["package_digest"], digest)
