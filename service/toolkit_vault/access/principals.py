"""Principals and their bearer tokens: who may talk to the vault, and in which role.

A token is `tkv_` + 256 random bits (urlsafe base64), so a leak scanner can recognise it.
It is shown once, at creation; the store keeps only its SHA-256. A plain hash is enough
(no salt, no slow KDF): the token is uniformly random, so there is nothing to guess, and a
hash lookup needs no constant-time compare. Creating and revoking are audited; the audit
event names the principal, never the token.

A token may expire (`create_token(ttl=...)`, `tokens create --ttl 30d`; none by default).
The expiry is part of the principal's row MAC and of its `token_created` event, so a row
edited to extend or remove it is refused like any tampered principal. An expired token is
refused with `TokenExpired`, whose message (the time it expired) is safe to show its holder.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from toolkit_vault.errors import VaultError
from toolkit_vault.store.integrity import PRINCIPALS
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.principals import (
    PrincipalRecord,
    add_principal,
    principal_by_token_hash,
    principal_records,
    revoke_principal,
)
from toolkit_vault.store.storage import Store

__all__ = [
    "MAX_TTL",
    "ROLES",
    "TOKEN_PREFIX",
    "PrincipalInfo",
    "Role",
    "TokenExpired",
    "authenticate",
    "create_token",
    "expiry_message",
    "list_principals",
    "parse_ttl",
    "revoke",
]

Role = Literal["agent", "operator", "auditor"]
ROLES: tuple[Role, ...] = ("agent", "operator", "auditor")
TOKEN_PREFIX = "tkv_"  # noqa: S105 (a public prefix, not a secret)
_TOKEN = re.compile(r"tkv_[A-Za-z0-9_-]{43}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,199}")
_TTL = re.compile(r"([0-9]{1,9})([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TTL = 366 * 86400  # a year and a day: a longer-lived secret is one nobody reviews
log = logging.getLogger(__name__)


class TokenExpired(VaultError):
    """The token is genuine and was valid, but its expiry has passed: refused, with a
    message its holder may read (when it expired; never the token)."""

    def __init__(self, expires_at: float) -> None:
        super().__init__(expiry_message(expires_at))
        self.expires_at = expires_at


def expiry_message(expires_at: float) -> str:
    when = datetime.fromtimestamp(expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"the token expired at {when}; ask an operator for a new one"


def parse_ttl(text: str) -> float:
    """A token lifetime as typed: a whole number and a unit, `s`, `m`, `h` or `d` (`90s`,
    `15m`, `12h`, `30d`), from one second to `MAX_TTL`; seconds."""
    found = _TTL.fullmatch(text.strip())
    if found is None:
        raise VaultError(
            f"a token lifetime is a whole number and a unit, s, m, h or d (30d, 12h, 90m), "
            f"not {text[:40]!r}"
        )
    seconds = int(found[1]) * _UNIT[found[2]]
    if not 0 < seconds <= MAX_TTL:
        raise VaultError(f"a token lifetime is from 1s to {MAX_TTL // 86400}d")
    return float(seconds)


def _expired(expires_at: float | None, now: float | None) -> bool:
    return expires_at is not None and (time.time() if now is None else now) >= expires_at


@dataclass(frozen=True)
class PrincipalInfo:
    """What `tokens list` shows: never the token, never its hash."""

    principal_id: str
    name: str
    role: str
    has_token: bool
    created_at: float
    revoked_at: float | None
    expires_at: float | None = None  # None: never expires

    def expired(self, now: float | None = None) -> bool:
        return _expired(self.expires_at, now)

    def state(self, now: float | None = None) -> str:
        """The token's state: `none` (the local principal), `revoked`, `expired`, `active`."""
        if not self.has_token:
            return "none"
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expired(now) else "active"

    def as_json(self) -> dict[str, Any]:
        return {
            "principal_id": self.principal_id,
            "name": self.name,
            "role": self.role,
            "has_token": self.has_token,
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "expires_at": self.expires_at,
            "expired": self.expired(),
        }


@dataclass(frozen=True)
class Principal:
    """Who is asking: a principal's id and role, as authenticated (never a token)."""

    principal_id: str
    role: str
    expires_at: float | None = None  # when its token stops working; None: never

    def expired(self, now: float | None = None) -> bool:
        return _expired(self.expires_at, now)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    store: Store,
    role: str,
    name: str,
    *,
    actor: str = "operator",
    ttl: float | None = None,
    now: float | None = None,
) -> tuple[str, str]:
    """A new principal with a fresh token; returns (principal id, token). Shown once.

    With `ttl` (seconds, at most `MAX_TTL`) the token expires that long after `now`."""
    if ttl is not None and not 0 < ttl <= MAX_TTL:
        raise VaultError(f"a token lifetime is from 1s to {MAX_TTL // 86400}d")
    if role not in ROLES:
        raise VaultError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    if not _NAME.fullmatch(name):
        raise VaultError("a name is 1-200 letters, digits, '.', '_', '@' or '-'")
    principal_id = str(uuid.uuid4())
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    add_principal(
        store,
        principal_id=principal_id,
        name=name,
        role=role,
        token_hash=_hash(token),
        actor=actor,
        ttl=ttl,
        now=now,
    )
    return principal_id, token


def _info(record: PrincipalRecord) -> PrincipalInfo:
    return PrincipalInfo(
        record.principal_id,
        record.name,
        record.role,
        record.has_token,
        record.created_at,
        record.revoked_at,
        record.expires_at,
    )


def list_principals(store: Store) -> list[PrincipalInfo]:
    return [_info(record) for record in principal_records(store)]


def revoke(store: Store, name_or_id: str, *, actor: str = "operator") -> tuple[PrincipalInfo, bool]:
    """Revoke a principal's token; returns it and whether this call revoked it (idempotent)."""
    record, revoked = revoke_principal(store, name_or_id, actor=actor)
    return _info(record), revoked


def authenticate(store: Store, token: str, *, now: float | None = None) -> Principal | None:
    """The principal a bearer token belongs to, or None (unknown, malformed or revoked);
    raises `TokenExpired` for a genuine token whose expiry has passed (at `now`).

    A row is believed only with its MAC and only as the verified audit chain has it now
    (`ledger`): an edited role or expiry, an un-revoked token or a row inserted by hand (a
    minted token) fails its MAC; a row put back from before its revocation, or one whose
    `token_created` event was never written, disagrees with the chain. Each is refused like
    an unknown token, and logged. Only a row that passes both is told apart as expired.
    """
    if not _TOKEN.fullmatch(token):
        return None
    row = principal_by_token_hash(store, _hash(token))
    if row is None:
        return None
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
    if want.expires_at != row["expires_at"]:
        log.warning("principal %s: its expiry is not the audit chain's; refused", principal_id)
        return None
    if _expired(row["expires_at"], now):
        raise TokenExpired(row["expires_at"])
    return Principal(principal_id, row["role"], row["expires_at"])
