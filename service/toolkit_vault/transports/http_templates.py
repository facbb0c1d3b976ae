"""Environment templates under `/v1/templates`: list and read (auditors and operators), set
and remove (operators), each a thin shell over one function of `core.templates`, run in a
worker thread and audited as the token's principal. A refused template answers 422 naming
each field by pointer and keyword, never its value."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.templates import (
    TemplateNotFound,
    get_template,
    list_templates,
    remove_template,
    set_template,
)
from toolkit_vault.errors import ConfigInvalid, ToolkitNotFound, VaultError
from toolkit_vault.transports.http_admin import Guards
from toolkit_vault.transports.refusals import Refused

__all__ = ["template_routes"]

TOOLKIT = Path(min_length=1, max_length=200)
NAME = Path(min_length=1, max_length=63)


class TemplateIn(BaseModel):
    values: dict[str, Any]


class TemplateOut(BaseModel):
    toolkit: str
    name: str
    values: dict[str, Any]


class TemplatesOut(BaseModel):
    templates: dict[str, dict[str, dict[str, Any]]]


def template_routes(guards: Guards) -> APIRouter:
    router = APIRouter()
    store, in_thread = guards.vault.store, guards.in_thread

    async def run(function: Any, *args: Any) -> Any:
        try:
            return await in_thread(function, *args)
        except (TemplateNotFound, ToolkitNotFound) as exc:
            raise Refused(404, "RUNTIME_ERROR", exc.message) from None
        except ConfigInvalid as exc:
            raise Refused(422, "INVALID_MESSAGE", exc.message, details=exc.details) from None
        except VaultError as exc:
            raise Refused(422, "INVALID_MESSAGE", exc.message) from None

    @router.get("/v1/templates", response_model=TemplatesOut)
    async def v1_templates(
        toolkit: str | None = Query(default=None, max_length=200),
        _: Principal = Depends(guards.as_auditor),
    ) -> TemplatesOut:
        """Every template by toolkit (or one toolkit's), as `templates list --json`."""
        return TemplatesOut(templates=await run(list_templates, store, toolkit))

    @router.get("/v1/templates/{toolkit}/{name}", response_model=TemplateOut)
    async def v1_template(
        toolkit: str = TOOLKIT, name: str = NAME, _: Principal = Depends(guards.as_auditor)
    ) -> TemplateOut:
        values = await run(get_template, store, toolkit, name)
        return TemplateOut(toolkit=toolkit, name=name, values=values)

    @router.put("/v1/templates/{toolkit}/{name}", response_model=TemplateOut)
    async def v1_template_set(
        body: TemplateIn,
        toolkit: str = TOOLKIT,
        name: str = NAME,
        actor: Principal = Depends(guards.as_operator),
    ) -> TemplateOut:
        """Set (replace) a template: public fields only, checked against the schema."""

        def put() -> dict[str, Any]:
            found = guards.vault.toolkit(toolkit)
            return set_template(store, actor.principal_id, found, name, body.values)

        return TemplateOut(toolkit=toolkit, name=name, values=await run(put))

    @router.delete("/v1/templates/{toolkit}/{name}")
    async def v1_template_remove(
        toolkit: str = TOOLKIT, name: str = NAME, actor: Principal = Depends(guards.as_operator)
    ) -> dict[str, Any]:
        await run(remove_template, store, actor.principal_id, toolkit, name)
        return {"toolkit": toolkit, "name": name, "removed": True}

    return router
