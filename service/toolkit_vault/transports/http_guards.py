"""The app's guards, passed before a route does any work: who a bearer token names and
whether it still holds (`Gate.principal_for`, through `PrincipalCache`, so a revoked token
stops working within a second), whether that principal's role may use the route and its
rate is kept (`Gate.admit`; `Gate.role` is the same as a FastAPI dependency), how large a
message may be (`Limits`, `read_bounded`), and how a refusal is answered: an A2E `error`
body on `/a2e` (`refused`), RFC 9457 problem details on every route FastAPI serves
(`install_refusals`, `problems`). The origin an intake link names is
remembered by `web.RememberOrigin`, which `http_api` wraps around the routes."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from toolkit_vault.access.principals import Principal, TokenExpired
from toolkit_vault.core.rates import TokenBucket
from toolkit_vault.protocol import MAX_MESSAGE_BYTES
from toolkit_vault.telemetry import metrics
from toolkit_vault.transports.http_access import PrincipalCache
from toolkit_vault.transports.problems import invalid, problem, unrouted
from toolkit_vault.transports.refusals import Refused, error_body
from toolkit_vault.transports.web import client_left

__all__ = [
    "Gate",
    "Limits",
    "RateLimiter",
    "bearer_token",
    "install_refusals",
    "read_bounded",
    "refused",
]


@dataclass(frozen=True)
class Limits:
    message_bytes: int = MAX_MESSAGE_BYTES
    connections_per_principal: int = 8
    requests_per_second: float = 50.0
    burst: int = 100


class RateLimiter:
    """A token bucket per principal: `burst` at once, refilled at `rate` per second."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    def allow(self, principal_id: str) -> bool:
        with self._lock:
            bucket = self._buckets.get(principal_id)
            if bucket is None:
                bucket = self._buckets[principal_id] = TokenBucket(self.rate, self.burst)
        return bucket.take()


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer ...` header value; None for any other."""
    scheme, _, token = authorization.partition(" ")
    return token if scheme.lower() == "bearer" else None


class Gate:
    """The token, role and rate checks every route but `/healthz` passes, on each request
    and each WebSocket message. A token is recalled from `access`'s one-second cache, else
    authenticated in a worker thread (`in_thread`): the store is never read on the loop."""

    def __init__(
        self,
        access: PrincipalCache,
        in_thread: Callable[..., Awaitable[Any]],
        limits: Limits,
    ) -> None:
        self.access = access
        self.rate = RateLimiter(limits.requests_per_second, limits.burst)
        self._in_thread = in_thread
        self._bearer = HTTPBearer(auto_error=False)  # names the scheme in the OpenAPI document

    async def principal_for(self, token: str | None) -> Principal:
        """The principal `token` names, or `Refused` (401): missing, unknown, revoked, or
        expired (saying when: its holder may know that, never the token)."""
        principal = None
        if token:
            try:
                principal = self.access.recall(token) or await self._in_thread(
                    self.access.authenticate, token
                )
            except TokenExpired as exc:
                raise Refused(401, "UNAUTHORIZED", exc.message) from None
        if principal is None:
            raise Refused(401, "UNAUTHORIZED", "a valid bearer token is required")
        return principal

    async def admit(self, request: Request, allowed: tuple[str, ...]) -> Principal:
        """The request's principal, if its token is valid, its role allowed and its rate kept."""
        token = bearer_token(request.headers.get("authorization", ""))
        principal = await self.principal_for(token)
        request.state.principal = principal.principal_id
        if principal.role not in allowed:
            raise Refused(403, "UNAUTHORIZED", f"this route needs the {' or '.join(allowed)} role")
        if not self.rate.allow(principal.principal_id):
            metrics.observe_rate_limited("http")
            raise Refused(429, "RUNTIME_ERROR", "rate limit exceeded; retry after a second")
        return principal

    def role(self, *allowed: str) -> Callable[..., Awaitable[Principal]]:
        """`admit` as a FastAPI dependency, for routes mounted through FastAPI."""
        admit = self.admit

        async def dependency(
            request: Request, _: HTTPAuthorizationCredentials | None = Depends(self._bearer)
        ) -> Principal:
            return await admit(request, allowed)

        return dependency


async def read_bounded(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it is known to exceed `limit` bytes:
    by its declared length, or while it streams in (chunked: never buffered past it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_big(limit)
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise _too_big(limit)
    return bytes(raw)


def _too_big(limit: int) -> Refused:
    details = [{"limit": "message_bytes", "max": limit}]
    return Refused(413, "INVALID_MESSAGE", f"message exceeds {limit} bytes", details=details)


async def refused(_request: Request, exc: Refused) -> JSONResponse:
    """A refusal's answer: its status, its A2E `error` body, and `Retry-After` on a 429."""
    headers = {"Retry-After": "1"} if exc.status == 429 else None
    body = error_body(exc.code, exc.message, exc.req_id) | {"details": exc.details}
    return JSONResponse(body, status_code=exc.status, headers=headers)


def install_refusals(app: FastAPI) -> None:
    """Answer a `Refused`, a client that left, invalid parameters and an unknown route or
    method, on every route FastAPI serves, as problem details (the A2E routes answer the
    first two themselves, as A2E errors)."""
    app.add_exception_handler(Refused, problem)  # type: ignore[arg-type]
    app.add_exception_handler(ClientDisconnect, client_left)
    app.add_exception_handler(RequestValidationError, invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, unrouted)  # type: ignore[arg-type]
