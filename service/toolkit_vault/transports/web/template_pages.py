"""The console's pages for environment templates (`core.templates`): list them, show one,
set (replace) one from a JSON object of public values, remove one. Operators change them;
auditors may look, as over `/v1/templates`. A template refused by the schema comes back
with each refused field named by pointer and keyword, never a value it was typed with."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse

from toolkit_vault.core.templates import (
    get_template,
    list_templates,
    remove_template,
    set_template,
    skeleton_of,
)
from toolkit_vault.errors import ConfigInvalid, VaultError
from toolkit_vault.transports.web.console import Console
from toolkit_vault.transports.web.pages import WebState
from toolkit_vault.transports.web.security import ConsoleUser

__all__ = ["console_template_routes"]

MAX_VALUES = 16 * 1024  # characters of the values' JSON
LOOKERS = ("operator", "auditor")


def console_template_routes(state: WebState) -> APIRouter:
    console, router = Console(state), APIRouter()
    vault = state.vault

    async def page(request: Request, user: ConsoleUser, status: int = 200, **form: Any) -> Response:
        every = await run_in_threadpool(list_templates, vault.store, None)
        rows = [(t, n, json.dumps(v, sort_keys=True)) for t, named in every.items()
                for n, v in named.items()]  # fmt: skip
        return state.render(
            request,
            "templates.html",
            status,
            user,
            rows=rows,
            toolkits=[t.definition.name for t in vault.registry.all()],
            error=form.get("error"),
            details=form.get("details", []),
            toolkit=form.get("toolkit", ""),
            name=form.get("name", ""),
        )

    @router.get("/templates")
    async def templates(request: Request) -> Response:
        user = await console.signed_in(request, *LOOKERS)
        if isinstance(user, Response):
            return user
        return await page(request, user)

    @router.get("/templates/{toolkit}/{name}")
    async def template(request: Request, toolkit: str, name: str) -> Response:
        user = await console.signed_in(request, *LOOKERS)
        if isinstance(user, Response):
            return user

        def read() -> tuple[dict[str, Any], str]:
            values = get_template(vault.store, toolkit, name)
            return values, skeleton_of(vault.toolkit(toolkit), "json")

        try:
            values, skeleton = await run_in_threadpool(read)
        except VaultError as exc:
            return state.message(request, 404, "No such template", exc.message, user)
        return state.render(
            request, "template.html", user=user, toolkit=toolkit, name=name,
            values=values, skeleton=skeleton,
        )  # fmt: skip

    @router.post("/templates/set")
    async def set_one(request: Request) -> Response:
        signed = await console.operator_form(request)
        if isinstance(signed, Response):
            return signed
        user, form = signed
        toolkit, name = form.get("toolkit", "").strip(), form.get("name", "").strip()
        text = form.get("values", "")
        typed = {"toolkit": toolkit, "name": name}  # the values never come back: a secret?
        try:
            values = json.loads(text) if len(text) <= MAX_VALUES else None
        except ValueError:
            values = None
        if not isinstance(values, dict):
            error = 'the values are a JSON object of public fields, such as {"region": "eu"}'
            return await page(request, user, 422, error=error, **typed)

        def put() -> None:
            set_template(vault.store, user.principal.principal_id, vault.toolkit(toolkit),
                         name, values)  # fmt: skip

        try:
            await run_in_threadpool(put)
        except ConfigInvalid as exc:
            return await page(request, user, 422, error=exc.message, details=exc.details, **typed)
        except VaultError as exc:
            return await page(request, user, 422, error=exc.message, **typed)
        return RedirectResponse(f"/console/templates/{toolkit}/{name}", status_code=303)

    @router.post("/templates/remove")
    async def remove_one(request: Request) -> Response:
        signed = await console.operator_form(request)
        if isinstance(signed, Response):
            return signed
        user, form = signed
        toolkit, name = form.get("toolkit", ""), form.get("name", "")
        try:
            await run_in_threadpool(
                remove_template, vault.store, user.principal.principal_id, toolkit, name
            )
        except VaultError as exc:
            return state.message(request, 404, "Not removed", exc.message, user)
        return RedirectResponse("/console/templates", status_code=303)

    return router
