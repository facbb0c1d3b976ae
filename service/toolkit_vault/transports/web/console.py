"""The console's pages: sign in with a bearer token, then what the role may see and do.

Operators: toolkits, sessions and their configured state, key status, tokens (revoke).
Auditors (and operators, as in the admin API): config history with fingerprints, and an
audit chain verification. Agents cannot sign in. Each route calls the service API (the
functions the CLI and the admin API call), in a worker thread; no page shows a secret.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse

from toolkit_vault.access.principals import authenticate, list_principals, revoke
from toolkit_vault.audit.history import history
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.admin import key_status
from toolkit_vault.store.overview import session_overview
from toolkit_vault.toolkits.registry import RegisteredToolkit
from toolkit_vault.transports.web.forms import leaves
from toolkit_vault.transports.web.pages import WebState
from toolkit_vault.transports.web.security import SESSION_COOKIE, BadForm, ConsoleUser, read_form

__all__ = ["console_routes"]

CONSOLE_ROLES = ("operator", "auditor")
HOME = {"operator": "sessions", "auditor": "history"}
MAX_FILTER = 200


class Console:
    """The console's pages over one `WebState`; `console_routes` mounts them."""

    def __init__(self, state: WebState) -> None:
        self.state = state

    async def signed_in(self, request: Request, *roles: str) -> ConsoleUser | Response:
        """The signed-in person if their token still holds and their role may see this."""
        sid = request.cookies.get(SESSION_COOKIE)
        user = self.state.sessions.find(sid)
        if user is None:
            return RedirectResponse("/console/", status_code=303)
        token = user.token.reveal().decode()
        principal = await run_in_threadpool(authenticate, self.state.vault.store, token)
        if principal != user.principal:
            self.state.sessions.end(sid)  # revoked since
            return self.state.signed_out("/console/")
        if user.principal.role not in roles:
            return self.state.message(
                request, 403, "Not for your role", "This page is not open to your role.", user
            )
        return user

    def _secret_pointers(self, toolkit: RegisteredToolkit) -> list[str]:
        return [f.pointer for f in leaves(self.state.fields(toolkit)) if f.secret]

    async def posted(self, request: Request) -> dict[str, str] | Response:
        """The form of a POST, if it came from a console page (CSRF token and origin)."""
        try:
            form = await read_form(request)
        except BadForm as exc:
            return self.state.message(request, 400, "Bad request", str(exc))
        if not self.state.form_allowed(request, form):
            return self.state.message(
                request,
                403,
                "Form refused",
                "This form did not come from this console (its CSRF token is missing or "
                "wrong). Reload the page and try again.",
            )
        return form

    async def home(self, request: Request) -> Response:
        user = self.state.sessions.find(request.cookies.get(SESSION_COOKIE))
        if user is not None:
            return RedirectResponse(f"/console/{HOME[user.principal.role]}", status_code=303)
        return self.state.render(request, "signin.html", error=None)

    async def signin(self, request: Request) -> Response:
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        token = form.get("token", "").strip()
        principal = await run_in_threadpool(authenticate, self.state.vault.store, token)
        if principal is None:
            error = "This token is not valid: unknown, malformed or revoked."
            return self.state.render(request, "signin.html", 401, error=error)
        if principal.role not in CONSOLE_ROLES:
            error = f"A token of the {principal.role} role cannot sign in to the console."
            return self.state.render(request, "signin.html", 403, error=error)
        everyone = await run_in_threadpool(list_principals, self.state.vault.store)
        name = next(p.name for p in everyone if p.principal_id == principal.principal_id)
        sid = self.state.sessions.start(principal, name, token)
        user = self.state.sessions.find(sid)
        assert user is not None
        return self.state.signed_in(user, sid, f"/console/{HOME[principal.role]}")

    async def signout(self, request: Request) -> Response:
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        self.state.sessions.end(request.cookies.get(SESSION_COOKIE))
        return self.state.signed_out("/console/")

    async def toolkits(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        listed = [(t, self._secret_pointers(t)) for t in self.state.vault.registry.all()]
        return self.state.render(request, "toolkits.html", user=user, toolkits=listed)

    async def sessions(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        rows = await run_in_threadpool(session_overview, self.state.vault.store)
        return self.state.render(request, "sessions.html", user=user, sessions=rows)

    async def keys(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        status = await run_in_threadpool(key_status, self.state.vault.store, self.state.provider)
        return self.state.render(request, "keys.html", user=user, **status)

    async def tokens(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        everyone = await run_in_threadpool(list_principals, self.state.vault.store)
        return self.state.render(request, "tokens.html", user=user, principals=everyone)

    async def revoke_token(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        actor = user.principal.principal_id
        try:
            await run_in_threadpool(
                lambda: revoke(self.state.vault.store, form.get("principal_id", ""), actor=actor)
            )
        except VaultError as exc:
            return self.state.message(request, 404, "Not revoked", exc.message, user)
        return RedirectResponse("/console/tokens", status_code=303)

    async def history_page(self, request: Request) -> Response:
        user = await self.signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        session = request.query_params.get("session", "")[:MAX_FILTER] or None
        toolkit = request.query_params.get("toolkit", "")[:MAX_FILTER] or None
        versions = await run_in_threadpool(history, self.state.vault.store, session, toolkit)
        return self.state.render(
            request,
            "history.html",
            user=user,
            versions=versions[::-1],
            session=session or "",
            toolkit=toolkit or "",
        )

    async def audit_page(self, request: Request) -> Response:
        user = await self.signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        return self.state.render(request, "audit.html", user=user, report=None)

    async def audit_verify(self, request: Request) -> Response:
        user = await self.signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        report = await run_in_threadpool(self.state.vault.verify_audit)
        return self.state.render(request, "audit.html", user=user, report=report.as_json())


def console_routes(state: WebState) -> APIRouter:
    console, router = Console(state), APIRouter()
    router.add_api_route("/", console.home, methods=["GET"])
    router.add_api_route("/signin", console.signin, methods=["POST"])
    router.add_api_route("/signout", console.signout, methods=["POST"])
    router.add_api_route("/toolkits", console.toolkits, methods=["GET"])
    router.add_api_route("/sessions", console.sessions, methods=["GET"])
    router.add_api_route("/keys", console.keys, methods=["GET"])
    router.add_api_route("/tokens", console.tokens, methods=["GET"])
    router.add_api_route("/tokens/revoke", console.revoke_token, methods=["POST"])
    router.add_api_route("/history", console.history_page, methods=["GET"])
    router.add_api_route("/audit", console.audit_page, methods=["GET"])
    router.add_api_route("/audit/verify", console.audit_verify, methods=["POST"])
    return router
