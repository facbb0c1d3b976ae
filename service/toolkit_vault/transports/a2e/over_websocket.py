"""A2E over a WebSocket at `/a2e`: the token is checked at the upgrade and again before
every message (`Gate`, so a revoked token stops within a second), each principal may hold
`Limits.connections_per_principal` sockets, and a token with an expiry has its socket
closed when it passes, even while its client is silent. A plain ASGI app, served before
FastAPI's stack, which would wrap every message sent (`http_api._VaultApp`).

A tool call runs beside the socket's other messages (a task of its own, the call run whole
on one of the engine's threads: `calling`), so that a `tool/cancel/req` can reach it; its
answer goes out when it is ready, after the token is checked again as before a push (the
call may outlive a revocation). The socket closing cancels its calls."""

from __future__ import annotations

import asyncio
import time
from functools import partial

from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from toolkit_vault.access.principals import Principal, expiry_message
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import ANSWERED_WITHOUT_BLOCKING, Mark, Vault
from toolkit_vault.protocol import ErrorMessage, Message, ToolCallRequest, dump_message
from toolkit_vault.telemetry import metrics, traces
from toolkit_vault.tools.calls import Cancellation
from toolkit_vault.transports.a2e.calling import answer_call as answer_on_loop
from toolkit_vault.transports.a2e.calling import record_failed
from toolkit_vault.transports.a2e.lanes import Lanes
from toolkit_vault.transports.a2e.outbox import REVOKED, Outbox
from toolkit_vault.transports.http_access import SharedMarks
from toolkit_vault.transports.http_guards import Gate, Limits, bearer_token
from toolkit_vault.transports.observed import kind, outcome
from toolkit_vault.transports.refusals import Refused, error_body

__all__ = ["A2ESocket"]


class A2ESocket:
    """The ASGI app of the `/a2e` WebSocket: accepts, admits the agent (or sends the
    refusal's A2E `error` and closes: 1008 for the token, 1013 for too many sockets), then
    serves its messages until the client leaves."""

    def __init__(
        self, vault: Vault, gate: Gate, marks: SharedMarks[Mark], lanes: Lanes, limits: Limits
    ) -> None:
        self._vault, self._gate, self._marks = vault, gate, marks
        self._lanes, self._limits = lanes, limits
        self._open: dict[str, int] = {}  # sockets open, by principal id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)
        await websocket.accept()
        token = bearer_token(websocket.headers.get("authorization", "")) or ""
        try:
            principal = await self._gate.principal_for(token)
            if principal.role != "agent":
                raise Refused(403, "UNAUTHORIZED", "A2E needs the agent role")
        except Refused as exc:
            await websocket.send_json(error_body(exc.code, exc.message))
            await websocket.close(code=1008, reason=exc.message)
            return
        most = self._limits.connections_per_principal
        count = self._open.get(principal.principal_id, 0)
        if count >= most:
            message = f"at most {most} connections per principal"
            await websocket.send_json(error_body("RUNTIME_ERROR", message))
            await websocket.close(code=1013, reason=message)
            return
        self._open[principal.principal_id] = count + 1
        try:
            await self._serve(receive, send, principal, token)
        finally:
            self._open[principal.principal_id] -= 1
            if not self._open[principal.principal_id]:
                del self._open[principal.principal_id]

    async def _serve(self, receive: Receive, send: Send, principal: Principal, token: str) -> None:
        """Serve one accepted WebSocket, on its ASGI `receive` and `send` (Starlette's
        `WebSocket` adds two calls a message and nothing this loop needs); every message
        first re-checks its token (believed from the cache, else checked on the store; a
        revoked one gets an `UNAUTHORIZED` error and close code 1008) and the principal's
        rate. Answers and push events leave in order through its `Outbox`, which checks the
        token again before each push, so a revoked token hears nothing more even while its
        client is silent. A token with an expiry has the socket closed when it passes
        (`_close_at`)."""
        loop = asyncio.get_running_loop()
        gate, lanes, marks, limit = self._gate, self._lanes, self._marks, self._limits.message_bytes
        believed = gate.access.believes(token, principal)

        async def still_valid() -> bool:
            return believed() or await _still_valid(gate, token, principal)

        outbox = Outbox(send, still_valid, partial(_refusal, principal))
        expiry = principal.expires_at
        closer = None if expiry is None else loop.create_task(_close_at(expiry, outbox))

        def push(event: Message) -> None:  # called from worker threads
            loop.call_soon_threadsafe(outbox.put_nowait, dump_message(event))

        connection = connect(self._vault, principal, push)
        calls: set[asyncio.Task[None]] = set()

        engine = self._vault.call_engine

        async def answer_call(request: ToolCallRequest, cancellation: Cancellation) -> None:
            seconds = engine.limits.deadline_of(request.toolkit_name)
            end = partial(connection.end_call, request, cancellation, connection.session_id)
            call = partial(connection.call_here, request, cancellation)
            expected = self._vault.store.expect_call()  # its record shares a commit
            failed = partial(record_failed, request)
            line = await answer_on_loop(
                engine, lanes.calling, call, cancellation, seconds, end, expected, failed
            )
            if not await still_valid():
                await outbox.refuse()
                return
            await outbox.put(line)

        try:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    break  # websocket.disconnect
                text = message.get("text")
                raw = text if text is not None else message.get("bytes", b"")
                if not await still_valid():
                    await outbox.refuse()
                    break
                if not gate.rate.allow(principal.principal_id):
                    metrics.observe_rate_limited("websocket")
                    error = ErrorMessage(
                        req_id="", code="RUNTIME_ERROR", message="rate limit exceeded; slow down"
                    )
                    await outbox.put(dump_message(error))
                    continue
                started = time.perf_counter()
                request = await lanes.read(raw, limit)
                if isinstance(request, ToolCallRequest):
                    cancellation = connection.expect_call(request)  # before a cancel is read
                    task = loop.create_task(answer_call(request, cancellation))
                    calls.add(task)
                    task.add_done_callback(calls.discard)
                    continue
                answer = None
                with traces.span("request", transport="websocket", message__type=kind(request)):
                    if isinstance(request, ANSWERED_WITHOUT_BLOCKING):
                        answer = connection.answer_without_blocking(request, await marks.read())
                    if answer is None:
                        reply = await lanes.route(request).run_settled(connection.start, request)
                        lines = reply.lines()
                    else:
                        lines = [answer]
                elapsed = time.perf_counter() - started
                metrics.observe_request("websocket", kind(request), outcome(lines[0]), elapsed)
                for line in lines:
                    await outbox.put(line)
        finally:
            if closer is not None:
                closer.cancel()
            await lanes.a2e.run(connection.close)  # cancels the calls in flight
            for task in list(calls):
                task.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
            await outbox.drained()


async def _still_valid(gate: Gate, token: str, principal: Principal) -> bool:
    """The token, checked on the store, still names `principal`."""
    try:
        return bool(await gate.principal_for(token) == principal)
    except Refused:
        return False


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
