"""The OAuth connect flow's two pages: the intake form's Connect button posts to
`/oauth/start`, which sets the flow cookie and sends the person on to the authorization
server; the server sends them back to `/oauth/callback/TAG` under this server's own
origin, TAG naming that server (`oauth.redirect_uri`): an answer that arrives at another
server's callback (the bare `/oauth/callback` included) is refused, as one whose `iss`
names another issuer (RFC 9700 4.4, RFC 9207).

The start answer is a page that moves on by itself (`<meta http-equiv="refresh">`), not a
redirect: the console's Content-Security-Policy allows forms to post to this origin only
(`form-action 'self'`), which browsers apply to a form's redirects too. The flow cookie
is `SameSite=Lax` (the callback is a top-level navigation from another site), HttpOnly,
and lives under `/console/oauth` for the flow's ten minutes.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from toolkit_vault.core.intake import IntakeRefused
from toolkit_vault.core.oauth_connect import FLOW_TTL, AnswerRefused, OAuthConnections
from toolkit_vault.errors import ConfigInvalid, VaultError
from toolkit_vault.oauth import OAuthFailed
from toolkit_vault.transports.web.pages import WebState
from toolkit_vault.transports.web.security import BadForm, read_form

__all__ = ["FLOW_COOKIE", "oauth_routes"]

FLOW_COOKIE = "tkv_oauth_flow"
FLOW_PATH = "/console/oauth"
_STATUS = {"invalid": 404, "expired": 410, "used": 410, "changed": 409}


def oauth_routes(
    state: WebState, connections: OAuthConnections, callback_url: Callable[[], str]
) -> APIRouter:
    router = APIRouter()

    def refused(request: Request, exc: VaultError) -> Response:
        if isinstance(exc, IntakeRefused):
            text = exc.message[:1].upper() + exc.message[1:] + "."
            return state.message(request, _STATUS[exc.reason], "Cannot connect", text)
        if isinstance(exc, AnswerRefused):
            text = exc.message[:1].upper() + exc.message[1:] + "."
            return state.message(request, 400, "Not connected", text)
        if isinstance(exc, OAuthFailed):
            text = f"The authorization server did not connect this toolkit: {exc.message}."
            return state.message(request, 502, "Not connected", text)
        return state.message(request, 400, "Cannot connect", exc.message)

    @router.post("/oauth/start")
    async def start(request: Request) -> Response:
        try:
            form = await read_form(request)
        except BadForm as exc:
            return state.message(request, 400, "Bad request", str(exc))
        if not state.form_allowed(request, form):
            return state.message(
                request, 403, "Form refused", "This form did not come from this page."
            )
        try:
            url, cookie = await run_in_threadpool(
                connections.start,
                form.get("link", ""),
                callback_url(),
                form.get("client_secret") or None,  # a confidential client's, typed here
            )
        except VaultError as exc:
            return refused(request, exc)
        response = state.render(request, "oauth_start.html", url=url)
        response.set_cookie(
            FLOW_COOKIE,
            cookie,
            max_age=int(FLOW_TTL),
            path=FLOW_PATH,
            secure=state.secure_cookies,
            httponly=True,
            samesite="lax",
        )
        return response

    @router.get("/oauth/callback")
    @router.get("/oauth/callback/{server}")
    async def callback(request: Request, server: str = "") -> Response:
        params = request.query_params
        cookie = request.cookies.get(FLOW_COOKIE, "")
        if params.get("error"):
            text = "The authorization server did not grant access; nothing was stored."
            return state.message(request, 403, "Not connected", text)
        reached = callback_url() + (f"/{server}" if server else "")
        try:
            view, outcome = await run_in_threadpool(
                connections.finish,
                cookie,
                params.get("state", ""),
                params.get("code", ""),
                reached,
                params.get("iss"),  # RFC 9207; None when the server sent none
            )
        except (VaultError, ConfigInvalid) as exc:
            return refused(request, exc)
        response = state.render(
            request,
            "intake_done.html",
            toolkit=view.toolkit.definition,
            outcome=outcome,
            scope=view.claim.scope,
        )
        response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH, secure=state.secure_cookies)
        return response

    return router
