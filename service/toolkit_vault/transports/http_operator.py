"""The operator's actions under `/v1/`: create a token, list and revoke tokens, start an
intake link ("ask a person for this key"), purge. Operators only; each route is a thin
shell over one function of `core.operators`, run in a worker thread, acting (and audited)
as the token's principal.

The two that destroy something take a `confirm` that repeats what they destroy (the
principal, the session id): without it the answer is 409 naming what would go, and
nothing changes. A revoke of the caller's own token is refused (409) with the reason. A
created token is in its 201 answer only (`Cache-Control: no-store`), never in a log line
or an audit event."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from toolkit_vault.access.principals import Principal, list_principals
from toolkit_vault.core.operators import (
    NotConfirmed,
    NotFound,
    OwnToken,
    PurgeTarget,
    ask_person,
    issue_token,
    purge_scope,
    revoke_token,
)
from toolkit_vault.errors import ToolkitNotFound, UnknownSession, VaultError
from toolkit_vault.transports.http_admin import Guards
from toolkit_vault.transports.refusals import Refused

__all__ = ["operator_routes"]

NAME = Field(min_length=1, max_length=200)


class TokenIn(BaseModel):
    role: Literal["agent", "operator", "auditor"]
    name: str = NAME
    ttl: str | None = Field(default=None, max_length=16)  # as `tokens create --ttl`: 30d


class TokenOut(BaseModel):
    principal_id: str
    name: str
    role: str
    token: str
    expires_at: float | None = None


class PrincipalsOut(BaseModel):
    principals: list[dict[str, Any]]


class RevokeIn(BaseModel):
    principal: str = NAME  # a name or a principal id
    confirm: str | None = Field(default=None, max_length=200)  # the principal again


class RevokeOut(BaseModel):
    principal_id: str
    name: str
    role: str
    revoked_at: float | None
    revoked_now: bool


class IntakeIn(BaseModel):
    toolkit: str = NAME
    session: str | None = Field(default=None, max_length=200)
    principal: str | None = Field(default=None, max_length=200)
    expires_in: int | None = Field(default=None, ge=1, le=86_400)


class IntakeOut(BaseModel):
    intake_url: str
    toolkit_name: str
    session_id: str
    scope: str
    owner: str
    message: str
    expires_in: int


class PurgeIn(BaseModel):
    session: str | None = Field(default=None, max_length=200)
    principal: str | None = Field(default=None, max_length=200)
    toolkit: str | None = Field(default=None, max_length=200)
    confirm: str | None = Field(default=None, max_length=200)  # the session or principal again


def _refusal(exc: VaultError) -> Refused:
    if isinstance(exc, NotFound | UnknownSession | ToolkitNotFound):
        return Refused(404, "RUNTIME_ERROR", exc.message)
    if isinstance(exc, OwnToken | NotConfirmed):
        return Refused(409, "RUNTIME_ERROR", exc.message, details=exc.details)
    return Refused(422, "INVALID_MESSAGE", exc.message)


def operator_routes(guards: Guards) -> APIRouter:
    router = APIRouter()
    vault, in_thread = guards.vault, guards.in_thread

    async def run(function: Any, *args: Any) -> Any:
        try:
            return await in_thread(function, *args)
        except VaultError as exc:
            raise _refusal(exc) from None

    @router.post("/v1/tokens", status_code=201, response_model=TokenOut)
    async def v1_token_create(
        body: TokenIn, response: Response, actor: Principal = Depends(guards.as_operator)
    ) -> TokenOut:
        """A new principal and its token (shown in this answer only; the store keeps its
        hash), as `tokens create --json`; `ttl` (`12h`, `30d`) makes it expire."""
        made = await run(issue_token, vault.store, actor, body.role, body.name, body.ttl)
        response.headers["Cache-Control"] = "no-store"
        return TokenOut(**made.as_json())

    @router.get("/v1/tokens", response_model=PrincipalsOut)
    async def v1_tokens(_: Principal = Depends(guards.as_operator)) -> PrincipalsOut:
        """Every principal, never a token or its hash (as `tokens list --json`)."""
        everyone = await run(list_principals, vault.store)
        return PrincipalsOut(principals=[p.as_json() for p in everyone])

    @router.post("/v1/tokens/revoke", response_model=RevokeOut)
    async def v1_token_revoke(
        body: RevokeIn, actor: Principal = Depends(guards.as_operator)
    ) -> RevokeOut:
        """Revoke a principal's token once `confirm` repeats its name or id; never the
        caller's own (409). Idempotent."""
        info, now = await run(revoke_token, vault.store, actor, body.principal, body.confirm)
        return RevokeOut(**info.as_json(), revoked_now=now)

    @router.post("/v1/intake", status_code=201, response_model=IntakeOut)
    async def v1_intake(
        body: IntakeIn, actor: Principal = Depends(guards.as_operator)
    ) -> IntakeOut:
        """A one-time intake link for a person to type a toolkit's secrets for a session,
        or for an agent principal's own configs (`scope: "principal"`)."""

        def ask() -> Any:
            return ask_person(
                vault,
                actor,
                body.toolkit,
                session=body.session,
                principal=body.principal,
                expires_in=body.expires_in,
            )

        link = await run(ask)
        return IntakeOut(**link.as_json())

    @router.post("/v1/purge")
    async def v1_purge(
        body: PurgeIn, actor: Principal = Depends(guards.as_operator)
    ) -> dict[str, Any]:
        """Crypto-shred a session's or a principal's own configs once `confirm` repeats the
        session id or principal (as `purge --json`); without it, 409 with the counts."""

        def purge() -> Any:
            target = PurgeTarget(body.session, body.principal, body.toolkit)
            return purge_scope(vault, actor, target, body.confirm)

        report = await run(purge)
        purged: dict[str, Any] = report.as_json()
        return purged

    return router
