"""The console's page for MCP sessions (`transports.mcp`): the clients connected to `/mcp`
on this replica, per principal (client name and version from `initialize`, A2E session,
last call), and a button for an operator to end one: its calls are cancelled and its next
message refused on whichever replica holds it (audited: `mcp_session_ended`, kept in the
chain like a revocation, as the page may be served by another replica than the session)."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse

from toolkit_vault.access.principals import list_principals
from toolkit_vault.transports.web.console import Console
from toolkit_vault.transports.web.pages import WebState

__all__ = ["console_mcp_routes"]

# MCP's session ids are visible ASCII (the SDK's: 32 hex digits); anything else names none
_SESSION_ID = re.compile(r"[\x21-\x7e]{1,200}")


def console_mcp_routes(state: WebState) -> APIRouter:
    console, router = Console(state), APIRouter()

    @router.get("/mcp-sessions")
    async def mcp_sessions(request: Request) -> Response:
        user = await console.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        names = {
            p.principal_id: p.name
            for p in await run_in_threadpool(list_principals, state.vault.store)
        }
        rows = [
            {
                "key": s.key,
                "principal": names.get(s.principal_id, s.principal_id),
                "client": s.client,
                "session_id": s.a2e_session,
                "last_call": s.last_call,
            }
            for s in (state.mcp.open_sessions() if state.mcp else [])
        ]
        served = state.mcp is not None
        return state.render(request, "mcp_sessions.html", user=user, sessions=rows, served=served)

    @router.post("/mcp-sessions/end")
    async def end(request: Request) -> Response:
        signed = await console.operator_form(request)
        if isinstance(signed, Response):
            return signed
        user, form = signed
        key = form.get("key", "")
        if state.mcp is None or not _SESSION_ID.fullmatch(key):
            return state.message(request, 404, "Not open", "no such MCP session", user)
        await run_in_threadpool(state.mcp.end_by_operator, key, user.principal.principal_id)
        return RedirectResponse("/console/mcp-sessions", status_code=303)

    return router
