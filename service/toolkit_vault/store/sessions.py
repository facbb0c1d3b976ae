"""Session ids as stored, for people who type them (`cli.ids`): all of them, or those a
typed prefix names."""

from __future__ import annotations

from sqlalchemy import select

from toolkit_vault.store.models import SessionRow
from toolkit_vault.store.storage import Store

__all__ = ["session_ids", "sessions_named"]


def session_ids(store: Store) -> list[str]:
    """Every session id (reserved principal scopes included), in no particular order."""
    with store.read() as conn:
        return list(conn.execute(select(SessionRow.session_id)).scalars())


def sessions_named(store: Store, typed: str, limit: int) -> list[str]:
    """`[typed]` when a session has that id; else the ids `typed` is a prefix of, sorted,
    at most `limit` (none for an empty `typed`). A prefix's `%` and `_` match themselves."""
    with store.read() as conn:
        exact = conn.execute(
            select(SessionRow.session_id).where(SessionRow.session_id == typed)
        ).scalar()
        if exact is not None or not typed:
            return [] if exact is None else [exact]
        query = (
            select(SessionRow.session_id)
            .where(SessionRow.session_id.startswith(typed, autoescape=True))
            .order_by(SessionRow.session_id)
            .limit(limit)
        )
        return list(conn.execute(query).scalars())
