"""Principals and their bearer tokens: who may talk to the vault, and in which role.

A token is `tkv_` + 256 random bits (urlsafe base64), so a leak scanner can recognise it.
It is shown once, at creation; the store keeps only its SHA-256. A plain hash is enough
(no salt, no slow KDF): the token is uniformly random, so there is nothing to guess, and a
hash lookup needs no constant-time compare. Creating and revoking are audited; the audit
event names the principal, never the token.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, insert, or_, select, update

from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import PRINCIPALS
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.models import PrincipalRow
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = [
    "ROLES",
    "TOKEN_PREFIX",
    "PrincipalInfo",
    "Role",
    "authenticate",
    "create_token",
    "list_principals",
    "revoke",
]

Role = Literal["agent", "operator", "auditor"]
ROLES: tuple[Role, ...] = ("agent", "operator", "auditor")
TOKEN_PREFIX = "tkv_"  # noqa: S105 (a public prefix, not a secret)
_TOKEN = re.compile(r"tkv_[A-Za-z0-9_-]{43}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,199}")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrincipalInfo:
    """What `tokens list` shows: never the token, never its hash."""

    principal_id: str
    name: str
    role: str
    has_token: bool
    created_at: float
    revoked_at: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "principal_id": self.principal_id,
            "name": self.name,
            "role": self.role,
            "has_token": self.has_token,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True)
class Principal:
    """Who is asking: a principal's id and role, as authenticated (never a token)."""

    principal_id: str
    role: str


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(store: Store, role: str, name: str, *, actor: str = "operator") -> tuple[str, str]:
    """A new principal with a fresh token; returns (principal id, token). Shown once."""
    if role not in ROLES:
        raise VaultError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    if not _NAME.fullmatch(name):
        raise VaultError("a name is 1-200 letters, digits, '.', '_', '@' or '-'")
    principal_id = str(uuid.uuid4())
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)

    def work(conn: Connection) -> None:
        taken = conn.execute(
            select(PrincipalRow.principal_id).where(
                or_(PrincipalRow.name == name, PrincipalRow.principal_id == name)
            )
        ).first()
        if taken is not None:
            raise VaultError(f"a principal named {name!r} already exists")
        row = {
            "principal_id": principal_id,
            "name": name,
            "role": role,
            "token_hash": _hash(token),
            "created_at": time.time(),
            "revoked_at": None,
        }
        conn.execute(insert(PrincipalRow).values(**row, mac=store.mac(PRINCIPALS, row)))
        details = {"principal_id": principal_id, "name": name, "role": role}
        store.audit(conn, AuditDraft(actor, AuditAction.TOKEN_CREATED, details=details))

    store.retrying(work)
    return principal_id, token


def list_principals(store: Store) -> list[PrincipalInfo]:
    with store.read() as conn:
        rows = conn.execute(select(PrincipalRow).order_by(PrincipalRow.created_at))
        return [
            PrincipalInfo(
                row.principal_id,
                row.name,
                row.role,
                row.token_hash is not None,
                row.created_at,
                row.revoked_at,
            )
            for row in rows
        ]


def revoke(store: Store, name_or_id: str, *, actor: str = "operator") -> tuple[PrincipalInfo, bool]:
    """Revoke a principal's token; returns it and whether this call revoked it (idempotent)."""

    def work(conn: Connection) -> tuple[PrincipalInfo, bool]:
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
        info = PrincipalInfo(
            found.principal_id,
            found.name,
            found.role,
            found.token_hash is not None,
            found.created_at,
            revoked_at,
        )
        return info, found.revoked_at is None

    result: tuple[PrincipalInfo, bool] = store.retrying(work)
    return result


# The principal a token's hash names: one statement on the driver (through SQLAlchemy's
# expression language it cost most of a token check, and a server re-checks each token every
# second, `access.PrincipalCache`).
_PRINCIPAL_BY_HASH = (
    "SELECT principal_id, name, role, token_hash, created_at, revoked_at, mac"
    " FROM principals WHERE token_hash = ?"
)
_ROW = ("principal_id", "name", "role", "token_hash", "created_at", "revoked_at", "mac")


def authenticate(store: Store, token: str) -> Principal | None:
    """The principal a bearer token belongs to, or None (unknown, malformed or revoked).

    A row is believed only with its MAC and only as the verified audit chain has it now
    (`ledger`): an edited role, an un-revoked token or a row inserted by hand (a minted
    token) fails its MAC; a row put back from before its revocation, or one whose
    `token_created` event was never written, disagrees with the chain. Each is refused like
    an unknown token, and logged.
    """
    if not _TOKEN.fullmatch(token):
        return None
    found = store.fetch(_PRINCIPAL_BY_HASH, (_hash(token),))
    if not found:
        return None
    row = dict(zip(_ROW, found[0], strict=True))
    if row["revoked_at"] is not None:
        return None
    principal_id = row["principal_id"]
    if not store.authentic(PRINCIPALS, row):
        log.warning("principal %s fails its integrity check; token refused", principal_id)
        return None
    try:
        want = store.chain_state().principals.get(principal_id)
    except StateUnknown as exc:
        log.error("principal %s refused: %s", principal_id, exc)
        return None
    if want is None or want.revoked or (want.name, want.role) != (row["name"], row["role"]):
        log.warning("principal %s is not current in the audit chain; refused", principal_id)
        return None
    return Principal(principal_id, row["role"])
