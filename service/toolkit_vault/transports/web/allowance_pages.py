"""The console's page for allowances (`core.allowances`): which agents are narrowed and to
what, a form to narrow one (toolkits and `TOOLKIT/TOOL` names, one a line), and a button
to widen one again. Operators change them; auditors may look, as over `/v1/allowances`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse

from toolkit_vault.access.allowances import MAX_ENTRIES, parse_tool
from toolkit_vault.access.principals import list_principals
from toolkit_vault.core.allowances import list_allowances, remove_allowance, set_allowance
from toolkit_vault.errors import VaultError
from toolkit_vault.transports.web.console import Console
from toolkit_vault.transports.web.pages import WebState
from toolkit_vault.transports.web.security import ConsoleUser

__all__ = ["console_allowance_routes"]

LOOKERS = ("operator", "auditor")
MAX_TEXT = 32 * 1024  # characters of one list as typed


def _lines(text: str) -> list[str]:
    if len(text) > MAX_TEXT:
        raise VaultError(f"an allowance names at most {MAX_ENTRIES} toolkits and tools")
    return [line.strip() for line in text.splitlines() if line.strip()]


def console_allowance_routes(state: WebState) -> APIRouter:
    console, router = Console(state), APIRouter()
    vault = state.vault

    async def page(request: Request, user: ConsoleUser, status: int = 200, **form: Any) -> Response:
        def read() -> tuple[list[Any], list[str]]:
            agents = [p.name for p in list_principals(vault.store) if p.role == "agent"]
            return list_allowances(vault.store), agents

        narrowed, agents = await run_in_threadpool(read)
        return state.render(
            request,
            "allowances.html",
            status,
            user,
            narrowed=narrowed,
            agents=agents,
            error=form.get("error"),
            principal=form.get("principal", ""),
            toolkits=form.get("toolkits", ""),
            tools=form.get("tools", ""),
        )

    @router.get("/allowances")
    async def allowances(request: Request) -> Response:
        user = await console.signed_in(request, *LOOKERS)
        if isinstance(user, Response):
            return user
        return await page(request, user)

    @router.post("/allowances/set")
    async def set_one(request: Request) -> Response:
        signed = await console.operator_form(request)
        if isinstance(signed, Response):
            return signed
        user, form = signed
        typed = {k: form.get(k, "") for k in ("principal", "toolkits", "tools")}

        def put() -> None:
            toolkits, tools = _lines(typed["toolkits"]), _lines(typed["tools"])
            if not (toolkits or tools or form.get("nothing")):
                raise VaultError("name a toolkit or a tool, or tick 'no tool at all'")
            pairs = [parse_tool(tool) for tool in tools]
            set_allowance(vault.store, user.principal.principal_id, vault.toolkit,
                          typed["principal"], toolkits, pairs)  # fmt: skip

        try:
            await run_in_threadpool(put)
        except VaultError as exc:
            return await page(request, user, 422, error=exc.message, **typed)
        return RedirectResponse("/console/allowances", status_code=303)

    @router.post("/allowances/remove")
    async def remove_one(request: Request) -> Response:
        signed = await console.operator_form(request)
        if isinstance(signed, Response):
            return signed
        user, form = signed
        actor, target = user.principal.principal_id, form.get("principal", "")
        try:
            await run_in_threadpool(remove_allowance, vault.store, actor, target)
        except VaultError as exc:
            return state.message(request, 404, "Not widened", exc.message, user)
        return RedirectResponse("/console/allowances", status_code=303)

    return router
