"""The console's Audit page as data: its filters read from the query string, the newest
matching events (`audit.trail.newest_events`) and the links of the pages around them.

No logic of its own beyond reading a query string: the trail says what each event is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from toolkit_vault.audit.trail import (
    BadFilter,
    EventFilter,
    TrailEvent,
    actions,
    newest_events,
)
from toolkit_vault.store.storage import Store

__all__ = ["PAGE_SIZE", "TEXT_FILTERS", "TrailView", "trail_view"]

PAGE_SIZE = 50
TEXT_FILTERS = ("actor", "session", "principal", "toolkit", "since", "until", "arguments_hmac")
_MAX_TYPED = 200


@dataclass
class TrailView:
    """What audit.html shows: the filters as typed, the events, the page links."""

    typed: dict[str, str]
    action: str
    choices: list[str] = field(default_factory=lambda: list(actions()))
    events: list[TrailEvent] = field(default_factory=list)
    older: str | None = None  # the query string of the next (older) page
    newest: str | None = None  # the query string of the first page, when not on it
    error: str | None = None
    filtered: bool = False


def trail_view(store: Store, query: QueryParams) -> TrailView:
    """The page for this query string; an unreadable filter gives `error` and no events."""
    typed = {name: query.get(name, "").strip()[:_MAX_TYPED] for name in TEXT_FILTERS}
    action = query.get("action", "").strip()[:_MAX_TYPED]
    view = TrailView(typed, action, filtered=bool(action or any(typed.values())))
    given = {name: value or None for name, value in typed.items()}
    filters = EventFilter(actions=(action,) if action else (), **given)
    before_text = query.get("before", "")
    try:
        before = int(before_text) if before_text else None
    except ValueError:
        view.error = "before: takes a sequence number"
        return view
    try:
        page = newest_events(store, filters, before=before, limit=PAGE_SIZE)
    except BadFilter as exc:
        view.error = str(exc)
        return view
    view.events = page.events
    kept = [(k, v) for k, v in [("action", action), *typed.items()] if v]
    if page.next is not None:
        view.older = urlencode([*kept, ("before", str(page.next))])
    if before is not None:
        view.newest = urlencode(kept)
    return view
