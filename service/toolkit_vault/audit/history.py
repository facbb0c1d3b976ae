"""Config history for auditors, and purge (crypto-shredding) for operators.

History shows what changed, who changed it and when, without any secret: the public half
of each config as stored, and per secret path an HMAC fingerprint that is equal between
two versions of the same (session, toolkit) exactly when the value is (so "changed /
unchanged" shows, the value does not; the same value elsewhere fingerprints otherwise).
Purge leaves nothing of a purged config but its audit skeleton (session, toolkit, version,
actor, time, status `purged`): the wrapped data keys, the envelopes, the fingerprints (an
oracle for guessing a low-entropy secret), the secret paths, the public half and the
message all go, so not even the master key can bring any of it back.

Both scopes (`scopes`) show and purge alike: a principal's own configs are the versions of
its scope id, `purge --principal` shreds those and leaves its sessions' own configs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, func, or_, select, update

from toolkit_vault.errors import UnknownSession, VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import VERSIONS
from toolkit_vault.store.leases import drop_leases
from toolkit_vault.store.models import ConfigVersion, CurrentConfig, PrincipalRow, SessionRow
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.scopes import principal_of, principal_scope, scope_of
from toolkit_vault.store.storage import Store

__all__ = [
    "PurgePreview",
    "PurgeReport",
    "find_principal",
    "history",
    "iso_time",
    "parse_time",
    "purge",
    "purge_preview",
    "purge_principal",
    "session_matches",
]


def iso_time(epoch: float) -> str:
    """ISO 8601 in UTC with milliseconds, `Z` suffix: sortable and unambiguous."""
    text = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def parse_time(text: str) -> float:
    """`--since`: epoch seconds, or an ISO 8601 date or date-time (naive means UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise VaultError(
            f"cannot read {text!r} as a time: use epoch seconds or ISO 8601 "
            "(2026-01-31 or 2026-01-31T12:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def find_principal(store: Store, name_or_id: str) -> str:
    """A principal's id, by id or name (as `tokens revoke` takes it)."""
    if "\x00" in name_or_id:  # PostgreSQL text cannot hold NUL: not even a lookup
        raise VaultError(f"no principal named or with id {name_or_id!r}")
    with store.read() as conn:
        found = conn.execute(
            select(PrincipalRow.principal_id).where(
                or_(PrincipalRow.principal_id == name_or_id, PrincipalRow.name == name_or_id)
            )
        ).first()
    if found is None:
        raise VaultError(f"no principal named or with id {name_or_id!r}")
    return str(found.principal_id)


def session_matches(store: Store, typed: str, limit: int = 6) -> list[str]:
    """The session ids `typed` names, as the CLI reads them: the id itself, else every id
    it is a prefix of (at most `limit`; more than one is ambiguous)."""
    if not typed or "\x00" in typed:
        return []
    with store.read() as conn:
        exact = conn.execute(
            select(SessionRow.session_id).where(SessionRow.session_id == typed)
        ).scalar()
        if exact is not None:
            return [exact]
        query = (
            select(SessionRow.session_id)
            .where(SessionRow.session_id.startswith(typed, autoescape=True))
            .order_by(SessionRow.session_id)
            .limit(limit)
        )
        return list(conn.execute(query).scalars())


def history(
    store: Store,
    session: str | None = None,
    toolkit: str | None = None,
    since: float | None = None,
    principal: str | None = None,
) -> list[dict[str, Any]]:
    """Every stored config version, oldest first, in the documented `--json` shape;
    `principal` (id or name) keeps that principal's: its own and its sessions'."""
    if "\x00" in (session or "") + (toolkit or ""):
        return []  # PostgreSQL text cannot hold NUL, so no row matches: not even a lookup
    query = (
        select(
            ConfigVersion,
            CurrentConfig.version.label("current_version"),
            SessionRow.principal_id.label("owner"),
        )
        .outerjoin(
            CurrentConfig,
            and_(
                CurrentConfig.session_id == ConfigVersion.session_id,
                CurrentConfig.toolkit_name == ConfigVersion.toolkit_name,
            ),
        )
        .outerjoin(SessionRow, SessionRow.session_id == ConfigVersion.session_id)
        .order_by(ConfigVersion.id)
    )
    if principal is not None:
        query = query.where(SessionRow.principal_id == find_principal(store, principal))
    if session is not None:
        query = query.where(ConfigVersion.session_id == session)
    if toolkit is not None:
        query = query.where(ConfigVersion.toolkit_name == toolkit)
    if since is not None:
        query = query.where(ConfigVersion.created_at >= since)
    with store.read() as conn:
        rows = conn.execute(query).all()
    return [_entry(row) for row in rows]


def _entry(row: Any) -> dict[str, Any]:
    """One version for auditors; a row edited into something unreadable shows as such
    (`damaged`) rather than stopping the whole history."""
    return {
        "session_id": row.session_id,
        "scope": scope_of(row.session_id),
        "principal_id": row.owner,
        "toolkit_name": row.toolkit_name,
        "version": row.version,
        "status": row.status,
        "message": row.message,
        "actor": row.actor,
        "time": iso_time(row.created_at),
        "ts": row.created_at,
        "schema_digest": row.schema_digest,
        "public_config": _object(row.public_config),
        "secret_fingerprints": _object(row.secret_fingerprints),
        "current": row.current_version == row.version,
    }


def _object(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return {"damaged": True}
    return value if isinstance(value, dict) else {"damaged": True}


@dataclass(frozen=True)
class PurgeReport:
    session_id: str  # the scope purged: a session, or a principal scope
    principal_id: str | None  # whose scope it is
    toolkit_name: str | None
    versions: int  # versions shredded by this purge (already purged ones are not counted)
    toolkits: list[str]  # toolkits those versions belong to
    unconfigured: list[str]  # toolkits that were configured and are not any more
    files_scrubbed: bool | None  # SQLite: WAL checkpointed and truncated; None elsewhere

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "scope": scope_of(self.session_id),
            "principal_id": self.principal_id,
            "toolkit_name": self.toolkit_name,
            "versions": self.versions,
            "toolkits": self.toolkits,
            "unconfigured": self.unconfigured,
            "files_scrubbed": self.files_scrubbed,
        }


_SHREDDED = {  # what a purged version keeps of its config: nothing
    "status": "purged",
    "message": None,
    "public_config": "{}",
    "secret_fingerprints": "{}",
    "sealed_secrets": None,
    "wrapped_dek": None,
    "dek_id": None,
    "kek_id": None,
}


def purge(store: Store, session: str, toolkit: str | None = None, *, actor: str) -> PurgeReport:
    """Crypto-shred a session's versions (or one toolkit's) in one audited transaction."""
    if principal_of(session) is not None:
        raise VaultError("that is a principal scope: purge it with --principal")
    return _purge(store, session, toolkit, actor, must_exist=True)


def purge_principal(
    store: Store, principal: str, toolkit: str | None = None, *, actor: str
) -> PurgeReport:
    """Crypto-shred a principal's own configs (or one toolkit's); its sessions' stay."""
    scope_id = principal_scope(find_principal(store, principal))
    return _purge(store, scope_id, toolkit, actor, must_exist=False)


@dataclass(frozen=True)
class PurgePreview:
    """What a purge of a scope would destroy, counted without writing: the confirmation
    an operator answers names it."""

    session_id: str  # the scope: a session, or a principal scope
    principal_id: str | None  # whose scope it is
    toolkit_name: str | None
    versions: int  # versions a purge would shred now
    toolkits: list[str]  # toolkits those versions belong to
    configured: list[str]  # toolkits configured from this scope now, unconfigured after

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "scope": scope_of(self.session_id),
            "principal_id": self.principal_id,
            "toolkit_name": self.toolkit_name,
            "versions": self.versions,
            "toolkits": self.toolkits,
            "configured": self.configured,
        }


def purge_preview(store: Store, scope_id: str, toolkit: str | None = None) -> PurgePreview:
    """Count what `purge` (a session) or `purge_principal` (its scope id) would destroy,
    by the same rule, writing nothing; an unknown session raises as `purge` does."""
    versions = [ConfigVersion.session_id == scope_id, _unshredded()]
    pointers = [CurrentConfig.session_id == scope_id]
    if toolkit is not None:
        versions.append(ConfigVersion.toolkit_name == toolkit)
        pointers.append(CurrentConfig.toolkit_name == toolkit)
    with store.read() as conn:
        owner = conn.execute(
            select(SessionRow.principal_id).where(SessionRow.session_id == scope_id)
        ).scalar()
        if owner is None and principal_of(scope_id) is None:
            raise UnknownSession(f"unknown session {scope_id}")
        counts = conn.execute(
            select(ConfigVersion.toolkit_name, func.count())
            .where(*versions)
            .group_by(ConfigVersion.toolkit_name)
        ).all()
        configured = conn.execute(select(CurrentConfig.toolkit_name).where(*pointers)).scalars()
        configured_names = sorted(configured)
    return PurgePreview(
        scope_id,
        owner or principal_of(scope_id),
        toolkit,
        sum(int(n) for _, n in counts),
        sorted(name for name, _ in counts),
        configured_names,
    )


def _unshredded() -> Any:
    """A version a purge still has something to destroy in (not purged, or a key or
    ciphertext left by an interrupted one)."""
    return or_(
        ConfigVersion.status != "purged",
        ConfigVersion.wrapped_dek.is_not(None),
        ConfigVersion.sealed_secrets.is_not(None),
    )


def _purge(
    store: Store, session: str, toolkit: str | None, actor: str, *, must_exist: bool
) -> PurgeReport:
    def work(conn: Connection) -> tuple[str | None, int, list[str], list[str]]:
        owner = conn.execute(
            select(SessionRow.principal_id).where(SessionRow.session_id == session)
        ).scalar()
        if owner is None and must_exist:
            raise UnknownSession(f"unknown session {session}")
        scope = [ConfigVersion.session_id == session]
        pointer_scope = [CurrentConfig.session_id == session]
        if toolkit is not None:
            scope.append(ConfigVersion.toolkit_name == toolkit)
            pointer_scope.append(CurrentConfig.toolkit_name == toolkit)
        rows = conn.execute(
            select(ConfigVersion).where(*scope, _unshredded()).order_by(ConfigVersion.id)
        ).all()
        for row in rows:
            conn.execute(
                update(ConfigVersion)
                .where(ConfigVersion.id == row.id)
                .values(**_SHREDDED, mac=store.mac(VERSIONS, {**row._mapping, **_SHREDDED}))
            )
        unconfigured = sorted(
            conn.execute(select(CurrentConfig.toolkit_name).where(*pointer_scope)).scalars()
        )
        conn.execute(delete(CurrentConfig).where(*pointer_scope))
        drop_leases(conn, session, toolkit)  # who refreshes what was shredded
        toolkits = sorted({row.toolkit_name for row in rows})
        details: dict[str, Any] = {
            "versions": len(rows),
            "toolkits": toolkits,
            "unconfigured": unconfigured,
        }
        if principal_of(session) is not None:
            details["scope"] = "principal"
        store.audit(conn, AuditDraft(actor, AuditAction.PURGE, session, toolkit, details=details))
        return owner, len(rows), toolkits, unconfigured

    owner, count, toolkits, unconfigured = store.retrying(work)
    owner = owner or principal_of(session)
    scrubbed = _scrub_files(store)
    return PurgeReport(session, owner, toolkit, count, toolkits, unconfigured, scrubbed)


def _scrub_files(store: Store) -> bool | None:
    """SQLite: move every page into the database file (where `secure_delete` zeroed the old
    cells) and truncate the WAL, which still holds the pages as they were before."""
    if store.engine.dialect.name != "sqlite":
        return None
    with store.engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        if raw is None:
            return False
        cursor = raw.cursor()
        try:
            busy, _, _ = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            cursor.close()
    return bool(busy == 0)
