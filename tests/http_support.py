"""A plain HTTP server on loopback for the tests that need an upstream API to call (a
credential check, an expiry it tells): a handler class in, its base URL out."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["QuietHandler", "loopback_http", "loopback_wsgi"]


_SHUTDOWN_POLL_S = 0.05  # `serve_forever`'s poll: `shutdown` waits for the next (0.5 s by default)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that writes no access log to the test's stderr."""

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def loopback_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1 (a free port, a thread per request) while inside."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(_SHUTDOWN_POLL_S,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def loopback_wsgi(app: Any) -> Iterator[str]:
    """Serve a WSGI `app` (werkzeug's threaded server: the authorization server, the OpenID
    provider, a resource server) on 127.0.0.1 while inside: its base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(_SHUTDOWN_POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=5)
