"""Config history's reads: every stored version with its owner and whether it is current,
and the lookups a typed principal or session goes through.

Auditors read these through `audit.history`, which says them in its documented shape; a
version comes back as stored (its public half and fingerprints as text), never a secret.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, or_, select

from toolkit_vault.store.models import ConfigVersion, CurrentConfig, PrincipalRow, SessionRow
from toolkit_vault.store.storage import Store

__all__ = ["HistoryFilter", "StoredVersion", "config_versions", "principal_named", "sessions_like"]


@dataclass(frozen=True)
class HistoryFilter:
    """Which versions to keep, every field optional: `principal` is a principal id (its
    sessions' versions), `since` epoch seconds."""

    session: str | None = None
    toolkit: str | None = None
    since: float | None = None
    principal: str | None = None


@dataclass(frozen=True)
class StoredVersion:
    """One config version as stored, its session's owner and its (session, toolkit)'s
    current version (None: not configured)."""

    session_id: str
    owner: str | None
    toolkit_name: str
    version: int
    status: str
    message: str | None
    actor: str
    created_at: float
    schema_digest: str
    public_config: str | None
    secret_fingerprints: str | None
    current_version: int | None


def principal_named(store: Store, name_or_id: str) -> str | None:
    """The id of the principal with that id or name; None when there is none."""
    if "\x00" in name_or_id:  # PostgreSQL text cannot hold NUL: not even a lookup
        return None
    with store.read() as conn:
        found = conn.execute(
            select(PrincipalRow.principal_id).where(
                or_(PrincipalRow.principal_id == name_or_id, PrincipalRow.name == name_or_id)
            )
        ).first()
    return None if found is None else str(found.principal_id)


def sessions_like(store: Store, typed: str, limit: int) -> list[str]:
    """The session `typed` is, else the ids it is a prefix of (at most `limit`), in order."""
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


def config_versions(store: Store, wanted: HistoryFilter) -> list[StoredVersion]:
    """Every stored config version that `wanted` keeps, oldest first."""
    if "\x00" in (wanted.session or "") + (wanted.toolkit or ""):
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
    if wanted.principal is not None:
        query = query.where(SessionRow.principal_id == wanted.principal)
    if wanted.session is not None:
        query = query.where(ConfigVersion.session_id == wanted.session)
    if wanted.toolkit is not None:
        query = query.where(ConfigVersion.toolkit_name == wanted.toolkit)
    if wanted.since is not None:
        query = query.where(ConfigVersion.created_at >= wanted.since)
    with store.read() as conn:
        rows = conn.execute(query).all()
    return [
        StoredVersion(
            session_id=row.session_id,
            owner=row.owner,
            toolkit_name=row.toolkit_name,
            version=row.version,
            status=row.status,
            message=row.message,
            actor=row.actor,
            created_at=row.created_at,
            schema_digest=row.schema_digest,
            public_config=row.public_config,
            secret_fingerprints=row.secret_fingerprints,
            current_version=row.current_version,
        )
        for row in rows
    ]
