"""Console sessions, CSRF tokens, form bodies and the headers every page carries.

A person signs in with a bearer token once, or through the identity provider (`oidc_pages`);
the console then knows them by a random session id in a `Secure`, `HttpOnly`,
`SameSite=Strict` cookie, held in this process's memory only (a restart signs everyone out).
A token's session checks the token again on every request, so a revoked token ends its
console sessions at once; a person's session checks their role against the mappings of the
moment, and lives a shorter time (the next sign-in asks the provider again). Every form
that changes something carries a CSRF token: an HMAC of a random per-browser nonce (itself
in a cookie) and the session id, so a page elsewhere can neither read nor forge it; a POST
whose `Origin` is another site is refused too. Pages allow no script at all and no framing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.people import Person
from toolkit_vault.crypto import SecretBytes

__all__ = [
    "COOKIE_PATH",
    "CSRF_COOKIE",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "BadForm",
    "ConsoleSessions",
    "ConsoleUser",
    "Csrf",
    "SecurityHeaders",
    "cookie_options",
    "is_nonce",
    "new_nonce",
    "read_form",
    "same_origin",
]

SESSION_COOKIE = "tkv_console"
CSRF_COOKIE = "tkv_csrf"
COOKIE_PATH = "/console"
MAX_FORM_BYTES = 1024 * 1024
MAX_FORM_FIELDS = 5000
_NONCE = re.compile(r"[A-Za-z0-9_-]{43}")
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # an intake link never leaves in a Referer; "no-referrer" would also make form POSTs
    # say `Origin: null`, which the origin check must refuse
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
    "cross-origin-opener-policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware: every response of the console carries `SECURITY_HEADERS`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


def new_nonce() -> str:
    return secrets.token_urlsafe(32)


def is_nonce(value: str | None) -> bool:
    return value is not None and _NONCE.fullmatch(value) is not None


class Csrf:
    """CSRF token = HMAC(per-process key, the browser's nonce cookie and console session).

    Bound to the session too: a page on a sibling origin can plant a nonce cookie it
    knows (cookies do not keep ports apart), but never learn a person's session id.
    """

    def __init__(self, key: bytes) -> None:
        self._key = key

    def token(self, nonce: str, session: str | None) -> str:
        message = b"csrf\x00" + nonce.encode() + b"\x00" + (session or "").encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def valid(self, nonce: str | None, session: str | None, submitted: str | None) -> bool:
        if not is_nonce(nonce) or not submitted:
            return False
        return hmac.compare_digest(self.token(nonce or "", session), submitted)


def same_origin(request: Request) -> bool:
    """False when the browser says the form came from another origin (host and port)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not sent by this client; the CSRF token still has to match
    return urlsplit(origin).netloc == request.headers.get("host", "")


class BadForm(Exception):
    """A body that is not a form this console could have sent."""


async def read_form(request: Request) -> dict[str, str]:
    """A urlencoded form body, bounded in size and fields; a repeated name is refused."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        raise BadForm("expected a form")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise BadForm("the form is too large")
    try:
        pairs = parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise BadForm("the form could not be read") from None
    form = dict(pairs)
    if len(form) != len(pairs):
        raise BadForm("the form repeats a field")
    return form


@dataclass
class ConsoleUser:
    principal: Principal
    name: str
    token: SecretBytes | None  # checked again on every request: a revoked token ends it
    started: float
    seen: float
    lifetime: float  # seconds from `started`, whatever the activity
    person: Person | None = None  # signed in through the identity provider (no token)

    def __repr__(self) -> str:
        return f"ConsoleUser({self.principal.principal_id!r}, {self.principal.role!r})"


class ConsoleSessions:
    """Signed-in people by session id, in memory, with idle and absolute expiry."""

    def __init__(
        self,
        idle: float = 30 * 60,
        lifetime: float = 8 * 3600,
        limit: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle, self.lifetime, self.limit, self._clock = idle, lifetime, limit, clock
        self._sessions: dict[str, ConsoleUser] = {}
        self._lock = threading.Lock()

    def start(
        self,
        principal: Principal,
        name: str,
        token: str | None,
        *,
        person: Person | None = None,
        lifetime: float | None = None,
    ) -> str:
        """A new session; a person's (`person`, no token) lives `lifetime` seconds at most."""
        now = self._clock()
        kept = min(self.lifetime, lifetime or self.lifetime)
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._expire(now)
            if len(self._sessions) >= self.limit:
                oldest = min(self._sessions, key=lambda k: self._sessions[k].seen)
                del self._sessions[oldest]
            secret = SecretBytes(token.encode()) if token is not None else None
            self._sessions[sid] = ConsoleUser(principal, name, secret, now, now, kept, person)
        return sid

    def find(self, sid: str | None) -> ConsoleUser | None:
        if not is_nonce(sid):
            return None
        now = self._clock()
        with self._lock:
            user = self._sessions.get(sid or "")
            if user is None:
                return None
            if now - user.seen > self.idle or now - user.started > user.lifetime:
                del self._sessions[sid or ""]
                return None
            user.seen = now
            return user

    def end(self, sid: str | None) -> ConsoleUser | None:
        """End a session; the user it was, if any."""
        with self._lock:
            return self._sessions.pop(sid or "", None)

    def _expire(self, now: float) -> None:
        stale = [
            sid
            for sid, user in self._sessions.items()
            if now - user.seen > self.idle or now - user.started > user.lifetime
        ]
        for sid in stale:
            del self._sessions[sid]


def cookie_options(secure: bool = True) -> dict[str, Any]:
    return {"path": COOKIE_PATH, "secure": secure, "httponly": True, "samesite": "strict"}
