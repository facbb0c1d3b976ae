"""Crypto-shredding: a scope's config versions emptied to their audit skeleton, in one
audited transaction, and the database files scrubbed of the pages that held them.

A shredded version keeps its session, toolkit, version, actor, time and status `purged`;
its wrapped data key, envelope, fingerprints (an oracle for guessing a low-entropy secret),
secret paths, public half and message go, so not even the master key brings any of it
back. The scope's current pointers and refresh leases go with them. The purge use case
(`core.purge`) decides whom and what; this module does it and counts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, func, or_, select, update

from toolkit_vault.errors import UnknownSession
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import VERSIONS
from toolkit_vault.store.leases import drop_leases
from toolkit_vault.store.models import ConfigVersion, CurrentConfig, SessionRow
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.scopes import principal_of
from toolkit_vault.store.storage import Store

__all__ = ["SHREDDED", "Shreddable", "Shredded", "scrub_files", "shred_scope", "shreddable"]

SHREDDED = {  # what a purged version keeps of its config: nothing
    "status": "purged",
    "message": None,
    "public_config": "{}",
    "secret_fingerprints": "{}",
    "sealed_secrets": None,
    "wrapped_dek": None,
    "dek_id": None,
    "kek_id": None,
}


@dataclass(frozen=True)
class Shredded:
    owner: str | None  # the session's owner (None for a principal scope or no session)
    versions: int  # versions shredded now (already shredded ones are not counted)
    toolkits: list[str]  # toolkits those versions belong to
    unconfigured: list[str]  # toolkits that were configured from the scope, and are not now


@dataclass(frozen=True)
class Shreddable:
    owner: str | None
    versions: int  # versions a shred would empty now
    toolkits: list[str]
    configured: list[str]  # toolkits configured from the scope now, unconfigured after


def _unshredded() -> Any:
    """A version a purge still has something to destroy in (not purged, or a key or
    ciphertext left by an interrupted one)."""
    return or_(
        ConfigVersion.status != "purged",
        ConfigVersion.wrapped_dek.is_not(None),
        ConfigVersion.sealed_secrets.is_not(None),
    )


def _scope(scope_id: str, toolkit: str | None) -> tuple[list[Any], list[Any]]:
    versions = [ConfigVersion.session_id == scope_id]
    pointers = [CurrentConfig.session_id == scope_id]
    if toolkit is not None:
        versions.append(ConfigVersion.toolkit_name == toolkit)
        pointers.append(CurrentConfig.toolkit_name == toolkit)
    return versions, pointers


def _owner(conn: Connection, scope_id: str, must_exist: bool) -> str | None:
    owner = conn.execute(
        select(SessionRow.principal_id).where(SessionRow.session_id == scope_id)
    ).scalar()
    if owner is None and must_exist:
        raise UnknownSession(f"unknown session {scope_id}")
    return owner


def shreddable(store: Store, scope_id: str, toolkit: str | None = None) -> Shreddable:
    """Count what `shred_scope` would destroy now, by the same rule, writing nothing; an
    unknown session (not a principal scope) raises `UnknownSession`."""
    versions, pointers = _scope(scope_id, toolkit)
    with store.read() as conn:
        owner = _owner(conn, scope_id, must_exist=principal_of(scope_id) is None)
        counts = conn.execute(
            select(ConfigVersion.toolkit_name, func.count())
            .where(*versions, _unshredded())
            .group_by(ConfigVersion.toolkit_name)
        ).all()
        configured = sorted(
            conn.execute(select(CurrentConfig.toolkit_name).where(*pointers)).scalars()
        )
    return Shreddable(
        owner, sum(int(n) for _, n in counts), sorted(name for name, _ in counts), configured
    )


def shred_scope(
    store: Store, scope_id: str, toolkit: str | None, *, actor: str, must_exist: bool
) -> Shredded:
    """Shred a scope's versions (or one toolkit's), drop its pointers and leases and append
    the `purge` event, in one transaction; `must_exist`: an unknown session raises."""

    def work(conn: Connection) -> Shredded:
        owner = _owner(conn, scope_id, must_exist)
        versions, pointers = _scope(scope_id, toolkit)
        rows = conn.execute(
            select(ConfigVersion).where(*versions, _unshredded()).order_by(ConfigVersion.id)
        ).all()
        for row in rows:
            conn.execute(
                update(ConfigVersion)
                .where(ConfigVersion.id == row.id)
                .values(**SHREDDED, mac=store.mac(VERSIONS, {**row._mapping, **SHREDDED}))
            )
        unconfigured = sorted(
            conn.execute(select(CurrentConfig.toolkit_name).where(*pointers)).scalars()
        )
        conn.execute(delete(CurrentConfig).where(*pointers))
        drop_leases(conn, scope_id, toolkit)  # who refreshes what was shredded
        toolkits = sorted({row.toolkit_name for row in rows})
        details: dict[str, Any] = {
            "versions": len(rows),
            "toolkits": toolkits,
            "unconfigured": unconfigured,
        }
        if principal_of(scope_id) is not None:
            details["scope"] = "principal"
        store.audit(conn, AuditDraft(actor, AuditAction.PURGE, scope_id, toolkit, details=details))
        return Shredded(owner, len(rows), toolkits, unconfigured)

    done: Shredded = store.transact(work)
    return done


def scrub_files(store: Store) -> bool | None:
    """SQLite: move every page into the database file (where `secure_delete` zeroed the old
    cells) and truncate the WAL, which still holds the pages as they were before. True when
    done, False when a reader kept it from finishing, None on another database."""
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
