"""The web side: the console for operators and auditors, and intake forms for people.

Server-rendered HTML (Jinja2 templates beside this package), no script at all, a strict
Content-Security-Policy. Every route calls the service API, never the store directly.
`install_console(app, vault, provider)` mounts it under `/console` and lets intake links
name the origin the agent reached this server on (or `public_url`, when given).
"""

from __future__ import annotations

import contextvars
import os
import re
from typing import Any

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..crypto import SecretBytes
from ..intake import DEFAULT_TTL, Intake
from ..providers import KeyProvider
from ..service import Vault
from .console import console_routes
from .intake_pages import intake_routes
from .pages import STATIC, WebState
from .security import Csrf, SecurityHeaders

__all__ = ["MOUNT", "RememberOrigin", "create_console", "install_console"]

MOUNT = "/console"
_ORIGIN: contextvars.ContextVar[str] = contextvars.ContextVar("tkv_request_origin", default="")
_HOST = re.compile(r"[A-Za-z0-9.\-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?")
_SCHEMES = {"http": "http", "ws": "http", "https": "https", "wss": "https"}


def _origin(scope: Scope) -> str:
    """scheme://host[:port] the client used (a Host header that is not one: the socket's)."""
    scheme = _SCHEMES.get(scope.get("scheme", "http"), "http")
    host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
    if not _HOST.fullmatch(host):
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scheme}://{host}"


class RememberOrigin:
    """ASGI middleware: the request's origin, for intake links made while it runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        token = _ORIGIN.set(_origin(scope))
        try:
            await self.app(scope, receive, send)
        finally:
            _ORIGIN.reset(token)


def create_console(
    vault: Vault,
    provider: KeyProvider,
    *,
    intake_key: SecretBytes | None = None,
    public_url: str | None = None,
    intake_ttl: float = DEFAULT_TTL,
    secure_cookies: bool = True,
) -> FastAPI:
    """The console app (mount it at `MOUNT`); installs the vault's intake service.

    `serve` passes the vault's intake key (a subkey of its state key), so a link works on
    every replica and across restarts; without one a random key is drawn, and links then
    live as long as this process and work on it alone.
    """

    def url_for(link: str) -> str:
        base = (public_url or _ORIGIN.get()).rstrip("/")
        return f"{base}{MOUNT}/intake?link={link}"

    key = intake_key or SecretBytes(os.urandom(32))
    intake = Intake(vault, key, url_for, ttl=intake_ttl)
    state = WebState(vault, provider, intake, Csrf(os.urandom(32)), secure_cookies)
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(SecurityHeaders)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(console_routes(state))
    app.include_router(intake_routes(state))
    vault.intake = intake
    return app


def install_console(app: FastAPI, vault: Vault, provider: KeyProvider, **options: Any) -> None:
    """Mount the console under `/console` of the A2E app, and remember request origins."""
    app.mount(MOUNT, create_console(vault, provider, **options))
    app.add_middleware(RememberOrigin)
