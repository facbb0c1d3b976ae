"""`POST /a2e`: one A2E message in, one out; the session is named by the `A2E-Session`
header (not for a handshake). The hot route, answered as plain ASGI before FastAPI's stack
(`http_api._VaultApp`): its dependency solving and middleware cost more than the rest of a
list. It passes the guards itself (`Gate.admit`, `read_bounded`) and answers a refusal with
its A2E `error` body, as FastAPI's handlers would. A tool call runs whole on one of the
engine's threads (`calling`), and a client that leaves before its answer cancels it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from functools import partial
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.connection import Reply, connect, read_request
from toolkit_vault.core.vault import ANSWERED_WITHOUT_BLOCKING, Mark
from toolkit_vault.errors import VaultError
from toolkit_vault.protocol import (
    ErrorMessage,
    HandshakeRequest,
    Message,
    ToolCallRequest,
    dump_message,
)
from toolkit_vault.telemetry import metrics, traces
from toolkit_vault.telemetry.metrics import INVALID
from toolkit_vault.tools.calls import Cancellation
from toolkit_vault.tools.refusals import CallRefused
from toolkit_vault.transports.a2e.calling import answer_call, record_failed
from toolkit_vault.transports.a2e.lanes import Lanes
from toolkit_vault.transports.http_access import SessionBindings, SharedMarks
from toolkit_vault.transports.http_guards import Gate, Limits, read_bounded, refused
from toolkit_vault.transports.observed import kind, outcome
from toolkit_vault.transports.refusals import Refused
from toolkit_vault.transports.web import client_left

__all__ = ["A2E_POST_DOC", "SESSION_HEADER", "A2EPost"]

SESSION_HEADER = "A2E-Session"
A2E_POST_DOC: dict[str, Any] = {  # the route's OpenAPI entry: FastAPI cannot see it
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


class A2EPost:
    """The ASGI app of `POST /a2e`. A list the service can answer from memory is answered
    on the event loop (`A2EConnection.answer_without_blocking`); anything else runs in the thread
    `lanes` picks, and its write may be left committing (`Workers.run_settled`)."""

    def __init__(
        self,
        gate: Gate,
        bindings: SessionBindings,
        marks: SharedMarks[Mark],
        lanes: Lanes,
        limits: Limits,
    ) -> None:
        self._gate, self._bindings, self._marks = gate, bindings, marks
        self._lanes, self._limits = lanes, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        started, said = time.perf_counter(), [INVALID]
        try:
            response = await self.answer(request, said)
            answered = outcome(bytes(response.body))
        except Refused as exc:
            response, answered = await refused(request, exc), "refused"
        except ClientDisconnect as exc:  # gone, or its body too slow (`http_server`)
            response, answered = await client_left(request, exc), "refused"
        metrics.observe_request("http", said[0], answered, time.perf_counter() - started)
        await response(scope, receive, send)

    async def answer(self, request: Request, said: list[str] | None = None) -> Response:
        """The request's answer, or `Refused`; `said[0]` becomes the message's type."""
        principal = await self._gate.admit(request, ("agent",))
        limit = self._limits.message_bytes
        body = await read_bounded(request, limit)
        session = request.headers.get(SESSION_HEADER)
        if session is not None:  # whitespace around a field value is not part of it (RFC 9110)
            session = session.strip(" \t")
        message = await self._lanes.read(body, limit)
        if said is not None:
            said[0] = kind(message)
            traces.annotate(message__type=said[0])
        bound = self._bindings.bound(principal, session) if session else None
        answer = None
        if bound and isinstance(message, ANSWERED_WITHOUT_BLOCKING):
            answer = bound.answer_without_blocking(message, await self._marks.read())
        if answer is not None:
            return Response(answer, media_type="application/json")
        if isinstance(message, ToolCallRequest) and session:
            line = await self._call(request, principal, message, session)
            return Response(line, media_type="application/json")
        reply = await self._lanes.route(message).run_settled(
            _handle_one, self._bindings, principal, message, session, limit
        )
        return Response(reply.lines()[0], media_type="application/json")

    async def _call(
        self, request: Request, principal: Principal, message: ToolCallRequest, session: str
    ) -> str:
        """A tool call's answer, the call run whole on one of the engine's threads
        (`calling`); the client leaving cancels it."""
        cancellation = Cancellation()
        watch = asyncio.get_running_loop().create_task(_left(request.receive, cancellation))
        vault = self._bindings.vault
        engine = vault.call_engine
        args = (self._bindings, principal, message, session, cancellation)
        try:
            return await answer_call(
                engine,
                self._lanes.calling,
                partial(_call_one, *args),
                cancellation,
                engine.limits.deadline_of(message.toolkit_name),
                partial(_end_one, *args),
                vault.store.expect_call(),
                partial(record_failed, message),
            )
        finally:
            watch.cancel()


async def _left(receive: Receive, cancellation: Cancellation) -> None:
    """Cancel the call once the client has left (its body is in: the next message the
    server gives is the disconnect)."""
    with contextlib.suppress(OSError, RuntimeError):
        while (await receive())["type"] != "http.disconnect":
            pass
        cancellation.cancel()


def _call_one(
    bindings: SessionBindings,
    principal: Principal,
    request: ToolCallRequest,
    session_id: str,
    cancellation: Cancellation,
) -> str:
    """(On one of the engine's threads.) A tool call on the session's bound connection."""
    try:
        connection = bindings.connection(principal, session_id)
    except VaultError as exc:
        error = ErrorMessage(req_id=request.id, code="RUNTIME_ERROR", message=exc.message)
        return dump_message(error)
    return connection.call_here(request, cancellation)


def _end_one(
    bindings: SessionBindings,
    principal: Principal,
    request: ToolCallRequest,
    session_id: str,
    cancellation: Cancellation,
    refusal: CallRefused,
    started: float,
) -> str:
    """A tool call its waiter ended (`timeout`, `cancelled`), recorded and answered."""
    try:
        connection = bindings.connection(principal, session_id)
    except VaultError as exc:
        error = ErrorMessage(req_id=request.id, code="RUNTIME_ERROR", message=exc.message)
        return dump_message(error)
    return connection.end_call(request, cancellation, session_id, refusal, started)


def _handle_one(
    bindings: SessionBindings,
    principal: Principal,
    raw: bytes | Message,
    session_id: str | None,
    max_bytes: int,
) -> Reply:
    """One HTTP A2E message (raw, or as `read_request` read it): a handshake binds a new
    connection, anything else uses the session's bound connection (bound here on its first
    use in this process), and its write may be left committing (`A2EConnection.start`)."""
    request = read_request(raw, max_bytes) if isinstance(raw, bytes) else raw
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
        error = ErrorMessage(req_id=request.id, code="RUNTIME_ERROR", message=exc.message)
        return Reply.of(request, error)
    if isinstance(request, ToolCallRequest):  # a call named no session (`_call` has it)
        return connection.call(request, Cancellation())
    return connection.start(request, events=False)
