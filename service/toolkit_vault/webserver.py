"""The ASGI server `serve` runs: uvicorn with the vault's settings and a header-read deadline.

uvicorn bounds the idle time between two requests of a keep-alive connection, but not the
time a client takes to send a request's head: a client that opens a connection and sends
its headers a byte at a time (or nothing at all) holds it for as long as it likes, and a few
hundred such clients hold every file descriptor. `header_deadline` closes a connection whose
request line and headers are not complete `header_timeout` seconds after it opened, or
after the first byte of a later request on it arrived. Once the head is in, the deadline is
off (the body is read by the app, within its size limit; an upgraded WebSocket is kept
alive by uvicorn's pings).

The benchmarks' no-op endpoint runs through `run` too, so both are served the same way.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

__all__ = ["HEADER_TIMEOUT_S", "header_deadline", "run"]

HEADER_TIMEOUT_S = 10.0
_GC_THRESHOLDS = (20_000, 20, 20)


def _settle_the_heap() -> None:
    """Tune the cycle collector for a long-lived server. What start-up built (modules, the
    app, the registry) is frozen, out of every later collection's walk, and the youngest
    generation is collected every 20,000 allocations, not 700: a request allocates
    thousands of objects, and collecting each few hundred, then walking the survivors again
    and again, cost a configure about 3% of its CPU, and its p99 at 16 connections 45 ms
    instead of 80 (paired runs, `benchmarks.ab`). Reference counting frees all but cycles."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)


def header_deadline(timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with a deadline on each request's head (uvicorn is
    imported here, not with this module: the CLI's other commands start without it)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeaderDeadline(HttpToolsProtocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(timeout, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline


def run(
    app: Any,
    host: str,
    port: int,
    *,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    ws_max_size: int = 4 * 1024 * 1024,
    header_timeout: float = HEADER_TIMEOUT_S,
) -> None:
    """Serve `app` until interrupted; logging stays with the caller's configuration."""
    import uvicorn

    _settle_the_heap()
    uvicorn.run(
        app,
        host=host,
        port=port,
        http=header_deadline(header_timeout),
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        ws_max_size=ws_max_size,
        log_config=None,
        access_log=False,
        server_header=False,
    )
