"""`GET /v1/audit/events`: the audit trail over HTTP, for auditors and operators; and
`POST /v1/audit/hash`: the `arguments_hmac` of arguments an auditor holds (`audit hash`).

A thin shell over `audit.trail`: the same filters as `audit list`, the same event objects
as `audit list --json`, paged by a cursor (`after` going up, the default; with
`order=desc`, `before` going down from the newest). A filter that cannot be read is a 422
naming the parameter, never repeating its value.

`/v1/audit/hash` takes `{"arguments": {...}}` and answers `{"arguments_hmac": "<hex>"}`,
the value a `tool_called` event carries for a call with those arguments (as HashiCorp
Vault's `sys/audit-hash`); its body is read as the wire reads a message, and a refusal
never repeats it.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel

from toolkit_vault.access.principals import Principal
from toolkit_vault.audit.trail import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_SEQ,
    MAX_TEXT,
    BadFilter,
    EventFilter,
    EventPage,
    list_events,
    newest_events,
)
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.tools.call_audit import MAX_ARGUMENTS_BYTES, BadArguments, parse_arguments
from toolkit_vault.transports.http_admin import Guards
from toolkit_vault.transports.http_guards import read_bounded
from toolkit_vault.transports.refusals import Refused

__all__ = ["audit_routes"]

_ACTIONS = len(AuditAction)  # naming each action once is the most a filter needs


class EventsOut(BaseModel):
    events: list[dict[str, Any]]
    next: int | None


class HashOut(BaseModel):
    arguments_hmac: str


def audit_routes(guards: Guards) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/audit/events", response_model=EventsOut)
    async def v1_audit_events(
        after: int | None = Query(default=None, ge=0, le=MAX_SEQ),
        before: int | None = Query(default=None, ge=0, le=MAX_SEQ),
        order: Literal["asc", "desc"] = "asc",
        limit: int = Query(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
        action: list[str] = Query(default=[], max_length=_ACTIONS),
        actor: str | None = Query(default=None, min_length=1, max_length=MAX_TEXT),
        session: str | None = Query(default=None, min_length=1, max_length=MAX_TEXT),
        principal: str | None = Query(default=None, min_length=1, max_length=MAX_TEXT),
        toolkit: str | None = Query(default=None, min_length=1, max_length=MAX_TEXT),
        since: str | None = Query(default=None, min_length=1, max_length=64),
        until: str | None = Query(default=None, min_length=1, max_length=64),
        arguments_hmac: str | None = Query(default=None, min_length=1, max_length=64),
        _: Principal = Depends(guards.as_auditor),
    ) -> EventsOut:
        """Audit events as `audit list --json` prints them, with `next`: the cursor of the
        following page (`after`, or `before` with `order=desc`), null when none follows."""
        if order == "asc" and before is not None:
            raise _refused("before", "goes with order=desc")
        if order == "desc" and after is not None:
            raise _refused("after", "goes with order=asc")
        filters = EventFilter(
            tuple(action), actor, session, principal, toolkit, since, until, arguments_hmac
        )
        try:
            if order == "desc":
                page: EventPage = await guards.in_thread(
                    lambda: newest_events(guards.vault.store, filters, before=before, limit=limit)
                )
            else:
                page = await guards.in_thread(
                    lambda: list_events(guards.vault.store, filters, after=after or 0, limit=limit)
                )
        except BadFilter as exc:
            raise _refused(exc.name, exc.reason) from None
        return EventsOut(**page.as_json())

    @router.post("/v1/audit/hash", response_model=HashOut, openapi_extra=_HASH_BODY)
    async def v1_audit_hash(request: Request, _: Principal = Depends(guards.as_auditor)) -> HashOut:
        """The `arguments_hmac` of `{"arguments": {...}}` (`audit hash --json`)."""
        raw = await read_bounded(request, MAX_ARGUMENTS_BYTES)
        try:
            body = parse_arguments(raw)
        except BadArguments as exc:
            raise _unreadable("", exc.message.replace("arguments", "the body", 1)) from None
        arguments = body.get("arguments")
        if set(body) != {"arguments"} or not isinstance(arguments, dict):
            raise _unreadable("/arguments", 'the body must be {"arguments": {...}}')
        hashed = await guards.in_thread(guards.vault.upkeep.hash_arguments, arguments)
        return HashOut(arguments_hmac=hashed)

    return router


# The body as OpenAPI says it (the route reads it itself, as the wire reads a message).
_HASH_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["arguments"],
                    "properties": {"arguments": {"type": "object"}},
                    "additionalProperties": False,
                }
            }
        },
    }
}


def _unreadable(pointer: str, reason: str) -> Refused:
    details = [{"pointer": pointer, "keyword": "arguments"}]
    return Refused(422, "INVALID_MESSAGE", reason, details=details)


def _refused(name: str, reason: str) -> Refused:
    details = [{"pointer": f"/query/{name}", "keyword": "filter"}]
    return Refused(422, "INVALID_MESSAGE", f"{name}: {reason}", details=details)
