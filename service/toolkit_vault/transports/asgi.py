"""The request log as pure ASGI middleware: a request id per request, one log line per answer.

Starlette's `BaseHTTPMiddleware` (what `@app.middleware("http")` builds) runs the rest of
the app in a task of its own and streams the response through a memory channel: on this
service's small answers it cost more than the route. This wraps `send` instead: it adds
`X-Request-ID` to the response head and logs method, path, status, duration and principal
once the answer is sent (or the app failed: then as a 500). Never a body, never a header.
"""

from __future__ import annotations

import logging
import random
import re
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkit_vault.logs import REQUEST_ID, log_request
from toolkit_vault.telemetry import traces

__all__ = ["RequestLog"]

log = logging.getLogger("toolkit_vault.transports.http_api")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class RequestLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"x-request-id"), b"")
        text = given.decode("latin-1")
        fresh = f"{random.getrandbits(64):016x}"  # unique enough, and no secret: no urandom
        request_id = text if _REQUEST_ID.fullmatch(text) else fresh
        token = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", ()), (b"x-request-id", request_id.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            if traces.tracing():  # the caller's trace continued, if it sent a traceparent
                carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
                with (
                    traces.continued(carrier),
                    traces.span(
                        "request", transport="http", http__request__method=scope["method"]
                    ) as span,
                ):
                    await self.app(scope, receive, send_with_id)
                    span.set(http__response__status_code=status)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            state: dict[str, Any] = scope.get("state") or {}
            log_request(
                log,
                {
                    "method": scope["method"],
                    "path": scope["path"],
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    "principal": state.get("principal"),
                },
            )
            REQUEST_ID.reset(token)
