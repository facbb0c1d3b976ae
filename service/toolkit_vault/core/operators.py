"""What an operator does without a shell on the vault's machine: the functions the console
and the `/v1` API call for creating a token, revoking one, asking a person for a toolkit's
secrets (an intake link) and purging a scope.

Each acts as the signed-in operator (`actor`): the audit event names that principal, not
`local` or `operator`. The two that destroy something need a confirmation naming what they
destroy (`NotConfirmed` carries what would go, so the caller can ask), and a revoke never
takes the caller's own token (`OwnToken`): an operator is never locked out unknowingly. A
new token is handed back once, in a value whose repr hides it, and registered with the log
redaction so no log line could carry it even by mistake.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from toolkit_vault.access.principals import (
    Principal,
    PrincipalInfo,
    create_token,
    list_principals,
    parse_ttl,
    revoke,
)
from toolkit_vault.audit.history import find_principal
from toolkit_vault.core.intake import Intake
from toolkit_vault.core.purge import PurgePreview, PurgeReport, purge_preview
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import ToolkitNotFound, UnknownSession, VaultError
from toolkit_vault.logs import register_secrets
from toolkit_vault.protocol import IntakeOptions, ToolkitConfigureRequest
from toolkit_vault.store.overview import session_owner
from toolkit_vault.store.scopes import principal_of, principal_scope, scope_of
from toolkit_vault.store.storage import Store

__all__ = [
    "IntakeLink",
    "NewToken",
    "NotConfirmed",
    "NotFound",
    "OwnToken",
    "PurgeTarget",
    "ask_person",
    "issue_token",
    "preview_purge",
    "purge_scope",
    "revoke_token",
    "token_to_revoke",
]

SCOPE_ID_CHARS = 64  # sessions.session_id


class NotFound(VaultError):
    """No such principal, session or toolkit."""


class OwnToken(VaultError):
    """A revoke aimed at the token the operator is signed in with."""

    def __init__(self) -> None:
        super().__init__(
            "refused: that is your own token, the one you are signed in with; revoking it "
            "would sign you out and lock you out at once. Revoke it with another operator's "
            "token, or with toolkit-vault tokens revoke on the vault's machine"
        )


class NotConfirmed(VaultError):
    """A destructive action asked for without its confirmation: nothing was changed.
    `expected` is what `confirm` must repeat; `details` holds what would be destroyed."""

    def __init__(self, message: str, expected: str, what: dict[str, Any]) -> None:
        super().__init__(
            f"{message}; nothing was changed: confirm by repeating {expected!r}",
            details=[{**what, "confirm": expected}],
        )
        self.expected = expected


@dataclass(frozen=True)
class NewToken:
    """A principal just made, with its token: shown once, never in a repr."""

    principal_id: str
    name: str
    role: str
    token: str
    expires_at: float | None = None

    def __repr__(self) -> str:
        return f"NewToken({self.principal_id!r}, {self.name!r}, {self.role!r}, token=<hidden>)"

    def as_json(self) -> dict[str, Any]:
        """As `tokens create --json`: the only place the token is ever shown."""
        return {
            "principal_id": self.principal_id,
            "name": self.name,
            "role": self.role,
            "token": self.token,
            "expires_at": self.expires_at,
        }


def _no_nul(*values: str | None) -> None:
    if any("\x00" in (value or "") for value in values):
        raise VaultError("a name or id cannot hold a NUL character")


def issue_token(
    store: Store, actor: Principal, role: str, name: str, ttl: str | None = None
) -> NewToken:
    """A new principal and its token, audited (`token_created`) with `actor` as its actor;
    with `ttl` (as `tokens create --ttl` takes it: `12h`, `30d`) the token expires then."""
    _no_nul(role, name, ttl)
    seconds = parse_ttl(ttl) if ttl else None
    now = time.time()
    principal_id, token = create_token(
        store, role, name, actor=actor.principal_id, ttl=seconds, now=now
    )
    register_secrets([token])
    return NewToken(principal_id, name, role, token, None if seconds is None else now + seconds)


def _principal(store: Store, name_or_id: str) -> PrincipalInfo:
    _no_nul(name_or_id)
    try:
        principal_id = find_principal(store, name_or_id)
    except VaultError as exc:
        raise NotFound(exc.message) from None
    return next(p for p in list_principals(store) if p.principal_id == principal_id)


def token_to_revoke(store: Store, actor: Principal, name_or_id: str) -> PrincipalInfo:
    """The principal a revoke would stop (by name or id), for its confirmation; refuses
    the actor's own (`OwnToken`)."""
    target = _principal(store, name_or_id)
    if target.principal_id == actor.principal_id:
        raise OwnToken
    return target


def revoke_token(
    store: Store, actor: Principal, name_or_id: str, confirm: str | None
) -> tuple[PrincipalInfo, bool]:
    """Revoke a principal's token once `confirm` repeats its name or id, never the actor's
    own; returns it and whether this call revoked it. Audited (`token_revoked`) as `actor`."""
    target = token_to_revoke(store, actor, name_or_id)
    if confirm is None or confirm not in (target.name, target.principal_id):
        what = {"principal_id": target.principal_id, "name": target.name, "role": target.role}
        raise NotConfirmed(
            f"revoking the token of {target.name} ({target.role}) refuses it everywhere at once",
            target.name,
            what,
        )
    return revoke(store, target.principal_id, actor=actor.principal_id)


@dataclass(frozen=True)
class IntakeLink:
    """A one-time link for a person to type a toolkit's secrets into."""

    url: str
    toolkit_name: str
    scope_id: str  # a session id, or a principal scope
    owner: str  # the name of the principal whose session (or scope) it configures
    message: str
    lifetime: float  # seconds it stays usable, from now

    def as_json(self) -> dict[str, Any]:
        return {
            "intake_url": self.url,
            "toolkit_name": self.toolkit_name,
            "session_id": self.scope_id,
            "scope": scope_of(self.scope_id),
            "owner": self.owner,
            "message": self.message,
            "expires_in": round(self.lifetime),
        }


def _one_scope(session: str | None, principal: str | None) -> None:
    if bool(session) == bool(principal):
        raise VaultError("name one scope: a session, or a principal")


def ask_person(
    vault: Vault,
    actor: Principal,
    toolkit_name: str,
    *,
    session: str | None = None,
    principal: str | None = None,
    expires_in: int | None = None,
) -> IntakeLink:
    """An intake link for a session's (or an agent principal's) config of a toolkit, as an
    agent's configure with `"intake": true` makes one: the public half kept so far is
    empty, and the person fills every field. Audited (`intake_requested`) as `actor`."""
    _one_scope(session, principal)
    _no_nul(toolkit_name, session, principal)
    intake = vault.intake
    if not isinstance(intake, Intake):
        raise VaultError("intake links need the web console (toolkit-vault serve)")
    try:
        toolkit = vault.registry.get(toolkit_name)
    except ToolkitNotFound as exc:
        raise NotFound(exc.message) from None
    if session:
        found = None if principal_of(session) else session_owner(vault.store, session)
        if found is None:
            raise NotFound("unknown session")  # as A2E says it; the id is the caller's own
        scope_id, owner = session, found["name"]
    else:
        target = _principal(vault.store, str(principal))
        if target.role != "agent":
            raise VaultError(
                f"{target.name} is an {target.role}: only an agent's sessions use a "
                "principal's configs"
            )
        scope_id, owner = principal_scope(target.principal_id), target.name
        if len(scope_id) > SCOPE_ID_CHARS:
            raise VaultError("this principal's id is too long for a principal scope")
        vault.store.ensure_scope(scope_id, target.principal_id)
    options: bool | IntakeOptions = True
    lifetime = intake.ttl
    if expires_in is not None:
        options, lifetime = IntakeOptions(expires_in=expires_in), min(lifetime, expires_in)
    request = ToolkitConfigureRequest(toolkit_name=toolkit.definition.name, intake=options)
    answer = intake.request(actor, scope_id, toolkit, request)
    assert answer.intake_url is not None
    name, message = toolkit.definition.name, answer.message or ""
    return IntakeLink(answer.intake_url, name, scope_id, owner, message, lifetime)


@dataclass(frozen=True)
class PurgeTarget:
    """What a purge names: a session, or a principal's own configs; maybe one toolkit."""

    session: str | None = None
    principal: str | None = None
    toolkit: str | None = None

    def __post_init__(self) -> None:
        _one_scope(self.session, self.principal)
        _no_nul(self.session, self.principal, self.toolkit)

    @property
    def named(self) -> str:
        """What `confirm` repeats: the session id, or the principal as given."""
        return str(self.session or self.principal)

    def describe(self) -> str:
        what = f"session {self.session}" if self.session else f"principal {self.principal}"
        return what + (f", toolkit {self.toolkit}" if self.toolkit else "")


def preview_purge(store: Store, target: PurgeTarget) -> PurgePreview:
    """What purging `target` would destroy now, counted without writing anything."""
    if target.session:
        if principal_of(target.session) is not None:
            raise VaultError("that is a principal scope: purge it by its principal")
        scope_id = target.session
    else:
        scope_id = principal_scope(_principal(store, str(target.principal)).principal_id)
    try:
        return purge_preview(store, scope_id, target.toolkit)
    except UnknownSession:  # its message repeats the id: an HTTP refusal's detail never does
        raise NotFound("unknown session") from None


def purge_scope(
    vault: Vault, actor: Principal, target: PurgeTarget, confirm: str | None
) -> PurgeReport:
    """Crypto-shred `target` once `confirm` repeats it (`PurgeTarget.named`), as `toolkit-
    vault purge` does; audited (`purge`) as `actor`. Without it, `NotConfirmed` says how
    many versions of which toolkits it would destroy, and nothing changes."""
    preview = preview_purge(vault.store, target)
    if confirm != target.named:
        toolkits = ", ".join(preview.toolkits) or "none"
        configured = ", ".join(preview.configured) or "none"
        raise NotConfirmed(
            f"purging {target.describe()} is irreversible: it destroys {preview.versions} "
            f"stored version(s) (toolkits: {toolkits}) and unconfigures {configured}",
            target.named,
            preview.as_json(),
        )
    if target.principal:
        return vault.purge_principal(actor.principal_id, target.principal, target.toolkit)
    return vault.purge(actor.principal_id, str(target.session), target.toolkit)
