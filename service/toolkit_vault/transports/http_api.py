"""`toolkit-vault serve`: A2E over WebSocket and HTTP, and the admin API, as thin shells.

Every route but `/healthz` needs a bearer token, the OpenAPI document included; the
token's role decides what it reaches: `agent` speaks A2E on its own sessions, `operator`
sees keys and runs the check, `auditor` (and operator) sees history and the audit chain.
Tokens are checked through `PrincipalCache` on every request and every WebSocket message,
so a revoked token stops working within a second everywhere, its open WebSockets included;
an expired one is refused from its expiry on (401 saying when it expired), and a WebSocket
opened with it is closed at that moment, even while its client is silent.
Each request runs the synchronous service API in a worker thread (as many as the database
pool has connections), except a small list the service can answer from memory
(`A2EConnection.answer_at_once`), which is answered on the event loop; a WebSocket's
responses and push events leave in order, through its `Outbox`. A configure that waits on a
credential check (`Vault.waits_on_a_check`: any agent can make one wait up to the check's
deadline) runs on threads of its own, never on those the other agents' messages need.
Every refusal is a well-formed A2E `error` body, never a bare dropped connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import Depends, FastAPI, Request, Response, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from toolkit_vault import __version__
from toolkit_vault.access.principals import Principal, TokenExpired, expiry_message
from toolkit_vault.core.connection import A2EConnection, Reply, connect, read_request
from toolkit_vault.core.rates import TokenBucket
from toolkit_vault.core.vault import ANSWERED_AT_ONCE, Mark, Vault
from toolkit_vault.core.verification import MAX_CHECKS
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.providers import KeyProvider
from toolkit_vault.protocol import (
    MAX_MESSAGE_BYTES,
    ErrorCode,
    ErrorMessage,
    HandshakeRequest,
    Message,
    dump_message,
)
from toolkit_vault.store.database import POOL_SIZE
from toolkit_vault.transports.asgi import RequestLog
from toolkit_vault.transports.http_access import PrincipalCache, SessionBindings, SharedMarks
from toolkit_vault.transports.http_admin import Guards, admin_routes
from toolkit_vault.transports.http_audit import audit_routes
from toolkit_vault.transports.http_operator import operator_routes
from toolkit_vault.transports.http_templates import template_routes
from toolkit_vault.transports.refusals import Refused, error_body
from toolkit_vault.transports.web import RememberOrigin, client_left, install_console
from toolkit_vault.transports.workers import Workers

__all__ = ["Limits", "create_app"]

log = logging.getLogger("toolkit_vault.transports.http_api")
SESSION_HEADER = "A2E-Session"
REVOKED = "the token is no longer valid"
# A message this small is parsed on the event loop (tens of microseconds), so a list that
# needs no I/O is answered there, with no hand-over to a worker thread; a larger one is
# parsed in the worker, where it cannot hold up every other connection.
PARSE_ON_LOOP = 8 * 1024
A2E_GROUPED_WORKERS = 2  # see create_app
# Threads for configures that wait on a credential check: twice the checks allowed in flight,
# so one beyond them is refused at once (`CheckSlots`) rather than queued behind them.
CHECK_WORKERS = 2 * MAX_CHECKS
_A2E_DOC: dict[str, Any] = {  # POST /a2e is answered before FastAPI, which cannot see it
    "summary": "One A2E message in, one out",
    "description": "The session is named by the `A2E-Session` header (not for a handshake).",
    "operationId": "a2e_post",
    "security": [{"HTTPBearer": []}],
    "parameters": [
        {
            "name": SESSION_HEADER,
            "in": "header",
            "required": False,
            "schema": {"type": "string", "maxLength": 64},
            "description": "the session, as the handshake answered it (not for a handshake)",
        }
    ],
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    "responses": {
        "200": {
            "description": "one A2E message (an A2E `error` for a refused request)",
            "content": {"application/json": {"schema": {"type": "object"}}},
        },
    },
}


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
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    def allow(self, principal_id: str) -> bool:
        with self._lock:
            bucket = self._buckets.get(principal_id)
            if bucket is None:
                bucket = self._buckets[principal_id] = TokenBucket(self.rate, self.burst)
        return bucket.take()


class Health(BaseModel):
    """`status` is `ok`, or `degraded` when `warnings` name something to look at (codes
    only: the route needs no token): `witness_damaged`, a witness slot that does not hold
    (`Store.witness_damage`; the log and `audit verify` say more)."""

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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = None
        if scope.get("path") == "/a2e":
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
) -> FastAPI:
    """The app `serve` runs. Intake links name `public_url`, else the server's own address
    (`web._origin`), never one a request header gives."""
    limits = limits or Limits()
    app = _VaultApp(
        title="toolkit-vault", version=__version__, openapi_url=None, docs_url=None, redoc_url=None
    )
    app.add_middleware(RequestLog)
    bearer = HTTPBearer(auto_error=False)
    rate = _RateLimiter(limits.requests_per_second, limits.burst)
    access = PrincipalCache(vault.store)
    bindings = SessionBindings(vault)
    marks = SharedMarks(vault.mark_on_loop)
    workers = Workers(POOL_SIZE, "toolkit-vault")  # as many as pooled connections
    in_thread = workers.run
    # A2E messages take threads of their own where the store commits on its writer thread
    # (SQLite): a message's work is then Python under the GIL, so two threads do it all, and
    # queued messages run back to back instead of each waking one of eight: less CPU a
    # request and more configures and lists a second (BENCHMARKS.md). On
    # PostgreSQL a message waits on round trips, and the pool's size in threads overlaps them.
    grouped = vault.store.commits_in_groups
    a2e = Workers(A2E_GROUPED_WORKERS, "toolkit-vault-a2e") if grouped else workers
    checking = Workers(CHECK_WORKERS, "toolkit-vault-check")  # never those of the others
    route = partial(_route, vault, a2e, checking)
    open_sockets: dict[str, int] = {}
    app.state.access, app.state.bindings = access, bindings

    async def principal_for(token: str | None) -> Principal:
        principal = None
        if token:
            try:
                principal = access.recall(token) or await in_thread(access.authenticate, token)
            except TokenExpired as exc:  # its holder may know when (never the token)
                raise Refused(401, "UNAUTHORIZED", exc.message) from None
        if principal is None:
            raise Refused(401, "UNAUTHORIZED", "a valid bearer token is required")
        return principal

    @app.exception_handler(Refused)
    async def refused(_request: Request, exc: Refused) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        body = error_body(exc.code, exc.message, exc.req_id) | {"details": exc.details}
        return JSONResponse(body, status_code=exc.status, headers=headers)

    app.add_exception_handler(ClientDisconnect, client_left)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {
                "pointer": "/" + "/".join(str(p) for p in err.get("loc", ())),
                "keyword": err.get("type"),
            }
            for err in exc.errors()
        ]  # locations and kinds only: FastAPI's default body would echo the submitted input
        body = error_body("INVALID_MESSAGE", "request parameters are invalid") | {
            "details": details
        }
        return JSONResponse(body, status_code=422)

    async def admit(request: Request, allowed: tuple[str, ...]) -> Principal:
        """The request's principal, if its token is valid, its role allowed and its rate kept."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        principal = await principal_for(token if scheme.lower() == "bearer" else None)
        request.state.principal = principal.principal_id
        if principal.role not in allowed:
            raise Refused(403, "UNAUTHORIZED", f"this route needs the {' or '.join(allowed)} role")
        if not rate.allow(principal.principal_id):
            raise Refused(429, "RUNTIME_ERROR", "rate limit exceeded; retry after a second")
        return principal

    def role(*allowed: str) -> Callable[..., Any]:
        async def dependency(
            request: Request, _: HTTPAuthorizationCredentials | None = Depends(bearer)
        ) -> Principal:
            return await admit(request, allowed)

        return dependency

    as_auditor, as_operator = role("auditor", "operator"), role("operator")
    as_anyone = role("agent", "auditor", "operator")

    @app.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        try:
            damaged = vault.store.witness_damage() is not None
        except VaultError:
            damaged = True  # unreadable or not private: the log and `audit verify` say which
        if damaged:
            return Health(status="degraded", version=__version__, warnings=["witness_damaged"])
        return Health(status="ok", version=__version__)

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(_: Principal = Depends(as_anyone)) -> JSONResponse:
        """The OpenAPI document, for any token holder (no interactive pages are served)."""
        document = app.openapi()
        document["paths"].setdefault("/a2e", {})["post"] = _A2E_DOC
        return JSONResponse(document)

    async def a2e_post(request: Request) -> Response:
        """One A2E message in, one out; the session is named by the `A2E-Session` header.

        The hot route, answered before FastAPI's stack (`_VaultApp`): its dependency
        solving and middleware cost more than the rest of a list. It checks the token
        itself."""
        principal = await admit(request, ("agent",))
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
        body, session = bytes(raw), request.headers.get(SESSION_HEADER)
        if session is not None:  # whitespace around a field value is not part of it (RFC 9110)
            session = session.strip(" \t")
        if len(body) <= PARSE_ON_LOOP:
            message = read_request(body, limits.message_bytes)
        else:  # parsed where it cannot hold up the loop, then routed like any other
            message = await a2e.run(read_request, body, limits.message_bytes)
        bound = bindings.bound(principal, session) if session else None
        answer = None
        if bound and isinstance(message, ANSWERED_AT_ONCE):
            answer = bound.answer_at_once(message, await marks.read())
        if answer is not None:
            return Response(answer, media_type="application/json")
        reply = await route(message).run_settled(
            _handle_one, bindings, principal, message, session, limits
        )
        return Response(reply.lines()[0], media_type="application/json")

    async def a2e_front(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            response = await a2e_post(request)
        except Refused as exc:
            response = await refused(request, exc)
        except ClientDisconnect as exc:  # gone, or its body too slow (`http_server`)
            response = await client_left(request, exc)
        await response(scope, receive, send)

    app.a2e_post = RequestLog(RememberOrigin(a2e_front))

    async def a2e_socket(scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)
        await websocket.accept()
        header = websocket.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token if scheme.lower() == "bearer" else ""
        try:
            principal = await principal_for(token)
            if principal.role != "agent":
                raise Refused(403, "UNAUTHORIZED", "A2E needs the agent role")
        except Refused as exc:
            await websocket.send_json(error_body(exc.code, exc.message))
            await websocket.close(code=1008, reason=exc.message)
            return
        count = open_sockets.get(principal.principal_id, 0)
        if count >= limits.connections_per_principal:
            message = f"at most {limits.connections_per_principal} connections per principal"
            await websocket.send_json(error_body("RUNTIME_ERROR", message))
            await websocket.close(code=1013, reason=message)
            return
        open_sockets[principal.principal_id] = count + 1
        try:
            await _serve_socket(
                receive,
                send,
                partial(connect, vault),
                principal,
                access.believes(token, principal),
                partial(_still_valid, principal_for, token, principal),
                a2e,
                route,
                marks,
                rate,
                limits,
            )
        finally:
            open_sockets[principal.principal_id] -= 1
            if not open_sockets[principal.principal_id]:
                del open_sockets[principal.principal_id]

    app.a2e_socket = RememberOrigin(a2e_socket)

    guards = Guards(vault, provider, in_thread, as_auditor, as_operator)
    app.include_router(admin_routes(guards))
    app.include_router(audit_routes(guards))  # GET /v1/audit/events
    app.include_router(operator_routes(guards))
    app.include_router(template_routes(guards))  # /v1/templates

    # /console: intake forms and the admin console; links signed with the vault's intake key
    install_console(app, vault, provider, intake_key=vault.intake_key, public_url=public_url)
    return app


def _route(vault: Vault, a2e: Workers, checking: Workers, message: Message) -> Workers:
    """The threads a message runs on: its own for a configure that waits on a check."""
    return checking if vault.waits_on_a_check(message) else a2e


def _handle_one(
    bindings: SessionBindings,
    principal: Principal,
    raw: bytes | Message,
    session_id: str | None,
    limits: Limits,
) -> Reply:
    """One HTTP A2E message (raw, or as `read_request` read it): a handshake binds a new
    connection, anything else uses the session's bound connection (bound here on its first
    use in this process), and its write may be left committing (`A2EConnection.start`)."""
    request = read_request(raw, limits.message_bytes) if isinstance(raw, bytes) else raw
    if isinstance(request, ErrorMessage):
        return Reply.of(request, request)
    if isinstance(request, HandshakeRequest) or not session_id:
        connection = connect(bindings.vault, principal)
        response = connection.handle(request)
        bindings.remember(connection)  # bound by its handshake, if that succeeded
        return Reply.of(request, response)
    try:
        connection = bindings.connection(principal, session_id)
    except VaultError as exc:
        return Reply.of(request, _error(request.id, "RUNTIME_ERROR", exc.message))
    return connection.start(request, events=False)


def _error(
    req_id: str, code: ErrorCode, message: str, details: list[dict[str, Any]] | None = None
) -> ErrorMessage:
    return ErrorMessage(req_id=req_id, code=code, message=message, details=details or [])


async def _still_valid(
    principal_for: Callable[[str], Any], token: str, principal: Principal
) -> bool:
    try:
        return bool(await principal_for(token) == principal)
    except Refused:
        return False


class Outbox:
    """A WebSocket's answers and push events, sent in the order they were given: in place
    by whoever finds the socket idle (an answer, the common case: no queue, no task
    switch), or behind a send still waiting (a full transport buffer, a push from a worker
    thread), by the one already sending. An answer's sender waits for its turn, so a client
    that stops reading stops being read. A send to a client that left (uvicorn raises
    `ClientDisconnected`, an `OSError`) drops the rest: the loop hears the disconnect.

    An answer follows a message whose token was just checked; a push follows nothing the
    client sent, so each one is checked when its turn comes (`still_valid`: the token as
    the message loop checks it, from the one-second cache or the store). A push whose
    token is no longer valid is not sent: the socket gets the `UNAUTHORIZED` error and
    close code 1008 instead (`refuse`), and nothing after them; `refusal` says why (revoked,
    or when it expired)."""

    def __init__(
        self,
        send: Send,
        still_valid: Callable[[], Awaitable[bool]] | None = None,
        refusal: Callable[[], str] = lambda: REVOKED,
    ) -> None:
        self._send = send
        self._still_valid = still_valid
        self._refusal = refusal
        self._line: deque[tuple[str, bool]] = deque()  # (text, is a push)
        self._sending: asyncio.Future[None] | None = None
        self._gone = False
        self._drains: set[asyncio.Task[None]] = set()

    async def put(self, text: str) -> None:
        self._line.append((text, False))
        while self._line:  # sent in place, or by the send already under way
            if self._sending is None:
                await self._send_line()
            else:
                await asyncio.shield(self._sending)

    def put_nowait(self, text: str) -> None:
        """A push event, sent in its turn if its token still holds then."""
        self._line.append((text, True))
        if self._sending is None:
            task = asyncio.get_running_loop().create_task(self._send_line())
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)

    async def drained(self) -> None:
        """Wait for the line to be sent (or dropped)."""
        while self._drains:
            await asyncio.gather(*self._drains, return_exceptions=True)

    async def refuse(self) -> None:
        """Send the `UNAUTHORIZED` error and close with 1008, once the send under way is
        done; whatever is still in line is dropped."""
        self._line.clear()
        while self._sending is not None:
            await asyncio.shield(self._sending)
        await self._refuse()

    async def _refuse(self) -> None:
        self._line.clear()
        if self._gone:
            return
        self._gone = True
        reason = self._refusal()
        with contextlib.suppress(OSError):
            error = dump_message(_error("", "UNAUTHORIZED", reason))
            await self._send({"type": "websocket.send", "text": error})
            await self._send({"type": "websocket.close", "code": 1008, "reason": reason})

    async def _send_line(self) -> None:
        if self._sending is not None:  # a push scheduled behind a send already under way
            return
        self._sending = asyncio.get_running_loop().create_future()
        try:
            while self._line:
                text, push = self._line.popleft()
                if self._gone:
                    continue
                if push and self._still_valid is not None and not await self._still_valid():
                    await self._refuse()
                    break
                try:
                    await self._send({"type": "websocket.send", "text": text})
                except OSError:  # the client left: the loop hears its disconnect
                    self._gone = True
        finally:
            self._sending.set_result(None)
            self._sending = None


async def _serve_socket(
    receive: Receive,
    send: Send,
    connect: Callable[..., A2EConnection],
    principal: Principal,
    believed: Callable[[], bool],
    recheck: Callable[[], Awaitable[bool]],
    workers: Workers,
    route: Callable[[Message], Workers],
    marks: SharedMarks[Mark],
    rate: _RateLimiter,
    limits: Limits,
) -> None:
    """Serve one accepted WebSocket, on its ASGI `receive` and `send` (Starlette's
    `WebSocket` adds two calls a message and nothing this loop needs); every message first
    re-checks its token (`believed` from the cache, else `recheck` on the store; a revoked
    one gets an `UNAUTHORIZED` error and close code 1008) and the principal's rate. Answers
    and push events leave in order through its `Outbox`, which checks the token again
    before each push, so a revoked token hears nothing more even while its client is
    silent. A token with an expiry has the socket closed when it passes (`_close_at`)."""
    loop = asyncio.get_running_loop()

    async def still_valid() -> bool:
        return believed() or await recheck()

    outbox = Outbox(send, still_valid, partial(_refusal, principal))
    expiry = principal.expires_at
    closer = None if expiry is None else loop.create_task(_close_at(expiry, outbox))

    def push(event: Message) -> None:  # called from worker threads
        loop.call_soon_threadsafe(outbox.put_nowait, dump_message(event))

    connection = connect(principal, push)
    try:
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                break  # websocket.disconnect
            raw = message["text"] if message.get("text") is not None else message.get("bytes", b"")
            if not await still_valid():
                await outbox.refuse()
                break
            if not rate.allow(principal.principal_id):
                error = _error("", "RUNTIME_ERROR", "rate limit exceeded; slow down")
                await outbox.put(dump_message(error))
                continue
            if len(raw) > PARSE_ON_LOOP:  # parsed where it cannot hold up the loop
                request = await workers.run(read_request, raw, limits.message_bytes)
            else:
                request = read_request(raw, limits.message_bytes)
            answer = None
            if isinstance(request, ANSWERED_AT_ONCE):
                answer = connection.answer_at_once(request, await marks.read())
            if answer is None:
                reply = await route(request).run_settled(connection.start, request)
                lines = reply.lines()
            else:
                lines = [answer]
            for line in lines:
                await outbox.put(line)
    finally:
        if closer is not None:
            closer.cancel()
        await workers.run(connection.close)
        await outbox.drained()


def _refusal(principal: Principal) -> str:
    """Why a socket's token no longer holds: when it expired, if it has, else revoked."""
    if principal.expires_at is not None and principal.expired():
        return expiry_message(principal.expires_at)
    return REVOKED


async def _close_at(expires_at: float, outbox: Outbox) -> None:
    """At the token's expiry, refuse the socket (`UNAUTHORIZED`, close 1008) whether or not
    its client says anything: the clock, not a message, ends it."""
    while (left := expires_at - time.time()) > 0:  # a timer may wake a hair early
        await asyncio.sleep(left)
    await outbox.refuse()
