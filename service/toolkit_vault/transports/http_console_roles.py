"""Console role mappings under `/v1/console-roles`: list (auditors and operators), set and
remove (operators), each a thin shell over `core.console_roles`, run in a worker thread and
audited as the token's principal (`console_role_mapped`, `console_role_unmapped`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.console_roles import (
    MappingNotFound,
    list_mappings,
    remove_mapping,
    set_mapping,
)
from toolkit_vault.errors import VaultError
from toolkit_vault.transports.http_admin import Guards
from toolkit_vault.transports.refusals import Refused

__all__ = ["console_role_routes"]


class MappingIn(BaseModel):
    claim: str
    value: str
    role: str


class MappingOut(BaseModel):
    claim: str
    value: str
    role: str


class MappingsOut(BaseModel):
    mappings: list[MappingOut]


def console_role_routes(guards: Guards) -> APIRouter:
    router = APIRouter()
    store, in_thread = guards.vault.store, guards.in_thread

    async def run(function: Any, *args: Any) -> Any:
        try:
            return await in_thread(function, *args)
        except MappingNotFound as exc:
            raise Refused(404, "RUNTIME_ERROR", exc.message) from None
        except VaultError as exc:
            raise Refused(422, "INVALID_MESSAGE", exc.message) from None

    @router.get("/v1/console-roles", response_model=MappingsOut)
    async def v1_console_roles(_: Principal = Depends(guards.as_auditor)) -> MappingsOut:
        """Which identity-provider claims give which console role, as `console-roles list`."""
        found = await run(list_mappings, store)
        return MappingsOut(mappings=[MappingOut(**m.as_json()) for m in found])

    @router.put("/v1/console-roles", response_model=MappingOut)
    async def v1_console_role_set(
        body: MappingIn, actor: Principal = Depends(guards.as_operator)
    ) -> MappingOut:
        """Give people whose `claim` holds `value` the console `role` (operator, auditor)."""
        made = await run(set_mapping, store, actor.principal_id, body.claim, body.value, body.role)
        return MappingOut(**made.as_json())

    @router.delete("/v1/console-roles", response_model=MappingOut)
    async def v1_console_role_remove(
        claim: str = Query(min_length=1, max_length=100),
        value: str = Query(min_length=1, max_length=200),
        actor: Principal = Depends(guards.as_operator),
    ) -> MappingOut:
        """Remove a mapping; a person it let in loses that role at their next request."""
        gone = await run(remove_mapping, store, actor.principal_id, claim, value)
        return MappingOut(**gone.as_json())

    return router
