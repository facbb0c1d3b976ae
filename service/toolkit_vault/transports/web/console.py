"""The console's pages: sign in with a bearer token (or through the identity provider,
`oidc_pages`), then what the role may see and do.

Operators: toolkits, sessions and their configured state, key status, tokens; and what an
operator does without a shell (`core.operators`, as the signed-in operator): create a
token (shown once), revoke one after a confirmation (never their own), ask a person for a
toolkit's secrets (an intake link), purge after a confirmation naming what it destroys.
Auditors (and operators, as in the admin API): config history with fingerprints, the
audit trail, its verification, and the calls that had given arguments (`audit hash`).
Agents cannot sign in. Each route calls the service API (the functions the CLI and the
admin API call), in a worker thread; no page shows a secret.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.responses import RedirectResponse

from toolkit_vault.access.principals import TokenExpired, authenticate, list_principals
from toolkit_vault.audit.history import history, session_matches
from toolkit_vault.core.operators import (
    NotConfirmed,
    OwnToken,
    PurgeTarget,
    ask_person,
    issue_token,
    preview_purge,
    purge_scope,
    revoke_token,
    token_to_revoke,
)
from toolkit_vault.core.people import sign_out, still_allowed
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.admin import key_status
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.toolkits.registry import RegisteredToolkit
from toolkit_vault.toolkits.server_processes import server_states
from toolkit_vault.toolkits.server_status import server_line
from toolkit_vault.tools.call_audit import BadArguments, parse_arguments
from toolkit_vault.transports.web.forms import leaves
from toolkit_vault.transports.web.pages import WebState
from toolkit_vault.transports.web.security import SESSION_COOKIE, BadForm, ConsoleUser, read_form
from toolkit_vault.transports.web.sessions_view import sessions_view
from toolkit_vault.transports.web.trail_view import trail_view

__all__ = ["console_routes"]

CONSOLE_ROLES = ("operator", "auditor")
HOME = {"operator": "sessions", "auditor": "history"}
MAX_FILTER = 200
HISTORY_PAGE = 50
SCOPE_FIELDS = ("session", "principal", "toolkit")


class Console:
    """The console's pages over one `WebState`; `console_routes` mounts them."""

    def __init__(self, state: WebState) -> None:
        self.state = state

    async def signed_in(self, request: Request, *roles: str) -> ConsoleUser | Response:
        """The signed-in person if their token (or, signed in through the identity
        provider, the mapping that gave their role) still holds and their role may see this."""
        sid = request.cookies.get(SESSION_COOKIE)
        user = self.state.sessions.find(sid)
        if user is None:
            return RedirectResponse("/console/", status_code=303)
        if not await run_in_threadpool(self._still_holds, user):
            self.state.sessions.end(sid)  # revoked, expired or unmapped since
            return self.state.signed_out("/console/")
        if user.principal.role not in roles:
            return self.state.message(
                request, 403, "Not for your role", "This page is not open to your role.", user
            )
        return user

    def _still_holds(self, user: ConsoleUser) -> bool:
        store = self.state.vault.store
        if user.person is not None:
            return still_allowed(store, user.person)
        if user.token is None:
            return False
        try:
            principal = authenticate(store, user.token.reveal().decode())
        except TokenExpired:
            return False
        return principal == user.principal

    def secret_pointers(self, toolkit: RegisteredToolkit) -> list[str]:
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
        return self._signin_page(request, 200, None)

    def _signin_page(self, request: Request, status: int, error: str | None) -> Response:
        """The sign-in page: a bearer token's form, and the identity provider's button when
        one is set up (`serve --oidc-issuer`)."""
        return self.state.render(request, "signin.html", status, error=error, oidc=self.state.oidc)

    async def signin(self, request: Request) -> Response:
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        token = form.get("token", "").strip()
        try:
            principal = await run_in_threadpool(authenticate, self.state.vault.store, token)
        except TokenExpired as exc:
            error = exc.message[:1].upper() + exc.message[1:] + "."  # when, never the token
            return self._signin_page(request, 401, error)
        if principal is None:
            error = "This token is not valid: unknown, malformed or revoked."
            return self._signin_page(request, 401, error)
        if principal.role not in CONSOLE_ROLES:
            error = f"A token of the {principal.role} role cannot sign in to the console."
            return self._signin_page(request, 403, error)
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
        ended = self.state.sessions.end(request.cookies.get(SESSION_COOKIE))
        if ended is not None and ended.person is not None:
            await run_in_threadpool(sign_out, self.state.vault.store, ended.person)
        return self.state.signed_out("/console/")

    async def toolkits(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        query = request.query_params.get("q", "").strip()[:MAX_FILTER]
        everything = self.state.vault.registry.all()
        found = [t for t in everything if _matches(t, query)]
        listed = [(t, self.secret_pointers(t)) for t in found]
        servers: dict[str, list[str]] = {}
        for state in await run_in_threadpool(server_states):  # imported servers running here
            servers.setdefault(str(state["toolkit"]), []).append(server_line(state))
        return self.state.render(
            request,
            "toolkits.html",
            user=user,
            toolkits=listed,
            q=query,
            total=len(everything),
            servers=servers,
        )

    async def sessions(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        rows = await run_in_threadpool(sessions_view, self.state.vault.store)
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
        return await self._tokens_page(request, user)

    async def _tokens_page(
        self, request: Request, user: ConsoleUser, status: int = 200, **form: str
    ) -> Response:
        everyone = await run_in_threadpool(list_principals, self.state.vault.store)
        return self.state.render(
            request,
            "tokens.html",
            status,
            user,
            principals=everyone,
            error=form.get("error"),
            name=form.get("name", ""),
            role=form.get("role", "agent"),
            ttl=form.get("ttl", ""),
        )

    async def operator_form(
        self, request: Request
    ) -> tuple[ConsoleUser, dict[str, str]] | Response:
        """A POST of an operator's action: signed in as an operator, from a console page."""
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        return user, form

    async def create_token(self, request: Request) -> Response:
        """A new token, on a page of its own (never cached), shown this once."""
        posted = await self.operator_form(request)
        if isinstance(posted, Response):
            return posted
        user, form = posted
        role, name = form.get("role", ""), form.get("name", "").strip()
        ttl, store = form.get("ttl", "").strip(), self.state.vault.store
        try:
            made = await run_in_threadpool(
                issue_token, store, user.principal, role, name, ttl or None
            )
        except VaultError as exc:
            return await self._tokens_page(
                request, user, 422, error=exc.message, name=name, role=role, ttl=ttl
            )
        return self.state.render(request, "token_created.html", user=user, made=made)

    async def revoke_token(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        store, target = self.state.vault.store, form.get("principal_id", "")
        try:
            await run_in_threadpool(
                revoke_token, store, user.principal, target, form.get("confirm")
            )
        except NotConfirmed:
            found = await run_in_threadpool(token_to_revoke, store, user.principal, target)
            return self.state.render(request, "revoke_confirm.html", user=user, target=found)
        except OwnToken as exc:
            title = "Not revoked: this is your own token"
            return self.state.message(request, 409, title, exc.message, user)
        except VaultError as exc:
            return self.state.message(request, 404, "Not revoked", exc.message, user)
        return RedirectResponse("/console/tokens", status_code=303)

    async def ask_form(self, request: Request) -> Response:
        """The form that starts an intake link: a session or an agent, and a toolkit."""
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        query = {k: request.query_params.get(k, "")[:MAX_FILTER] for k in SCOPE_FIELDS}
        return await self._ask_page(request, user, query)

    async def _ask_page(
        self, request: Request, user: ConsoleUser, form: dict[str, str], status: int = 200
    ) -> Response:
        everyone = await run_in_threadpool(list_principals, self.state.vault.store)
        return self.state.render(
            request,
            "ask.html",
            status,
            user,
            toolkits=[t.definition.name for t in self.state.vault.registry.all()],
            agents=[p.name for p in everyone if p.role == "agent"],
            error=form.get("error"),
            session=form.get("session", ""),
            principal=form.get("principal", ""),
            toolkit=form.get("toolkit", ""),
        )

    async def ask(self, request: Request) -> Response:
        """Start an intake link and show it, to be copied and sent to the person."""
        posted = await self.operator_form(request)
        if isinstance(posted, Response):
            return posted
        user, form = posted
        fields = {k: form.get(k, "").strip() for k in SCOPE_FIELDS}
        try:
            link = await run_in_threadpool(
                lambda: ask_person(
                    self.state.vault,
                    user.principal,
                    fields["toolkit"],
                    session=fields["session"] or None,
                    principal=fields["principal"] or None,
                )
            )
        except VaultError as exc:
            return await self._ask_page(request, user, {**fields, "error": exc.message}, 422)
        return self.state.render(request, "ask_link.html", user=user, link=link)

    async def purge_form(self, request: Request) -> Response:
        user = await self.signed_in(request, "operator")
        if isinstance(user, Response):
            return user
        query = {k: request.query_params.get(k, "")[:MAX_FILTER] for k in SCOPE_FIELDS}
        return self._purge_page(request, user, query)

    def _purge_page(
        self, request: Request, user: ConsoleUser, form: dict[str, str], status: int = 200
    ) -> Response:
        return self.state.render(
            request,
            "purge.html",
            status,
            user,
            error=form.get("error"),
            session=form.get("session", ""),
            principal=form.get("principal", ""),
            toolkit=form.get("toolkit", ""),
        )

    async def purge(self, request: Request) -> Response:
        """Without `confirm`: the page naming what would be destroyed (counts), nothing
        changed; with it (the scope repeated): the purge, and what it destroyed."""
        posted = await self.operator_form(request)
        if isinstance(posted, Response):
            return posted
        user, form = posted
        fields = {k: form.get(k, "").strip() for k in SCOPE_FIELDS}
        vault = self.state.vault
        try:
            target = PurgeTarget(*(fields[k] or None for k in SCOPE_FIELDS))
            report = await run_in_threadpool(
                purge_scope, vault, user.principal, target, form.get("confirm")
            )
        except NotConfirmed:
            preview = await run_in_threadpool(preview_purge, vault.store, target)
            return self.state.render(
                request, "purge_confirm.html", user=user, target=target, preview=preview
            )
        except VaultError as exc:
            return self._purge_page(request, user, {**fields, "error": exc.message}, 422)
        return self.state.render(
            request, "purge_done.html", user=user, target=target, report=report
        )

    async def history_page(self, request: Request) -> Response:
        user = await self.signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        typed = request.query_params.get("session", "").strip()[:MAX_FILTER]
        toolkit = request.query_params.get("toolkit", "").strip()[:MAX_FILTER]
        try:
            page = max(1, int(request.query_params.get("page", "1")))
        except ValueError:
            page = 1
        store, error = self.state.vault.store, None
        session = None
        if typed:  # an id or a prefix of one, as the CLI prints them
            matches = await run_in_threadpool(session_matches, store, typed)
            session = matches[0] if len(matches) == 1 else typed
            if len(matches) > 1:
                error = f"Session {typed!r} is the start of more than one id: type more of it."
        versions = [] if error else await run_in_threadpool(history, store, session)
        wanted = toolkit.lower()
        versions = [v for v in versions[::-1] if wanted in str(v["toolkit_name"]).lower()]
        names = {p.principal_id: p.name for p in await run_in_threadpool(list_principals, store)}
        pages = max(1, -(-len(versions) // HISTORY_PAGE))
        page = min(page, pages)
        shown = versions[(page - 1) * HISTORY_PAGE : page * HISTORY_PAGE]
        kept = {k: v for k, v in (("session", typed), ("toolkit", toolkit)) if v}
        return self.state.render(
            request,
            "history.html",
            200 if error is None else 422,
            user,
            versions=shown,
            total=len(versions),
            page_no=page,
            pages=pages,
            newer=urlencode({**kept, "page": page - 1}) if page > 1 else None,
            older=urlencode({**kept, "page": page + 1}) if page < pages else None,
            names=names,
            error=error,
            session=typed,
            toolkit=toolkit,
        )

    async def audit_page(self, request: Request) -> Response:
        user = await self.signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        return await self._audit(request, user, None)

    async def audit_verify(self, request: Request) -> Response:
        user = await self.signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        report = await run_in_threadpool(self.state.vault.verify_audit)
        return await self._audit(request, user, report.as_json())

    async def audit_hash(self, request: Request) -> Response:
        """Arguments an auditor holds, hashed as a call's record holds them (`audit hash`),
        then the calls that had them: the HMAC goes in the address, the arguments never."""
        user = await self.signed_in(request, "auditor", "operator")
        if isinstance(user, Response):
            return user
        form = await self.posted(request)
        if isinstance(form, Response):
            return form
        try:
            arguments = parse_arguments(form.get("arguments", ""))
        except BadArguments as exc:
            return await self._audit(request, user, None, hash_error=exc.message)
        hashed = await run_in_threadpool(self.state.vault.upkeep.hash_arguments, arguments)
        query = urlencode({"action": AuditAction.TOOL_CALLED.value, "arguments_hmac": hashed})
        return RedirectResponse(f"/console/audit?{query}", status_code=303)

    async def _audit(
        self,
        request: Request,
        user: ConsoleUser,
        report: dict[str, object] | None,
        hash_error: str | None = None,
    ) -> Response:
        """The Audit page: the newest events as filtered (`trail_view`), and a report."""
        trail = await run_in_threadpool(trail_view, self.state.vault.store, request.query_params)
        status = 200 if trail.error is None and hash_error is None else 422
        return self.state.render(
            request, "audit.html", status, user, report=report, trail=trail, hash_error=hash_error
        )


def _matches(toolkit: RegisteredToolkit, query: str) -> bool:
    """Whether a toolkit's name, alias, description or tags contain `query` (any case)."""
    if not query:
        return True
    d = toolkit.definition
    words = [d.name, d.alias or "", d.description or "", *(getattr(d, "tags", None) or [])]
    return any(query.lower() in str(word).lower() for word in words)


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
    router.add_api_route("/tokens/create", console.create_token, methods=["POST"])
    router.add_api_route("/ask", console.ask_form, methods=["GET"])
    router.add_api_route("/ask", console.ask, methods=["POST"])
    router.add_api_route("/purge", console.purge_form, methods=["GET"])
    router.add_api_route("/purge", console.purge, methods=["POST"])
    router.add_api_route("/history", console.history_page, methods=["GET"])
    router.add_api_route("/audit", console.audit_page, methods=["GET"])
    router.add_api_route("/audit/verify", console.audit_verify, methods=["POST"])
    router.add_api_route("/audit/hash", console.audit_hash, methods=["POST"])
    return router
