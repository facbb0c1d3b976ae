"""Console sign-in through the identity provider (OpenID Connect), two routes.

`POST /console/oidc/start` (the sign-in page's button, with its CSRF token) begins a sign-in:
a fresh `state`, `nonce` and PKCE verifier kept in this process's memory under a random id,
which goes to the browser in a flow cookie (`SameSite=Lax`, the callback being a top-level
navigation from the provider; HttpOnly; under `/console/oidc`; ten minutes), and a page that
moves on to the provider by itself (the console's `form-action 'self'` would stop a redirect).

`GET /console/oidc/callback` finishes it: the flow the cookie names is taken once (a second
use, another browser's callback, or a `state` that is not the flow's, is refused before any
code is exchanged: no one can sign a victim in as themselves), the code is exchanged with the
verifier, the `id_token` is checked (`oauth.openid`: signature, issuer, audience, expiry,
the flow's nonce), the mappings decide the role (`core.people`), and a console session
starts with a new id, living `session_lifetime` at most. Nothing of a code or a token is
shown or logged; a refusal says which check failed, in one word.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse

from toolkit_vault.core.people import NoConsoleRole, sign_in
from toolkit_vault.oauth import OAuthFailed
from toolkit_vault.oauth.openid import IdTokenRefused, RelyingParty
from toolkit_vault.transports.web.console import HOME
from toolkit_vault.transports.web.pages import WebState
from toolkit_vault.transports.web.security import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    BadForm,
    new_nonce,
    read_form,
)

__all__ = ["FLOW_COOKIE", "SignInFlows", "oidc_routes"]

FLOW_COOKIE = "tkv_oidc_flow"
FLOW_PATH = "/console/oidc"
FLOW_TTL = 600.0
MAX_FLOWS = 10_000


@dataclass(frozen=True)
class Flow:
    state: str
    nonce: str
    verifier: str
    started: float

    def __repr__(self) -> str:
        return "Flow(<hidden>)"


class SignInFlows:
    """Sign-ins under way, by the id in the browser's flow cookie; each is taken once."""

    def __init__(self, ttl: float = FLOW_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self._clock = ttl, clock
        self._flows: dict[str, Flow] = {}
        self._lock = threading.Lock()

    def begin(self) -> tuple[str, Flow]:
        now = self._clock()
        flow = Flow(secrets.token_urlsafe(32), new_nonce(), secrets.token_urlsafe(48), now)
        flow_id = secrets.token_urlsafe(32)
        with self._lock:
            for stale in [k for k, f in self._flows.items() if now - f.started > self.ttl]:
                del self._flows[stale]
            if len(self._flows) >= MAX_FLOWS:
                del self._flows[min(self._flows, key=lambda k: self._flows[k].started)]
            self._flows[flow_id] = flow
        return flow_id, flow

    def take(self, flow_id: str, state: str) -> Flow | None:
        """The flow, once: only with its own `state`, within its lifetime."""
        with self._lock:
            flow = self._flows.pop(flow_id, None)
        if flow is None or self._clock() - flow.started > self.ttl:
            return None
        if not hmac.compare_digest(flow.state.encode(), state.encode()):
            return None
        return flow


def oidc_routes(
    state: WebState,
    party: RelyingParty,
    session_lifetime: float,
    callback_url: Callable[[], str],
) -> APIRouter:
    router, flows = APIRouter(), SignInFlows()

    def moving_on(title: str, text: str, url: str) -> HTMLResponse:
        page = state.env.get_template("oidc_continue.html")
        return HTMLResponse(page.render(title=title, text=text, url=url))

    def refused(request: Request, status: int, text: str) -> Response:
        return state.message(request, status, "Not signed in", text)

    @router.post("/oidc/start")
    async def start(request: Request) -> Response:
        try:
            form = await read_form(request)
        except BadForm as exc:
            return state.message(request, 400, "Bad request", str(exc))
        if not state.form_allowed(request, form):
            return state.message(
                request, 403, "Form refused", "This form did not come from this page."
            )
        flow_id, flow = flows.begin()
        try:
            url = await run_in_threadpool(
                party.authorization_url, callback_url(), flow.state, flow.nonce, flow.verifier
            )
        except OAuthFailed as exc:
            return refused(request, 502, f"The identity provider cannot be used: {exc.message}.")
        text = "Taking you to your identity provider to sign in."
        response = moving_on("Signing in", text, url)
        response.set_cookie(
            FLOW_COOKIE,
            flow_id,
            max_age=int(FLOW_TTL),
            path=FLOW_PATH,
            secure=state.secure_cookies,
            httponly=True,
            samesite="lax",
        )
        return response

    @router.get("/oidc/callback")
    async def callback(request: Request) -> Response:
        params = request.query_params
        flow = flows.take(request.cookies.get(FLOW_COOKIE, ""), params.get("state", ""))
        if flow is None:
            text = (
                "This sign-in was not started in this browser, has expired, or was finished "
                "already. Start again from the sign-in page."
            )
            return refused(request, 400, text)
        if params.get("error") or not params.get("code"):
            return refused(request, 403, "The identity provider did not sign you in.")
        try:
            id_token = await run_in_threadpool(
                party.exchange, callback_url(), params.get("code", ""), flow.verifier
            )
            claims = await run_in_threadpool(party.verify, id_token, flow.nonce)
            person = await run_in_threadpool(sign_in, state.vault.store, party.issuer, claims)
        except IdTokenRefused as exc:
            text = f"The identity provider's answer was refused ({exc.reason}); nothing changed."
            return refused(request, 401, text)
        except NoConsoleRole as exc:
            return refused(request, 403, exc.message[:1].upper() + exc.message[1:] + ".")
        except OAuthFailed as exc:
            return refused(request, 502, f"The sign-in could not finish: {exc.message}.")
        sid = state.sessions.start(
            person.principal, person.name, None, person=person, lifetime=session_lifetime
        )
        home = f"/console/{HOME[person.role]}"
        response = moving_on("Signed in", f"Signed in as {person.name} ({person.role}).", home)
        response.set_cookie(SESSION_COOKIE, sid, **state.cookie())
        response.set_cookie(CSRF_COOKIE, new_nonce(), **state.cookie())
        response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH, secure=state.secure_cookies)
        return response

    return router
