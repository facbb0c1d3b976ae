"""`toolkit-vault serve`: A2E over WebSocket and HTTP, and the admin API, as thin shells.

Every route but `/healthz` needs a bearer token; the token's role decides what it reaches:
`agent` speaks A2E on its own sessions, `operator` sees keys and the check, `auditor` sees
history and the audit chain. Each request runs the synchronous service API in a worker
thread; a WebSocket's responses and push events leave through one queue, in order.
Every refusal is a well-formed A2E `error` body, never a bare dropped connection.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from . import __version__
from .errors import KeyProviderError, VaultError
from .history import history, parse_time
from .keyadmin import key_status
from .logs import REQUEST_ID
from .principals import authenticate
from .protocol import (
    MAX_MESSAGE_BYTES,
    ErrorCode,
    ErrorMessage,
    HandshakeRequest,
    InvalidMessage,
    Message,
    dump_message,
    parse_message,
)
from .providers import KeyProvider
from .service import Principal, Vault
from .web import install_console

__all__ = ["Limits", "create_app"]

log = logging.getLogger("toolkit_vault.http")
SESSION_HEADER = "A2E-Session"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class Limits:
    message_bytes: int = MAX_MESSAGE_BYTES
    connections_per_principal: int = 8
    requests_per_second: float = 50.0
    burst: int = 100


class _RateLimiter:
    """A token bucket per principal: `burst` at once, refilled at `rate` per second."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, principal_id: str) -> bool:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(principal_id, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            allowed = tokens >= 1
            self._buckets[principal_id] = (tokens - 1 if allowed else tokens, now)
        return allowed


class Refused(Exception):
    """An HTTP refusal with an A2E error body."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        req_id: str = "",
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.req_id = status, code, message, req_id
        self.details = details or []


def _error_body(code: ErrorCode, message: str, req_id: str = "") -> dict[str, Any]:
    return ErrorMessage(req_id=req_id, code=code, message=message).model_dump(by_alias=True)


class HistoryOut(BaseModel):
    versions: list[dict[str, Any]]


class KeysOut(BaseModel):
    provider: dict[str, Any]
    master_keys: list[dict[str, Any]]
    vault_keys: list[dict[str, Any]]
    keys: list[dict[str, Any]]


class Health(BaseModel):
    status: str
    version: str


def create_app(vault: Vault, provider: KeyProvider, limits: Limits | None = None) -> FastAPI:
    limits = limits or Limits()
    app = FastAPI(title="toolkit-vault", version=__version__)
    bearer = HTTPBearer(auto_error=False)
    rate = _RateLimiter(limits.requests_per_second, limits.burst)
    open_sockets: dict[str, int] = {}

    @app.exception_handler(Refused)
    async def refused(_request: Request, exc: Refused) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        body = _error_body(exc.code, exc.message, exc.req_id) | {"details": exc.details}
        return JSONResponse(body, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {
                "pointer": "/" + "/".join(str(p) for p in err.get("loc", ())),
                "keyword": err.get("type"),
            }
            for err in exc.errors()
        ]  # locations and kinds only: FastAPI's default body would echo the submitted input
        body = _error_body("INVALID_MESSAGE", "request parameters are invalid") | {
            "details": details
        }
        return JSONResponse(body, status_code=422)

    @app.middleware("http")
    async def request_log(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        given = request.headers.get("x-request-id", "")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        token = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        try:
            response = await call_next(request)
            response.headers["X-Request-ID"] = request_id
            log.info(
                "request",
                extra={
                    "method": request.method,
                    "path": request.url.path,
                    "status": response.status_code,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    "principal": getattr(request.state, "principal", None),
                },
            )
            return response
        finally:
            REQUEST_ID.reset(token)

    def principal_for(token: str | None) -> Principal:
        principal = authenticate(vault.store, token) if token else None
        if principal is None:
            raise Refused(401, "UNAUTHORIZED", "a valid bearer token is required")
        return principal

    def role(*allowed: str) -> Callable[..., Principal]:
        def dependency(
            request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)
        ) -> Principal:
            principal = principal_for(credentials.credentials if credentials else None)
            request.state.principal = principal.principal_id
            if principal.role not in allowed:
                raise Refused(
                    403, "UNAUTHORIZED", f"this route needs the {' or '.join(allowed)} role"
                )
            if not rate.allow(principal.principal_id):
                raise Refused(429, "RUNTIME_ERROR", "rate limit exceeded; retry after a second")
            return principal

        return dependency

    as_agent, as_auditor, as_operator = role("agent"), role("auditor", "operator"), role("operator")
    as_any_admin = role("operator", "auditor")

    @app.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        return Health(status="ok", version=__version__)

    @app.post("/a2e", responses={200: {"description": "one A2E message"}})
    async def a2e_post(
        request: Request,
        principal: Principal = Depends(as_agent),
        a2e_session: str | None = Header(default=None, alias=SESSION_HEADER),
    ) -> JSONResponse:
        """One A2E message in, one out; the session is named by the `A2E-Session` header."""
        too_big = Refused(
            413,
            "INVALID_MESSAGE",
            f"message exceeds {limits.message_bytes} bytes",
            details=[{"limit": "message_bytes", "max": limits.message_bytes}],
        )
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.message_bytes:
            raise too_big
        raw = bytearray()
        async for chunk in request.stream():  # chunked: never buffered past the limit
            raw += chunk
            if len(raw) > limits.message_bytes:
                raise too_big
        out = await run_in_threadpool(
            _handle_one, vault, principal, bytes(raw), a2e_session, limits
        )
        return JSONResponse(out)

    @app.websocket("/a2e")
    async def a2e_socket(websocket: WebSocket) -> None:
        await websocket.accept()
        header = websocket.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        try:
            principal = principal_for(token if scheme.lower() == "bearer" else None)
            if principal.role != "agent":
                raise Refused(403, "UNAUTHORIZED", "A2E needs the agent role")
        except Refused as exc:
            await websocket.send_json(_error_body(exc.code, exc.message))
            await websocket.close(code=1008, reason=exc.message)
            return
        count = open_sockets.get(principal.principal_id, 0)
        if count >= limits.connections_per_principal:
            message = f"at most {limits.connections_per_principal} connections per principal"
            await websocket.send_json(_error_body("RUNTIME_ERROR", message))
            await websocket.close(code=1013, reason=message)
            return
        open_sockets[principal.principal_id] = count + 1
        try:
            await _serve_socket(websocket, vault, principal, rate, limits)
        finally:
            open_sockets[principal.principal_id] -= 1

    @app.get("/v1/history", response_model=HistoryOut)
    async def v1_history(
        session: str | None = Query(default=None, max_length=200),
        toolkit: str | None = Query(default=None, max_length=200),
        since: str | None = Query(default=None, max_length=64),
        _: Principal = Depends(as_auditor),
    ) -> HistoryOut:
        """Config versions: public config and secret fingerprints only (`history --json`)."""
        try:
            since_ts = parse_time(since) if since else None
        except VaultError as exc:
            raise Refused(422, "INVALID_MESSAGE", exc.message) from None
        versions = await run_in_threadpool(history, vault.store, session, toolkit, since_ts)
        return HistoryOut(versions=versions)

    @app.get("/v1/audit/verify")
    async def v1_audit_verify(
        _: Principal = Depends(as_auditor),
    ) -> dict[str, Any]:
        """Walk the audit chain (as `audit verify --json`)."""
        report = await run_in_threadpool(vault.verify_audit)
        return report.as_json()

    @app.get("/v1/keys/status", response_model=KeysOut)
    async def v1_keys_status(_: Principal = Depends(as_operator)) -> KeysOut:
        """Both key layers: master keys and vault keys (as `keys status --json`)."""
        return KeysOut(**await run_in_threadpool(key_status, vault.store, provider))

    @app.get("/v1/check")
    async def v1_check(_: Principal = Depends(as_any_admin)) -> dict[str, Any]:
        """Decrypt-verify every stored version in memory (as `check --json`)."""
        try:
            result: dict[str, Any] = await run_in_threadpool(vault.check)
        except KeyProviderError as exc:  # a vault key made elsewhere, the provider down
            raise Refused(503, "RUNTIME_ERROR", exc.message) from None
        return result

    # /console: intake forms and the admin console; links signed with the vault's intake key
    install_console(app, vault, provider, intake_key=vault.intake_key)
    return app


def _handle_one(
    vault: Vault, principal: Principal, raw: bytes, session_id: str | None, limits: Limits
) -> dict[str, Any]:
    connection = vault.connect(principal)
    try:
        request = parse_message(raw, max_bytes=limits.message_bytes)
    except InvalidMessage as exc:
        return _error_body("INVALID_MESSAGE", exc.message, exc.req_id) | {"details": exc.details}
    try:
        if session_id and not isinstance(request, HandshakeRequest):
            connection.bind(session_id)
        response: Message = connection.handle(request)
    except VaultError as exc:
        return _error_body("RUNTIME_ERROR", exc.message, request.id)
    return dict(response.model_dump(mode="json", by_alias=True))


async def _serve_socket(
    websocket: WebSocket, vault: Vault, principal: Principal, rate: _RateLimiter, limits: Limits
) -> None:
    loop = asyncio.get_running_loop()
    outbound: asyncio.Queue[str | None] = asyncio.Queue()

    def push(event: Message) -> None:  # called from worker threads
        loop.call_soon_threadsafe(outbound.put_nowait, dump_message(event))

    async def sender() -> None:
        while (text := await outbound.get()) is not None:
            await websocket.send_text(text)

    connection = vault.connect(principal, push)
    sending = asyncio.create_task(sender())
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            raw = message["text"] if message.get("text") is not None else message.get("bytes", b"")
            if not rate.allow(principal.principal_id):
                await outbound.put(
                    dump_message(
                        ErrorMessage(code="RUNTIME_ERROR", message="rate limit exceeded; slow down")
                    )
                )
                continue
            lines = await run_in_threadpool(connection.handle_raw, raw, limits.message_bytes)
            for line in lines:
                await outbound.put(line)
    except WebSocketDisconnect:
        pass
    finally:
        await run_in_threadpool(connection.close)
        await outbound.put(None)
        await sending
