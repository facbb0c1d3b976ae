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
from toolkit_vault.transports.web.forms import Field, leaves
from toolkit_vault.transports.web.pages import WebState
from toolkit_vault.transports.web.security import SESSION_COOKIE, BadForm, ConsoleUser, read_form

__all__ = ["console_routes"]

CONSOLE_ROLES = ("operator", "auditor")
HOME = {"operator": "sessions", "auditor": "history"}
MAX_FILTER = 200


def console_routes(state: WebState) -> APIRouter:
    router = APIRouter()

    async def signed_in(request: Request, *roles: str) -> ConsoleUser | Response:
        """The signed-in person if their token still holds and their role may see this."""
        sid = request.cookies.get(SESSION_COOKIE)
        user = state.sessions.find(sid)
        if user is None:
            return RedirectResponse("/console/", status_code=303)
        token = user.token.reveal().decode()
        principal = await run_in_threadpool(authenticate, state.vault.store, token)
        if principal != user.principal:
            state.sessions.end(sid)  # revoked since
            return state.signed_out("/console/")
        if user.principal.role not in roles:
            return state.message(
                request, 403, "Not for your role", "This page is not open to your role.", user
            )
        return user

    async def posted(request: Request) -> dict[str, str] | Response:
        """The form of a POST, if it came from a console page (CSRF token and origin)."""
        try:
            form = await read_form(request)
        except BadForm as exc:
            return state.message(request, 400, "Bad request", str(exc))
        if not state.form_allowed(request, form):
            return state.message(
                request,
                403,
                "Form refused",
                "This form did not come from this console (its CSRF token is missing or "
                "wrong). Reload the page and try again.",
            )
        return form

    @router.get("/")
    async def home(request: Request) -> Response:
        user = state.sessions.find(request.cookies.get(SESSION_COOKIE))
        if user is not None:
            return RedirectResponse(f"/console/{HOME[user.principal.role]}", status_code=303)
        return state.render(request, "signin.html", error=None)

    @router.post("/signin")
    async def signin(request: Request) -> Response:
        form = await posted(request)
        if isinstance(form, Response):
            return form
        token = form.get("token", "").strip()
        principal = await run_in_threadpool(authenticate, state.vault.store, token)
        if principal is None:
            error = "This token is not valid: unknown, malformed or revoked."
            return state.render(request, "signin.html", 401, error=error)
        if principal.role not in CONSOLE_ROLES:
            error = f"A token of the {principal.role} role cannot sign in to the console."
            return state.render(request, "signin.html", 403, error=error)
        everyone = await run_in_threadpool(list_principals, state.vault.store)
        name = next(p.name for p in everyone if p.principal_id == principal.principal_id)
        sid = state.sessions.start(principal, name, token)
        user = state.sessions.find(sid)
        assert user is not None
        return state.signed_in(user, sid, f"/console/{HOME[principal.role]}")

    @router.post("/signout")
    async def signout(request: Request) -> Response:
        form = await posted(request)
        if isinstance(form, Response):
            return form
        state.sessions.end(request.cookies.get(SESSION_COOKIE))
        return state.signed_out("/console/")

    @router.get("/toolkits")
    async def toolkits(request: Request) -> Response:
        user = await signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        listed = [
            (t, [f.pointer for f in _secret_leaves(state, t)]) for t in state.vault.registry.all()
        ]
        return state.render(request, "toolkits.html", user=user, toolkits=listed)

    @router.get("/sessions")
    async def sessions(request: Request) -> Response:
        user = await signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        rows = await run_in_threadpool(session_overview, state.vault.store)
        return state.render(request, "sessions.html", user=user, sessions=rows)

    @router.get("/keys")
    async def keys(request: Request) -> Response:
        user = await signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        status = await run_in_threadpool(key_status, state.vault.store, state.provider)
        return state.render(request, "keys.html", user=user, **status)

    @router.get("/tokens")
    async def tokens(request: Request) -> Response:
        user = await signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        everyone = await run_in_threadpool(list_principals, state.vault.store)
        return state.render(request, "tokens.html", user=user, principals=everyone)

    @router.post("/tokens/revoke")
    async def revoke_token(request: Request) -> Response:
        user = await signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        form = await posted(request)
        if isinstance(form, Response):
            return form
        actor = user.principal.principal_id
        try:
            await run_in_threadpool(
                lambda: revoke(state.vault.store, form.get("principal_id", ""), actor=actor)
            )
        except VaultError as exc:
            return state.message(request, 404, "Not revoked", exc.message, user)
        return RedirectResponse("/console/tokens", status_code=303)

    @router.get("/history")
    async def history_page(request: Request) -> Response:
        user = await signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        session = request.query_params.get("session", "")[:MAX_FILTER] or None
        toolkit = request.query_params.get("toolkit", "")[:MAX_FILTER] or None
        versions = await run_in_threadpool(history, state.vault.store, session, toolkit)
        return state.render(
            request,
            "history.html",
            user=user,
            versions=versions[::-1],
            session=session or "",
            toolkit=toolkit or "",
        )

    @router.get("/audit")
    async def audit_page(request: Request) -> Response:
        user = await signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        return state.render(request, "audit.html", user=user, report=None)

    @router.post("/audit/verify")
    async def audit_verify(request: Request) -> Response:
        user = await signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        form = await posted(request)
        if isinstance(form, Response):
            return form
        report = await run_in_threadpool(state.vault.verify_audit)
        return state.render(request, "audit.html", user=user, report=report.as_json())

    return router


def _secret_leaves(state: WebState, toolkit: RegisteredToolkit) -> list[Field]:
    return [f for f in leaves(state.fields(toolkit)) if f.secret]
