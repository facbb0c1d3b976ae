"""Principals as stored: each write with its audit event, and the one read a token check makes.

`access.principals` decides who may hold a token; these are its statements. Every write
here ends by telling whoever watches this store's principals (`watch_principals`), once its
transaction is over (committed, or failed, when it may have committed all the same): the
network path's token cache forgets then, so a revocation made by this process is learned
by it at once, and nothing has to read SQL text to notice one. Another process learns
nothing from here: its caches believe an answer for at most their `max_age`.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, insert, or_, select, update

from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import PRINCIPALS
from toolkit_vault.store.models import PrincipalRow
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = [
    "PrincipalRecord",
    "add_principal",
    "principal_by_token_hash",
    "principal_records",
    "revoke_principal",
    "watch_principals",
]


@dataclass(frozen=True)
class PrincipalRecord:
    """A principal's row as stored, without its token hash (only whether it has one)."""

    principal_id: str
    name: str
    role: str
    has_token: bool
    created_at: float
    revoked_at: float | None
    expires_at: float | None


_watchers: weakref.WeakKeyDictionary[Store, list[Callable[[], None]]] = weakref.WeakKeyDictionary()
_watchers_lock = threading.Lock()


def watch_principals(store: Store, changed: Callable[[], None]) -> None:
    """Call `changed` after every write to `store`'s principals made through this module
    (kept as long as the store is)."""
    with _watchers_lock:
        _watchers.setdefault(store, []).append(changed)


def _written(store: Store) -> None:
    with _watchers_lock:
        watching = list(_watchers.get(store, ()))
    for changed in watching:
        changed()


def _writing(store: Store, work: Callable[[Connection], Any]) -> Any:
    """`work` as one retried write; the watchers hear of it after it ended, however."""
    try:
        return store.transact(work)
    finally:
        _written(store)


def _record(row: Any) -> PrincipalRecord:
    return PrincipalRecord(
        row.principal_id,
        row.name,
        row.role,
        row.token_hash is not None,
        row.created_at,
        row.revoked_at,
        row.expires_at,
    )


def add_principal(
    store: Store,
    *,
    principal_id: str,
    name: str,
    role: str,
    token_hash: str,
    actor: str,
    ttl: float | None = None,
    now: float | None = None,
) -> None:
    """Insert a principal with its token's hash and audit `token_created`; a name (or id)
    already taken is refused. With `ttl` it expires that long after its creation."""

    def work(conn: Connection) -> None:
        taken = conn.execute(
            select(PrincipalRow.principal_id).where(
                or_(PrincipalRow.name == name, PrincipalRow.principal_id == name)
            )
        ).first()
        if taken is not None:
            raise VaultError(f"a principal named {name!r} already exists")
        created_at = float(time.time() if now is None else now)  # as the Float column reads
        row = {
            "principal_id": principal_id,
            "name": name,
            "role": role,
            "token_hash": token_hash,
            "created_at": created_at,
            "revoked_at": None,
            "expires_at": None if ttl is None else created_at + float(ttl),
        }
        conn.execute(insert(PrincipalRow).values(**row, mac=store.mac(PRINCIPALS, row)))
        details: dict[str, Any] = {"principal_id": principal_id, "name": name, "role": role}
        if row["expires_at"] is not None:  # the chain vouches for the expiry too
            details["expires_at"] = row["expires_at"]
        store.audit(conn, AuditDraft(actor, AuditAction.TOKEN_CREATED, details=details))

    _writing(store, work)


def principal_records(store: Store) -> list[PrincipalRecord]:
    """Every principal, oldest first."""
    with store.read() as conn:
        rows = conn.execute(select(PrincipalRow).order_by(PrincipalRow.created_at))
        return [_record(row) for row in rows]


def revoke_principal(store: Store, name_or_id: str, *, actor: str) -> tuple[PrincipalRecord, bool]:
    """Revoke a principal's token (audited `token_revoked`); returns it and whether this
    call revoked it (idempotent)."""

    def work(conn: Connection) -> tuple[PrincipalRecord, bool]:
        found = conn.execute(
            select(PrincipalRow).where(
                or_(PrincipalRow.principal_id == name_or_id, PrincipalRow.name == name_or_id)
            )
        ).first()
        if found is None:
            raise VaultError(f"no principal named or with id {name_or_id!r}")
        revoked_at = found.revoked_at
        if revoked_at is None:
            revoked_at = time.time()
            row = {**found._mapping, "revoked_at": revoked_at}
            conn.execute(
                update(PrincipalRow)
                .where(PrincipalRow.principal_id == found.principal_id)
                .values(revoked_at=revoked_at, mac=store.mac(PRINCIPALS, row))
            )
            details = {"principal_id": found.principal_id, "name": found.name}
            store.audit(conn, AuditDraft(actor, AuditAction.TOKEN_REVOKED, details=details))
        return replace(_record(found), revoked_at=revoked_at), found.revoked_at is None

    result: tuple[PrincipalRecord, bool] = _writing(store, work)
    return result


# The principal a token's hash names: one statement on the driver (through SQLAlchemy's
# expression language it cost most of a token check, and a server re-checks each token every
# second, `access.PrincipalCache`).
_PRINCIPAL_BY_HASH = (
    "SELECT principal_id, name, role, token_hash, created_at, revoked_at, expires_at, mac"
    " FROM principals WHERE token_hash = ?"
)
_ROW = (
    "principal_id",
    "name",
    "role",
    "token_hash",
    "created_at",
    "revoked_at",
    "expires_at",
    "mac",
)


def principal_by_token_hash(store: Store, token_hash: str) -> Mapping[str, Any] | None:
    """The principals row (every column, its MAC included) whose token hashes to
    `token_hash`, or None; not yet checked: the caller checks its MAC and the chain."""
    found = store.fetch(_PRINCIPAL_BY_HASH, (token_hash,))
    if not found:
        return None
    return dict(zip(_ROW, found[0], strict=True))
