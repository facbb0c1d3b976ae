"""The intake form: a person opens the agent's link, types the secret fields, submits.

The link is the only credential (no sign-in): it travels in the query string (the
request log records the path alone) and, on submit, in the form body. Errors are shown
beside their fields with the pointers and keywords of the A2E error; a secret input is
never given a value back, a public one keeps what was typed. "Check now" runs the same
validation and credential check as saving (`Intake.check`) and saves nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from toolkit_vault.core.expiry import when
from toolkit_vault.core.intake import IntakeRefused, IntakeView
from toolkit_vault.errors import ConfigInvalid, SchemaRefused
from toolkit_vault.oauth import oauth_spec
from toolkit_vault.transports.web.formdata import (
    field_error,
    initial_values,
    parse_form,
    place_errors,
    prefilled,
)
from toolkit_vault.transports.web.forms import Field, leaves
from toolkit_vault.transports.web.pages import WebState
from toolkit_vault.transports.web.security import BadForm, read_form

__all__ = ["intake_routes"]

_STATUS = {"invalid": 404, "expired": 410, "used": 410, "changed": 409}
_TITLES = {
    "invalid": "Link not valid",
    "expired": "Link expired",
    "used": "Link already used",
    "changed": "Toolkit changed",
}


def _ids(fields: Sequence[Field]) -> dict[str, str]:
    ids: dict[str, str] = {}

    def walk(group: Sequence[Field]) -> None:
        for field in group:
            ids[field.pointer] = f"f{len(ids) + 1}"
            walk(field.children)

    walk(fields)
    return ids


def _schema_errors(
    view: IntakeView, config: dict[str, Any], unreadable: list[dict[str, str]]
) -> list[dict[str, Any]]:
    """The schema's verdict on what could be read, so every fault shows at once (minus
    the ones about fields left out because they could not be read)."""
    try:
        view.toolkit.schema.validate(config)
    except ConfigInvalid as exc:
        skip = [e["pointer"] for e in unreadable]
        return [
            d
            for d in exc.details
            if not any(d["pointer"] == p or d["pointer"].startswith(p + "/") for p in skip)
        ]
    return []


def connect_label(schema: Mapping[str, Any]) -> str | None:
    """The host a Connect button names, for a toolkit that declares `x-oauth`."""
    try:
        spec = oauth_spec(schema)
    except SchemaRefused:
        return None
    if spec is None:
        return None
    return urlsplit(spec.issuer or spec.authorization_endpoint or "").netloc or None


def connect_needs_secret(schema: Mapping[str, Any]) -> bool:
    """Whether the Connect button asks for a confidential client's secret (`x-oauth`'s
    `client_secret_field`): the person connecting types it; it is sealed, never shown."""
    try:
        spec = oauth_spec(schema)
    except SchemaRefused:
        return False
    return spec is not None and spec.client_secret_field is not None


def intake_routes(state: WebState) -> APIRouter:
    router = APIRouter()

    def refused(request: Request, exc: IntakeRefused) -> Response:
        text = exc.message[:1].upper() + exc.message[1:] + "."
        return state.message(request, _STATUS[exc.reason], _TITLES[exc.reason], text)

    def form_page(
        request: Request,
        link: str,
        view: IntakeView,
        values: Mapping[str, str],
        details: Sequence[Mapping[str, Any]] = (),
        status: int = 200,
        checked: str | None = None,
    ) -> Response:
        fields = state.fields(view.toolkit)
        placed, unplaced = place_errors(fields, details)
        secret = {f.pointer for f in leaves(fields) if f.secret}
        agent_values = prefilled(fields, view.public_config)
        return state.render(
            request,
            "intake.html",
            status,
            link=link,
            toolkit=view.toolkit.definition,
            claim=view.claim,
            fields=fields,
            ids=_ids(fields),
            values={k: v for k, v in values.items() if k not in secret},
            errors=placed,
            form_errors=unplaced,
            field_error=field_error,
            requester=view.requester or view.claim.principal_id[:8],
            prefilled=agent_values,
            agent_set={f.pointer for f, _ in agent_values},
            oauth=connect_label(view.toolkit.definition.config_schema),
            oauth_secret=connect_needs_secret(view.toolkit.definition.config_schema),
            checked=checked,
            has_check=view.toolkit.schema.verify is not None
            or state.vault.plugin_checks.verifies(view.toolkit),
        )

    @router.get("/intake")
    async def intake_form(request: Request) -> Response:
        link = request.query_params.get("link", "")
        try:
            view = await run_in_threadpool(state.intake.open, link)
        except IntakeRefused as exc:
            return refused(request, exc)
        values = initial_values(state.fields(view.toolkit), view.public_config)
        return form_page(request, link, view, values)

    @router.post("/intake")
    async def intake_submit(request: Request) -> Response:
        try:
            form = await read_form(request)
        except BadForm as exc:
            return state.message(request, 400, "Bad request", str(exc))
        if not state.form_allowed(request, form):
            return state.message(
                request,
                403,
                "Form refused",
                "This form did not come from this page (its CSRF token is missing or wrong); "
                "nothing was saved. Open the link again and resubmit.",
            )
        link = form.get("link", "")
        try:
            view = await run_in_threadpool(state.intake.open, link)
        except IntakeRefused as exc:
            return refused(request, exc)
        config, errors = parse_form(state.fields(view.toolkit), form)
        if errors:
            errors += _schema_errors(view, config, errors)
            return form_page(request, link, view, form, errors, 422)
        try:
            if form.get("action") == "check":
                ends = await run_in_threadpool(state.intake.check, link, config)
                told = f"; it ends at {when(ends)}" if ends is not None else ""
                return form_page(
                    request, link, view, form, checked=f"The credential check passed{told}."
                )
            outcome = await run_in_threadpool(state.intake.complete, link, config)
        except IntakeRefused as exc:
            return refused(request, exc)
        except ConfigInvalid as exc:
            return form_page(request, link, view, form, exc.details, 422)
        return state.render(
            request,
            "intake_done.html",
            toolkit=view.toolkit.definition,
            outcome=outcome,
            scope=view.claim.scope,
        )

    return router
