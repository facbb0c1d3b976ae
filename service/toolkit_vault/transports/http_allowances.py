"""Allowances under `/v1/allowances`: list and read (auditors and operators), narrow and
widen (operators), each a thin shell over one function of `core.allowances`, run in a
worker thread and audited as the token's principal. A principal is named by name or id."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field

from toolkit_vault.access.allowances import MAX_ENTRIES, NAME_CHARS
from toolkit_vault.access.principals import Principal
from toolkit_vault.core.allowances import (
    PrincipalNotFound,
    get_allowance,
    list_allowances,
    remove_allowance,
    set_allowance,
)
from toolkit_vault.errors import ToolkitNotFound, VaultError
from toolkit_vault.transports.http_admin import Guards
from toolkit_vault.transports.refusals import Refused

__all__ = ["allowance_routes"]

PRINCIPAL = Path(min_length=1, max_length=200)
NAME = Field(min_length=1, max_length=NAME_CHARS)


class ToolIn(BaseModel):
    toolkit: str = NAME
    tool: str = NAME


class AllowanceIn(BaseModel):
    """What the agent may call: every tool of `toolkits`, and each of `tools`. Both empty:
    no tool at all."""

    toolkits: list[str] = Field(default_factory=list, max_length=MAX_ENTRIES)
    tools: list[ToolIn] = Field(default_factory=list, max_length=MAX_ENTRIES)


class AllowanceOut(BaseModel):
    principal_id: str
    name: str
    role: str
    narrowed: bool
    toolkits: list[str] | None  # None: not narrowed
    tools: list[dict[str, str]] | None
    removed_now: bool | None = None  # a DELETE: whether it changed anything


class AllowancesOut(BaseModel):
    allowances: list[AllowanceOut]


def allowance_routes(guards: Guards) -> APIRouter:
    router = APIRouter()
    vault, in_thread = guards.vault, guards.in_thread

    async def run(function: Any, *args: Any) -> Any:
        try:
            return await in_thread(function, *args)
        except (PrincipalNotFound, ToolkitNotFound) as exc:
            raise Refused(404, "RUNTIME_ERROR", exc.message) from None
        except VaultError as exc:
            raise Refused(422, "INVALID_MESSAGE", exc.message) from None

    @router.get("/v1/allowances", response_model=AllowancesOut)
    async def v1_allowances(_: Principal = Depends(guards.as_auditor)) -> AllowancesOut:
        """Every narrowed agent, as `allowances list --json`."""
        every = await run(list_allowances, vault.store)
        return AllowancesOut(allowances=[AllowanceOut(**n.as_json()) for n in every])

    @router.get("/v1/allowances/{principal}", response_model=AllowanceOut)
    async def v1_allowance(
        principal: str = PRINCIPAL, _: Principal = Depends(guards.as_auditor)
    ) -> AllowanceOut:
        return AllowanceOut(**(await run(get_allowance, vault.store, principal)).as_json())

    @router.put("/v1/allowances/{principal}", response_model=AllowanceOut)
    async def v1_allowance_set(
        body: AllowanceIn,
        principal: str = PRINCIPAL,
        actor: Principal = Depends(guards.as_operator),
    ) -> AllowanceOut:
        """Narrow an agent (replacing what it was narrowed to), each name checked."""
        tools = [(t.toolkit, t.tool) for t in body.tools]
        narrowed = await run(
            set_allowance,
            vault.store,
            actor.principal_id,
            vault.toolkit,
            principal,
            body.toolkits,
            tools,
        )
        return AllowanceOut(**narrowed.as_json())

    @router.delete("/v1/allowances/{principal}", response_model=AllowanceOut)
    async def v1_allowance_remove(
        principal: str = PRINCIPAL, actor: Principal = Depends(guards.as_operator)
    ) -> AllowanceOut:
        """Widen an agent again: every tool configured for it."""
        narrowed, changed = await run(remove_allowance, vault.store, actor.principal_id, principal)
        return AllowanceOut(**narrowed.as_json(), removed_now=changed)

    return router
