"""What every route shares: the templates, the CSRF and session state, and `render`.

Templates are Jinja2, autoescaped, with undefined names an error rather than an empty
string. `render` hands each page the CSRF token for its forms and sets the browser's
nonce cookie when it has none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from toolkit_vault.audit.history import iso_time
from toolkit_vault.core.intake import Intake
from toolkit_vault.core.vault import Vault
from toolkit_vault.keys.providers import KeyProvider
from toolkit_vault.toolkits.registry import RegisteredToolkit
from toolkit_vault.transports.web.formdata import error_text
from toolkit_vault.transports.web.forms import Field, build_fields
from toolkit_vault.transports.web.security import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    ConsoleSessions,
    ConsoleUser,
    Csrf,
    cookie_options,
    is_nonce,
    new_nonce,
    same_origin,
)

__all__ = ["TEMPLATES", "WebState", "environment"]

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["iso_time"] = lambda epoch: "" if epoch is None else iso_time(float(epoch))
    env.filters["when"] = lambda epoch: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))
    env.globals["error_text"] = error_text
    return env


class McpSessionShown(Protocol):
    """What the console shows of one MCP session (`transports.mcp.sessions.McpSession`;
    the web side does not import the MCP transport, which imports the guards)."""

    key: str
    client: str
    last_call: float | None

    @property
    def principal_id(self) -> str: ...

    @property
    def a2e_session(self) -> str: ...


class McpSessionsShown(Protocol):
    def open_sessions(self) -> Sequence[McpSessionShown]: ...

    def end_by_operator(self, key: str, actor: str) -> bool: ...


@dataclass
class WebState:
    vault: Vault
    provider: KeyProvider
    intake: Intake
    csrf: Csrf
    secure_cookies: bool = True
    oidc: str | None = None  # the identity provider's issuer, when people sign in there
    sessions: ConsoleSessions = field(default_factory=ConsoleSessions)
    mcp: McpSessionsShown | None = None  # the MCP sessions of `/mcp` (`mcp_pages`), if served
    env: Environment = field(default_factory=environment)
    _fields: dict[str, tuple[Field, ...]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fields(self, toolkit: RegisteredToolkit) -> tuple[Field, ...]:
        """A toolkit's form fields, built once per schema digest."""
        digest = toolkit.schema.digest
        with self._lock:
            found = self._fields.get(digest)
        if found is None:
            # the definition's own schema: the compiled copy is canonical, keys sorted
            schema = toolkit.definition.config_schema
            found = build_fields(schema, toolkit.schema.is_secret_at)
            with self._lock:
                if len(self._fields) >= 256:
                    self._fields.clear()
                self._fields[digest] = found
        return found

    def render(
        self,
        request: Request,
        template: str,
        status: int = 200,
        user: ConsoleUser | None = None,
        **context: Any,
    ) -> HTMLResponse:
        nonce = request.cookies.get(CSRF_COOKIE)
        fresh = not is_nonce(nonce)
        if fresh:
            nonce = new_nonce()
        page = request.url.path.rstrip("/").rsplit("/", 1)[-1]
        html = self.env.get_template(template).render(
            csrf=self.csrf.token(nonce or "", request.cookies.get(SESSION_COOKIE)),
            user=user,
            page=page,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if fresh:
            response.set_cookie(CSRF_COOKIE, nonce or "", **self.cookie())
        return response

    def form_allowed(self, request: Request, form: dict[str, str]) -> bool:
        """A POST's form came from one of our pages: same origin, and its CSRF token."""
        nonce = request.cookies.get(CSRF_COOKIE)
        session = request.cookies.get(SESSION_COOKIE)
        return same_origin(request) and self.csrf.valid(nonce, session, form.get("csrf"))

    def message(
        self, request: Request, status: int, title: str, text: str, user: ConsoleUser | None = None
    ) -> HTMLResponse:
        return self.render(request, "message.html", status, user, title=title, text=text)

    def cookie(self) -> dict[str, Any]:
        return cookie_options(self.secure_cookies)

    def signed_in(self, user: ConsoleUser, sid: str, to: str) -> RedirectResponse:
        """Set the session cookie and a fresh CSRF nonce (none chosen before sign-in lives on)."""
        response = RedirectResponse(to, status_code=303)
        response.set_cookie(SESSION_COOKIE, sid, **self.cookie())
        response.set_cookie(CSRF_COOKIE, new_nonce(), **self.cookie())
        return response

    def signed_out(self, to: str) -> RedirectResponse:
        response = RedirectResponse(to, status_code=303)
        for name in (SESSION_COOKIE, CSRF_COOKIE):
            response.delete_cookie(name, **self.cookie())
        return response
