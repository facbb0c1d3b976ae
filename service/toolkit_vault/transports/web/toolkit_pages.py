"""The console's page of one toolkit (`/console/toolkits/{name}`): what the Toolkits table
shortens to fit a screen, whole: its description, tools, secret fields, source and the
full schema digest (the table shows its first characters). Operators only, like the table."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from toolkit_vault.errors import ToolkitNotFound
from toolkit_vault.transports.web.console import Console
from toolkit_vault.transports.web.pages import WebState

__all__ = ["console_toolkit_routes"]


def console_toolkit_routes(state: WebState) -> APIRouter:
    console, router = Console(state), APIRouter()

    @router.get("/toolkits/{name}")
    async def toolkit(request: Request, name: str) -> Response:
        user = await console.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        try:
            found = state.vault.registry.get(name)
        except ToolkitNotFound:  # the name is not repeated: it came from the address
            return state.message(request, 404, "No such toolkit", "No toolkit has that name.", user)
        secret = console.secret_pointers(found)
        return state.render(request, "toolkit.html", user=user, t=found, secret=secret)

    return router
