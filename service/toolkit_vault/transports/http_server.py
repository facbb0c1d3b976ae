"""The ASGI server `serve` runs: uvicorn with the vault's settings and request deadlines.

uvicorn bounds the idle time between two requests of a keep-alive connection, but not the
time a client takes to send a request: a client that sends its headers or its body a byte
at a time (or nothing at all) holds the connection for as long as it likes, and a few
hundred such clients hold every file descriptor. `request_deadlines` bounds both parts of
each request:

- the head (request line and headers) must be complete `header_timeout` seconds after the
  connection opened, or after the first byte of a later request on it arrived, else the
  connection is closed;
- the body must be complete `body_timeout` seconds after the head, else the client gets a
  408 (an A2E error body, unless the app has already answered) and the connection is closed;
- each client address may have at most `slow_per_ip` connections receiving a request (from
  opening, or from a later request's first byte, until its body is in); a connection that
  opens beyond that is closed at once, so one address cannot hold every descriptor even
  within the deadlines. Connections between requests (kept alive, bounded by uvicorn's
  keep-alive timeout) and upgraded WebSockets (kept alive by uvicorn's pings) do not count.

One timer per request does it: armed when the request starts, moved to the body's deadline
only when the head came in late enough that the first expiry falls before it, cancelled
when the body is in. X-Forwarded-* headers are ignored (`proxy_headers=False`): no request
header chooses the scheme or the client address the app sees.

The benchmarks' no-op endpoint runs through `run` too, so both are served the same way.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

__all__ = [
    "BODY_TIMEOUT_S",
    "HEADER_TIMEOUT_S",
    "SLOW_CONNECTIONS_PER_IP",
    "request_deadlines",
    "run",
]

HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 10.0
SLOW_CONNECTIONS_PER_IP = 32
_GC_THRESHOLDS = (20_000, 20, 20)


def _settle_the_heap() -> None:
    """Tune the cycle collector for a long-lived server. What start-up built (modules, the
    app, the registry) is frozen, out of every later collection's walk, and the youngest
    generation is collected every 20,000 allocations, not 700: a request allocates
    thousands of objects, and collecting each few hundred, then walking the survivors again
    and again, cost a configure CPU and raised its tail latency (paired runs,
    `benchmarks.ab`; BENCHMARKS.md). Reference counting frees all but cycles."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)


def _timeout_answer(body_timeout: float, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The 408 for a body that did not arrive in time: an A2E error, and the connection closes."""
    from toolkit_vault.protocol import ErrorMessage, dump_message

    message = f"the request body did not arrive within {body_timeout:g} seconds"
    error = ErrorMessage(
        req_id="",
        code="INVALID_MESSAGE",
        message=message,
        details=[{"limit": "body_timeout", "max": body_timeout}],
    )
    body = dump_message(error).encode()
    head = [b"HTTP/1.1 408 Request Timeout\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head += [
        b"content-type: application/json\r\n",
        b"content-length: " + str(len(body)).encode() + b"\r\n",
        b"connection: close\r\n\r\n",
    ]
    return b"".join(head) + body


def request_deadlines(
    header_timeout: float = HEADER_TIMEOUT_S,
    body_timeout: float = BODY_TIMEOUT_S,
    slow_per_ip: int = SLOW_CONNECTIONS_PER_IP,
) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a deadline on each request's head and body and a
    cap on each address's connections still receiving one (uvicorn is imported here, not
    with this module: the CLI's other commands start without it)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    receiving: dict[str, int] = {}  # client address -> its connections receiving a request

    class RequestDeadlines(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None
        _body_due = 0.0  # loop time the body must be in by; 0 while the head is read
        _counted: str | None = None  # the client address while this connection counts

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if self.client is not None and receiving.get(self.client[0], 0) >= slow_per_ip:
                transport.close()  # one address holds enough connections that send nothing
                return
            self._begin()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:  # a later request on a kept-alive connection
                self._begin()

        def on_headers_complete(self) -> None:
            self._await_body()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._end()
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            self._end()  # from here the WebSocket protocol owns the connection
            super().handle_websocket_upgrade()

        def connection_lost(self, exc: Exception | None) -> None:
            self._end()
            super().connection_lost(exc)

        def _begin(self) -> None:
            self._body_due = 0.0
            self._deadline = self.loop.call_later(header_timeout, self._expire)
            if self.client is not None:
                address = self._counted = self.client[0]
                receiving[address] = receiving.get(address, 0) + 1

        def _await_body(self) -> None:
            """The head is in: the body has `body_timeout` from now. The timer armed for the
            head stays unless it would fire after the body's deadline (a head that took
            longer than `header_timeout - body_timeout`)."""
            self._body_due = due = self.loop.time() + body_timeout
            if self._deadline is not None and due < self._deadline.when():
                self._deadline.cancel()
                self._deadline = self.loop.call_at(due, self._expire)

        def _end(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            address, self._counted = self._counted, None
            if address is not None:
                left = receiving[address] - 1
                if left:
                    receiving[address] = left
                else:
                    del receiving[address]

        def _expire(self) -> None:
            self._deadline = None
            if self._body_due:
                late = self._body_due - self.loop.time()
                if late > 0:  # the head came in: the body's own deadline is later
                    self._deadline = self.loop.call_later(late, self._expire)
                    return
                self._answer_timeout()
            if not self.transport.is_closing():
                self.transport.close()

        def _answer_timeout(self) -> None:
            """408, unless the app has begun its answer (it may answer before reading the
            body, as a refusal does) or a pipelined one is still waiting for its turn. The
            app then hears that the client left, and whatever it sends goes nowhere."""
            cycle = self.cycle
            if cycle is None or cycle.response_started or self.pipeline:
                return
            cycle.disconnected = True
            cycle.message_event.set()
            if not self.transport.is_closing():
                default_headers = self.server_state.default_headers
                self.transport.write(_timeout_answer(body_timeout, default_headers))

    return RequestDeadlines


def run(
    app: Any,
    host: str,
    port: int,
    *,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    ws_max_size: int = 4 * 1024 * 1024,
    header_timeout: float = HEADER_TIMEOUT_S,
    body_timeout: float = BODY_TIMEOUT_S,
    slow_connections_per_ip: int = SLOW_CONNECTIONS_PER_IP,
) -> None:
    """Serve `app` until interrupted; logging stays with the caller's configuration."""
    import uvicorn

    _settle_the_heap()
    uvicorn.run(
        app,
        host=host,
        port=port,
        http=request_deadlines(header_timeout, body_timeout, slow_connections_per_ip),
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        ws_max_size=ws_max_size,
        proxy_headers=False,
        log_config=None,
        access_log=False,
        server_header=False,
    )
