"""The console's Checks page: for each toolkit whose credential is checked before it is
stored (`core.verification`), what checks it and the last outcome this server saw; and
the credentials of the toolkits it serves whose end is known (`core.expiry`), soonest
first. Operators only; no value is shown, only what the agent or person was told."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from toolkit_vault.transports.web.console import Console
from toolkit_vault.transports.web.pages import WebState

__all__ = ["console_check_routes"]


def console_check_routes(state: WebState) -> APIRouter:
    console, router = Console(state), APIRouter()
    vault = state.vault

    def overview() -> dict[str, Any]:
        last = vault.checks.last()
        checked = []
        for toolkit in vault.registry.all():
            try:
                how = vault.plugin_checks.describe(toolkit)
            except Exception:  # a toolkit that cannot be made or compiled: not checked here
                how = ""
            if how or toolkit.definition.name in last:
                checked.append((toolkit.definition.name, how, last.get(toolkit.definition.name)))
        ending = sorted(vault.expiring(), key=lambda row: row[3])
        return {"checked": checked, "ending": ending, "now": vault.clock()}

    @router.get("/checks")
    async def checks(request: Request) -> Response:
        user = await console.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        found = await run_in_threadpool(overview)
        return state.render(request, "checks.html", user=user, **found)

    return router
