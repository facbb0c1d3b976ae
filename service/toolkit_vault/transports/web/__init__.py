"""The web side: the console for operators and auditors, and intake forms for people.

Server-rendered HTML (Jinja2 templates beside this package), no script at all, a strict
Content-Security-Policy. Every route calls the service API, never the store directly.
`install_console(app, vault, provider)` mounts it under `/console`. An intake link names
`public_url` (`serve --public-url`, else the address `serve` was told to bind) or, without
one, the local address and scheme of the socket the request came in on: never a request
header, so a client sending `Host: evil.example` cannot send a person's secret there.
"""

from __future__ import annotations

import contextvars
import os
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.requests import ClientDisconnect
from starlette.responses import RedirectResponse
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from toolkit_vault.core.intake import DEFAULT_TTL, Intake
from toolkit_vault.core.oauth_connect import OAuthConnections
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.keys.providers import KeyProvider
from toolkit_vault.oauth.openid import RelyingParty
from toolkit_vault.settings import OidcSettings
from toolkit_vault.transports.web.allowance_pages import console_allowance_routes
from toolkit_vault.transports.web.check_pages import console_check_routes
from toolkit_vault.transports.web.console import console_routes
from toolkit_vault.transports.web.figures_page import console_figures_routes
from toolkit_vault.transports.web.intake_pages import intake_routes
from toolkit_vault.transports.web.mcp_pages import console_mcp_routes
from toolkit_vault.transports.web.oauth_pages import oauth_routes
from toolkit_vault.transports.web.oidc_pages import oidc_routes
from toolkit_vault.transports.web.pages import STATIC, McpSessionsShown, WebState
from toolkit_vault.transports.web.security import Csrf, SecurityHeaders
from toolkit_vault.transports.web.template_pages import console_template_routes
from toolkit_vault.transports.web.toolkit_pages import console_toolkit_routes

__all__ = ["MOUNT", "RememberOrigin", "client_left", "create_console", "install_console"]

MOUNT = "/console"
_REQUEST: contextvars.ContextVar[Scope | None] = contextvars.ContextVar(
    "tkv_request_scope", default=None
)
_SCHEMES = {"http": "http", "ws": "http", "https": "https", "wss": "https"}


def _origin(scope: Scope | None) -> str:
    """scheme://host:port of the socket `scope` came in on, as the server sees it (its local
    address and whether it speaks TLS); no header is read."""
    scope = scope or {}
    scheme = _SCHEMES.get(scope.get("scheme", "http"), "http")
    host, port = scope.get("server") or ("localhost", None)
    if ":" in host:
        host = f"[{host}]"
    default = port is None or (scheme, port) in (("http", 80), ("https", 443))
    return f"{scheme}://{host}" + ("" if default else f":{port}")


class RememberOrigin:
    """ASGI middleware: the request's scope, for intake links made while it runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _REQUEST.set(scope)
        try:
            await self.app(scope, receive, send)
        finally:
            _REQUEST.reset(token)


async def client_left(_request: Request, _exc: Exception) -> Response:
    """A client that left before its body was in (or was cut off by the body deadline,
    `http_server`): nothing to answer (uvicorn drops it), logged as 408, no traceback."""
    return Response(status_code=408)


def create_console(
    vault: Vault,
    provider: KeyProvider,
    *,
    intake_key: SecretBytes | None = None,
    public_url: str | None = None,
    intake_ttl: float = DEFAULT_TTL,
    secure_cookies: bool = True,
    oidc: OidcSettings | None = None,
    mcp: McpSessionsShown | None = None,
) -> FastAPI:
    """The console app (mount it at `MOUNT`); installs the vault's intake service. With
    `oidc`, people may also sign in through that identity provider (`oidc_pages`).

    `serve` passes the vault's intake key (a subkey of its state key), so a link works on
    every replica and across restarts; without one a random key is drawn, and links then
    live as long as this process and work on it alone.
    """

    def url_for(link: str) -> str:
        base = (public_url or _origin(_REQUEST.get())).rstrip("/")
        return f"{base}{MOUNT}/intake?link={link}"

    key = intake_key or SecretBytes(os.urandom(32))
    intake = Intake(vault, key, url_for, ttl=intake_ttl)
    issuer = oidc.issuer if oidc else None
    state = WebState(vault, provider, intake, Csrf(os.urandom(32)), secure_cookies, issuer)
    state.mcp = mcp
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(SecurityHeaders)
    app.add_exception_handler(ClientDisconnect, client_left)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(console_routes(state))
    app.include_router(console_toolkit_routes(state))  # one toolkit, whole
    app.include_router(console_template_routes(state))
    app.include_router(console_allowance_routes(state))
    app.include_router(console_mcp_routes(state))
    app.include_router(console_check_routes(state))
    app.include_router(console_figures_routes(state))  # operators and auditors
    app.include_router(intake_routes(state))
    vault.intake = intake
    connections = OAuthConnections(vault, intake, key)  # the connect flow

    def callback_url() -> str:
        base = (public_url or _origin(_REQUEST.get())).rstrip("/")
        return f"{base}{MOUNT}/oauth/callback"

    app.include_router(oauth_routes(state, connections, callback_url))
    if oidc is not None:
        party = RelyingParty(oidc.issuer, oidc.client_id, oidc.client_secret, oidc.scopes)

        def signin_callback() -> str:
            return (public_url or _origin(_REQUEST.get())).rstrip("/") + f"{MOUNT}/oidc/callback"

        app.include_router(oidc_routes(state, party, oidc.session_lifetime, signin_callback))
    return app


async def _to_console() -> RedirectResponse:
    """`/` leads to the console (its sign-in page, or the signed-in person's home)."""
    return RedirectResponse(MOUNT + "/", status_code=307)


def install_console(app: FastAPI, vault: Vault, provider: KeyProvider, **options: Any) -> None:
    """Mount the console under `/console` of the A2E app, and remember request origins."""
    app.mount(MOUNT, create_console(vault, provider, **options))
    app.add_api_route("/", _to_console, methods=["GET"], include_in_schema=False)
    app.add_middleware(RememberOrigin)
