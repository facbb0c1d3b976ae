"""`GET /v1/audit/events`: the audit trail over HTTP, for auditors and operators.

A thin shell over `audit.trail`: the same filters as `audit list`, the same event objects
as `audit list --json`, paged by a cursor (`after` going up, the default; with
`order=desc`, `before` going down from the newest). A filter that cannot be read is a 422
naming the parameter, never repeating its value.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
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
from toolkit_vault.transports.http_admin import Guards
from toolkit_vault.transports.refusals import Refused

__all__ = ["audit_routes"]

_ACTIONS = len(AuditAction)  # naming each action once is the most a filter needs


class EventsOut(BaseModel):
    events: list[dict[str, Any]]
    next: int | None


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
        _: Principal = Depends(guards.as_auditor),
    ) -> EventsOut:
        """Audit events as `audit list --json` prints them, with `next`: the cursor of the
        following page (`after`, or `before` with `order=desc`), null when none follows."""
        if order == "asc" and before is not None:
            raise _refused("before", "goes with order=desc")
        if order == "desc" and after is not None:
            raise _refused("after", "goes with order=asc")
        filters = EventFilter(tuple(action), actor, session, principal, toolkit, since, until)
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

    return router


def _refused(name: str, reason: str) -> Refused:
    details = [{"pointer": f"/query/{name}", "keyword": "filter"}]
    return Refused(422, "INVALID_MESSAGE", f"{name}: {reason}", details=details)
