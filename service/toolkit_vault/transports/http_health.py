"""`/readyz` and `/metrics`, and `/metrics` on a loopback listener of its own.

`/readyz` needs no token (a load balancer's probe has none): 200 when this process can
serve writes now, else 503, with the failures as codes (`core.health.FAILURES`); the
reasons go to the log. `/metrics` is the Prometheus text format of the process's metrics
(`telemetry.metrics`), for an operator's or auditor's token: the figures say how busy each
toolkit is, which is the vault's business, not an agent's. An operator may also serve it,
without a token, on a loopback address of its own (`TOOLKIT_VAULT_METRICS_LISTEN`), for a
Prometheus agent beside the vault; any other address is refused at start-up.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest, start_http_server
from pydantic import BaseModel

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.health import FAILURES, ReadinessProbe
from toolkit_vault.errors import VaultError
from toolkit_vault.telemetry.metrics import METRICS
from toolkit_vault.transports.problems import PROBLEM_RESPONSES

__all__ = ["Ready", "health_routes", "serve_metrics_on_loopback"]


class Ready(BaseModel):
    """`ready`, or `not_ready` with `failures` (codes: database_unreachable,
    state_not_believed, keys_not_open, audit_devices_refusing)."""

    status: str
    failures: list[str] = []


def health_routes(
    probe: ReadinessProbe,
    in_thread: Callable[..., Awaitable[Any]],
    as_auditor: Callable[..., Awaitable[Principal]],
) -> APIRouter:
    routes = APIRouter()

    @routes.get("/readyz", response_model=Ready, responses={503: {"model": Ready}})
    async def readyz() -> JSONResponse:
        readiness = await in_thread(probe.check)  # reads the database: never on the loop
        body = Ready(
            status="ready" if readiness.ready else "not_ready",
            failures=[code for code in readiness.failures if code in FAILURES],
        )
        return JSONResponse(body.model_dump(), status_code=200 if readiness.ready else 503)

    @routes.get(
        "/metrics", include_in_schema=True, response_class=Response, responses=PROBLEM_RESPONSES
    )
    async def metrics(_: Principal = Depends(as_auditor)) -> Response:
        """The Prometheus text format (an operator's or auditor's token)."""
        if not METRICS.enabled:
            return Response("metrics are off (TOOLKIT_VAULT_METRICS=off)\n", status_code=404)
        text = await in_thread(generate_latest, METRICS.registry)  # readers read the store
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    return routes


def serve_metrics_on_loopback(address: str) -> tuple[str, int]:
    """Serve `/metrics` (no token) on `HOST:PORT`, a loopback address only, in a thread of
    its own; the address served. VaultError for any other address."""
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    try:
        port = int(port_text)
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback or not 0 <= port <= 65535:
        raise VaultError(
            "TOOLKIT_VAULT_METRICS_LISTEN takes a loopback HOST:PORT (127.0.0.1:9464); "
            "a scrape from elsewhere goes to /metrics with a token"
        )
    try:
        server, _thread = start_http_server(port, host, registry=METRICS.registry)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise VaultError(f"cannot serve metrics on {host}:{port}: {reason}") from None
    return host, int(server.server_address[1])
