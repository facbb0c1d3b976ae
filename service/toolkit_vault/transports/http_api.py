"""`toolkit-vault serve`: A2E over WebSocket and HTTP, and the admin API, as thin shells.

Every route but `/healthz` and `/readyz` needs a bearer token, the OpenAPI document included; the
token's role decides what it reaches: `agent` speaks A2E on its own sessions, `operator`
sees keys and runs the check, `auditor` (and operator) sees history and the audit chain.
Tokens are checked through `PrincipalCache` on every request and every WebSocket message,
so a revoked token stops working within a second everywhere, its open WebSockets included;
an expired one is refused from its expiry on (401 saying when it expired), and a WebSocket
opened with it is closed at that moment, even while its client is silent.
Each request runs the synchronous service API in a worker thread (as many as the database
pool has connections), except a small list the service can answer from memory
(`A2EConnection.answer_without_blocking`), which is answered on the event loop; a WebSocket's
responses and push events leave in order, through its `Outbox`. A configure that waits on a
credential check runs on threads of its own (`a2e.lanes`).
Every refusal is a well-formed answer, never a bare dropped connection: an A2E `error` body
on `/a2e`, RFC 9457 problem details on `/v1` and the other routes FastAPI serves
(`problems`).

This module assembles the app; the pieces live apart: the guards every route passes
(`http_guards`: token, role, rate, size), the A2E routes (`a2e.over_http`,
`a2e.over_websocket`), the `/v1` API (`http_admin`, `http_audit`, `http_operator`,
`http_templates`) and the console (`web`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from toolkit_vault import __version__
from toolkit_vault.access.principals import Principal
from toolkit_vault.core.health import ReadinessProbe, metric_readers
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.providers import KeyProvider
from toolkit_vault.settings import OidcSettings
from toolkit_vault.store.database import POOL_SIZE
from toolkit_vault.telemetry.metrics import METRICS
from toolkit_vault.transports.a2e.lanes import Lanes
from toolkit_vault.transports.a2e.over_http import A2E_POST_DOC, A2EPost
from toolkit_vault.transports.a2e.over_websocket import A2ESocket
from toolkit_vault.transports.asgi import RequestLog
from toolkit_vault.transports.http_access import PrincipalCache, SessionBindings, SharedMarks
from toolkit_vault.transports.http_admin import Guards, admin_routes
from toolkit_vault.transports.http_allowances import allowance_routes
from toolkit_vault.transports.http_audit import audit_routes
from toolkit_vault.transports.http_console_roles import console_role_routes
from toolkit_vault.transports.http_guards import Gate, Limits, install_refusals
from toolkit_vault.transports.http_health import health_routes
from toolkit_vault.transports.http_operator import operator_routes
from toolkit_vault.transports.http_templates import template_routes
from toolkit_vault.transports.http_toolkits import toolkit_routes
from toolkit_vault.transports.mcp.over_http import MCP_PATH, McpHttp
from toolkit_vault.transports.problems import PROBLEM_RESPONSES
from toolkit_vault.transports.web import RememberOrigin, install_console
from toolkit_vault.transports.workers import Workers

__all__ = ["Limits", "create_app"]


class Health(BaseModel):
    """`status` is `ok`, or `degraded` when `warnings` name something to look at (codes
    only: the route needs no token): `witness_damaged`, a witness slot that does not hold
    (`Store.witness_damage`; the log and `audit verify` say more); `checkpoint_refused`,
    the checkpoint the home names did not verify at start (`store.checkpoints`: the
    process walked the whole chain; the log says why)."""

    status: str
    version: str
    warnings: list[str] = []


class _VaultApp(FastAPI):
    """FastAPI, but `/a2e`, the hot route (`POST` and the WebSocket), is answered before
    FastAPI's middleware stack and router: they cost more CPU than a whole list (a no-op
    endpoint answers several times the requests as plain ASGI as through FastAPI;
    BENCHMARKS.md), and on a WebSocket they wrap every message sent. The routes keep what the stack
    gave them: the request log and id, the origin for intake links, and the A2E error body
    of a refusal; an unexpected error reaches uvicorn, which answers 500 (or closes the
    WebSocket) and logs it, as Starlette's error middleware would."""

    a2e_post: ASGIApp | None = None
    a2e_socket: ASGIApp | None = None
    mcp: ASGIApp | None = None  # `/mcp`, MCP's streamable HTTP (`mcp.over_http`)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = None
        if scope.get("path") == MCP_PATH and scope["type"] == "http":
            route = self.mcp
        elif scope.get("path") == "/a2e":
            if scope["type"] == "websocket":
                route = self.a2e_socket
            elif scope["type"] == "http" and scope["method"] == "POST":
                route = self.a2e_post
        if route is not None:
            await route(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(
    vault: Vault,
    provider: KeyProvider,
    limits: Limits | None = None,
    public_url: str | None = None,
    oidc: OidcSettings | None = None,
) -> FastAPI:
    """The app `serve` runs. Intake links name `public_url`, else the server's own address
    (`web._origin`), never one a request header gives. With `oidc`, people sign in to the
    console through that identity provider too."""
    limits = limits or Limits()
    app = _VaultApp(
        title="toolkit-vault", version=__version__, openapi_url=None, docs_url=None, redoc_url=None
    )
    app.add_middleware(RequestLog)
    install_refusals(app)
    workers = Workers(POOL_SIZE, "toolkit-vault")  # as many as pooled connections
    access, bindings = PrincipalCache(vault.store), SessionBindings(vault)
    app.state.access, app.state.bindings = access, bindings
    gate = Gate(access, workers.run, limits)
    marks, lanes = SharedMarks(vault.mark_on_loop), Lanes.for_vault(vault, workers)

    app.a2e_post = RequestLog(RememberOrigin(A2EPost(gate, bindings, marks, lanes, limits)))
    app.a2e_socket = RememberOrigin(A2ESocket(vault, gate, marks, lanes, limits))
    mcp = McpHttp(vault, gate)
    app.mcp = RequestLog(RememberOrigin(mcp))

    as_auditor, as_operator = gate.role("auditor", "operator"), gate.role("operator")
    app.include_router(_own_routes(vault, gate.role("agent", "auditor", "operator")))
    guards = Guards(vault, provider, workers.run, as_auditor, as_operator)
    problems = PROBLEM_RESPONSES  # each /v1 refusal, as the OpenAPI document declares it
    app.include_router(admin_routes(guards), responses=problems)
    app.include_router(audit_routes(guards), responses=problems)  # GET /v1/audit/events
    app.include_router(operator_routes(guards), responses=problems)
    app.include_router(template_routes(guards), responses=problems)  # /v1/templates
    app.include_router(toolkit_routes(guards), responses=problems)  # /v1/toolkits/{name}
    app.include_router(console_role_routes(guards), responses=problems)  # /v1/console-roles
    app.include_router(allowance_routes(guards), responses=problems)  # /v1/allowances
    app.include_router(health_routes(ReadinessProbe(vault), workers.run, as_auditor))
    METRICS.readings.put("vault", metric_readers(vault))  # read at each scrape of /metrics

    # /console: intake forms and the admin console; links signed with the vault's intake key
    install_console(
        app,
        vault,
        provider,
        intake_key=vault.intake_key,
        public_url=public_url,
        oidc=oidc,
        mcp=mcp.sessions,
    )
    return app


def _own_routes(vault: Vault, as_anyone: Callable[..., Any]) -> APIRouter:
    """`/healthz` (no token: codes only) and `/openapi.json` (any token holder)."""
    routes = APIRouter()

    @routes.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        try:
            damaged = vault.store.witness_damage() is not None
        except VaultError:
            damaged = True  # unreadable or not private: the log and `audit verify` say which
        warnings = ["witness_damaged"] if damaged else []
        if vault.store.checkpoints.refused is not None:
            warnings.append("checkpoint_refused")
        if warnings:
            return Health(status="degraded", version=__version__, warnings=warnings)
        return Health(status="ok", version=__version__)

    @routes.get("/openapi.json", include_in_schema=False)
    async def openapi(request: Request, _: Principal = Depends(as_anyone)) -> JSONResponse:
        """The OpenAPI document, for any token holder (no interactive pages are served)."""
        document = request.app.openapi()
        document["paths"].setdefault("/a2e", {})["post"] = A2E_POST_DOC
        return JSONResponse(document)

    return routes
