"""What operators see of sessions: who owns each, and which toolkits are configured.

Read-only and value-free (ids, names, version numbers and statuses), for the console;
the newest sessions first, a bounded number of them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, select

from toolkit_vault.store.integrity import SESSIONS
from toolkit_vault.store.models import ConfigVersion, CurrentConfig, PrincipalRow, SessionRow
from toolkit_vault.store.storage import Store

__all__ = ["session_overview", "session_owner"]


def session_overview(store: Store, limit: int = 500) -> list[dict[str, Any]]:
    """Sessions, newest first: id, owner name and role, created, and per configured
    toolkit its current version and status."""
    sessions = (
        select(SessionRow.session_id, SessionRow.created_at, PrincipalRow.name, PrincipalRow.role)
        .join(PrincipalRow, PrincipalRow.principal_id == SessionRow.principal_id)
        .order_by(SessionRow.created_at.desc())
        .limit(limit)
    )
    with store.read() as conn:
        rows = conn.execute(sessions).all()
        ids = [row.session_id for row in rows]
        current = conn.execute(
            select(
                CurrentConfig.session_id,
                CurrentConfig.toolkit_name,
                CurrentConfig.version,
                ConfigVersion.status,
            )
            .join(
                ConfigVersion,
                and_(
                    ConfigVersion.session_id == CurrentConfig.session_id,
                    ConfigVersion.toolkit_name == CurrentConfig.toolkit_name,
                    ConfigVersion.version == CurrentConfig.version,
                ),
            )
            .where(CurrentConfig.session_id.in_(ids))
            .order_by(CurrentConfig.toolkit_name)
        ).all()
    toolkits: dict[str, list[dict[str, Any]]] = {}
    for row in current:
        toolkits.setdefault(row.session_id, []).append(
            {"toolkit_name": row.toolkit_name, "version": row.version, "status": row.status}
        )
    return [
        {
            "session_id": row.session_id,
            "owner": row.name,
            "role": row.role,
            "created_at": row.created_at,
            "configured": toolkits.get(row.session_id, []),
        }
        for row in rows
    ]


def session_owner(store: Store, session_id: str) -> dict[str, str] | None:
    """A session's owner (`principal_id`, `name`, `role`), or None for an unknown id and
    for a row that fails its MAC (a session row written by hand owns nothing)."""
    if "\x00" in session_id:  # PostgreSQL text cannot hold NUL: not even a lookup
        return None
    with store.read() as conn:
        row = conn.execute(
            select(SessionRow, PrincipalRow.name, PrincipalRow.role)
            .join(PrincipalRow, PrincipalRow.principal_id == SessionRow.principal_id)
            .where(SessionRow.session_id == session_id)
        ).first()
    if row is None or not store.authentic(SESSIONS, row._mapping):
        return None
    return {"principal_id": row.principal_id, "name": row.name, "role": row.role}
