"""A registered toolkit under `/v1/toolkits/{name}` (auditors and operators): what `toolkits
show --json` prints, its definition and each field's secret mark, and the state of each of
its local servers on this machine (`starting`, `running`, `stopped`, `failed` with a
reason: `toolkits.server_processes`). Never a value."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path

from toolkit_vault.access.principals import Principal
from toolkit_vault.errors import ToolkitNotFound
from toolkit_vault.toolkits.import_report import describe_toolkit
from toolkit_vault.toolkits.server_processes import server_states
from toolkit_vault.transports.http_admin import Guards
from toolkit_vault.transports.refusals import Refused

__all__ = ["toolkit_routes"]

NAME = Path(min_length=1, max_length=200)


def toolkit_routes(guards: Guards) -> APIRouter:
    router = APIRouter()
    vault = guards.vault

    def detail(name: str) -> dict[str, Any]:
        shown = describe_toolkit(vault.toolkit(name))
        return {**shown, "servers": server_states(name)}

    @router.get("/v1/toolkits/{name}")
    async def v1_toolkit(name: str = NAME, _: Principal = Depends(guards.as_auditor)) -> Any:
        """One toolkit, as `toolkits show NAME --json`, with its local servers' states."""
        try:
            return await guards.in_thread(detail, name)
        except ToolkitNotFound as exc:
            raise Refused(404, "RUNTIME_ERROR", exc.message) from None

    return router
