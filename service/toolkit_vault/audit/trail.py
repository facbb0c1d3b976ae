"""The audit trail as auditors read it: events filtered, paged by a cursor, said in words.

One reader for `audit list`, `audit tail`, `GET /v1/audit/events` and the console's Audit
page. An event comes back as stored (its `details` too: the chain never held a secret, so
nothing here can show one), with the names a person needs: the actor's and the subject
principal's, from the principals table or, for a principal whose row is gone, from the
chain's own `token_created` event; else the id as stored. `summary` says in words what the
event is about, from its fields alone.

Tool calls' records are a trail of their own (`store.call_chains`): a filter that keeps
only `tool_called` (the action alone, or `arguments_hmac`) reads them, and their pages
follow where each was written among all call records (their `seq` there; `chain` and
`chain_seq` say which call chain holds them and where). Every other filter reads the main
chain, where `calls_anchored` events say how far each call chain had reached.

Pages follow `seq`, the chain's order: `list_events` goes up from a cursor (`after`),
`newest_events` down from the newest (or from `before`); each page's `next` is the cursor
of the page after it, None when none follows. `follow_events` yields what is committed
after a cursor, polling cheaply. Listing proves nothing: `audit verify` proves the chain.

Here the filters are checked and names turned into ids; the reads are named operations of
`store.trail_queries`, the sentences are `wording`'s.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from toolkit_vault.actors import shell_actor_name
from toolkit_vault.audit.event import TrailEvent
from toolkit_vault.audit.history import parse_time
from toolkit_vault.audit.wording import describe
from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.storage import Store
from toolkit_vault.store.trail_queries import (
    TrailQuery,
    TrailRow,
    actor_appears,
    calls_only,
    last_seq,
    principal_known,
    trail_page,
)

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "MAX_SEQ",
    "MAX_TEXT",
    "BadFilter",
    "EventFilter",
    "EventPage",
    "TrailEvent",
    "actions",
    "describe",
    "follow_events",
    "last_position",
    "last_seq",
    "list_events",
    "newest_events",
]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_SEQ = 2**62  # a cursor beyond any chain, still a 64-bit integer for every database
MAX_TEXT = 200  # the longest name, id or toolkit a filter takes (the columns' own width)
_HMAC = re.compile(r"[0-9a-f]{64}")  # a `tool_called` event's `arguments_hmac`


class BadFilter(VaultError):
    """A filter that cannot be read. `name` is the filter (`actor`, `since`, ...); the
    message never repeats the value given, so a transport may show it as it is."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.reason = message


@dataclass(frozen=True)
class EventFilter:
    """What to keep, as typed: every field optional, all of them must hold.

    `actor` and `principal` take a principal's id or name (`actor` also a plain actor such
    as `operator` or `init`); `principal` keeps the events about that principal (its
    sessions, its own configs, its token); `since` and `until` are epoch seconds or ISO 8601
    (`until` excludes its moment); `arguments_hmac` keeps the calls whose arguments had
    that HMAC (`audit hash`)."""

    actions: tuple[str, ...] = ()
    actor: str | None = None
    session: str | None = None
    principal: str | None = None
    toolkit: str | None = None
    since: str | float | None = None
    until: str | float | None = None
    arguments_hmac: str | None = None


@dataclass(frozen=True)
class EventPage:
    events: list[TrailEvent]
    next: int | None  # the cursor of the next page (`after` going up, `before` going down)
    names: dict[str, str] = field(default_factory=dict, repr=False)  # id -> name, as shown

    def as_json(self) -> dict[str, Any]:
        return {"events": [e.as_json() for e in self.events], "next": self.next}


# -- reading ----------------------------------------------------------------------------------


def list_events(
    store: Store,
    filters: EventFilter | None = None,
    *,
    after: int = 0,
    limit: int = DEFAULT_LIMIT,
) -> EventPage:
    """The matching events after `after`, oldest first, at most `limit`."""
    resolved = resolve(store, filters or EventFilter())
    return _page(store, resolved, after=_cursor("after", after), limit=_limit(limit))


def newest_events(
    store: Store,
    filters: EventFilter | None = None,
    *,
    before: int | None = None,
    limit: int = DEFAULT_LIMIT,
) -> EventPage:
    """The newest matching events (before `before`, when given), newest first."""
    resolved = resolve(store, filters or EventFilter())
    cursor = None if before is None else _cursor("before", before)
    return _page(store, resolved, before=cursor, limit=_limit(limit), newest=True)


def last_position(store: Store, filters: EventFilter | None = None) -> int:
    """The cursor of the newest event `filters` would read: the main chain's last `seq`,
    or the last call record's place for a filter of calls alone."""
    return last_seq(store, resolve(store, filters or EventFilter()))


def follow_events(
    store: Store,
    filters: EventFilter | None = None,
    *,
    after: int,
    stop: threading.Event,
    interval: float = 0.5,
) -> Iterator[list[TrailEvent]]:
    """Each batch of matching events committed after `after`, in order, until `stop` is
    set. A poll costs one read of the chain's end (on SQLite not even that while nothing
    at all was committed); events are read only when it moved."""
    resolved = resolve(store, filters or EventFilter())
    cursor, mark = _cursor("after", after), None
    calls = calls_only(resolved)  # a call moves no commit mark (`store.call_chains`)
    while not stop.is_set():
        now = None if calls else store.commit_mark()
        if now is None or now != mark:
            mark = now
            head = last_seq(store, resolved)
            while cursor < head and not stop.is_set():
                page = _page(store, resolved, after=cursor, limit=MAX_LIMIT, upto=head)
                if page.events:
                    yield page.events
                cursor = head if page.next is None else page.next
        stop.wait(interval)


def resolve(store: Store, filters: EventFilter) -> TrailQuery:
    """Check every filter and turn names into ids; `BadFilter` names the one that fails."""
    actions = tuple(filters.actions)
    known = {a.value for a in AuditAction}
    for action in actions:
        if action not in known:
            raise BadFilter("action", "unknown action; one of " + ", ".join(sorted(known)))
    if AuditAction.TOOL_CALLED.value in actions and len(set(actions)) > 1:
        raise BadFilter("action", "tool_called is listed alone (calls are a trail of their own)")
    for name in ("actor", "session", "principal", "toolkit"):
        value = getattr(filters, name)
        if value is not None and (not value or len(value) > MAX_TEXT or "\x00" in value):
            raise BadFilter(name, f"takes 1 to {MAX_TEXT} characters, no NUL")
    since, until = _time("since", filters.since), _time("until", filters.until)
    if since is not None and until is not None and until <= since:
        raise BadFilter("until", "must be later than since")
    principal = None
    if filters.principal is not None:
        principal = principal_known(store, filters.principal)
        if principal is None:
            raise BadFilter("principal", "no principal has that name or id")
    actors: tuple[str, ...] = ()
    if filters.actor is not None:
        actors = _actors(store, filters.actor)
    hashed = filters.arguments_hmac
    if hashed is not None:
        hashed = hashed.strip().lower()
        if not _HMAC.fullmatch(hashed):
            raise BadFilter("arguments_hmac", "takes the 64 hex digits `audit hash` prints")
    return TrailQuery(
        actions, actors, filters.session, principal, filters.toolkit, since, until, hashed
    )


def _time(name: str, value: str | float | None) -> float | None:
    if value is None:
        return None
    try:
        moment = float(value) if isinstance(value, int | float) else parse_time(value)
    except VaultError:
        moment = math.nan
    if not math.isfinite(moment):
        raise BadFilter(
            name, "not a time: use epoch seconds or ISO 8601 (2026-01-31, 2026-01-31T12:00:00Z)"
        )
    return moment


def _cursor(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
        raise BadFilter(name, f"takes a sequence number, 0 to {MAX_SEQ}")
    return value


def _limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise BadFilter("limit", f"takes 1 to {MAX_LIMIT}")
    return limit


def _actors(store: Store, typed: str) -> tuple[str, ...]:
    """The stored actor strings `typed` means: a principal's id (by id or name), and the
    plain actor itself (`operator`, `init`); refused when neither exists."""
    principal = principal_known(store, typed)
    if principal is not None:
        return tuple(dict.fromkeys((principal, typed)))
    if not actor_appears(store, typed):
        raise BadFilter("actor", "no principal has that name or id, and no event has it")
    return (typed,)


def _page(
    store: Store,
    query: TrailQuery,
    *,
    after: int = 0,
    before: int | None = None,
    limit: int,
    newest: bool = False,
    upto: int | None = None,
) -> EventPage:
    found = trail_page(
        store, query, after=after, before=before, limit=limit, newest=newest, upto=upto
    )
    events = [_event(row, found.names) for row in found.rows]
    return EventPage(events, found.next, found.names)


def _event(row: TrailRow, names: Mapping[str, str]) -> TrailEvent:
    subject = row.subject
    event = TrailEvent(
        seq=row.seq,
        ts=row.ts,
        action=row.action,
        actor=row.actor,
        actor_name=names.get(row.actor) or shell_actor_name(row.actor) or row.actor,
        session_id=row.session_id,
        principal_id=subject,
        principal_name=None if subject is None else names.get(subject, subject),
        toolkit_name=row.toolkit_name,
        version=row.version,
        details=row.details,
        mac=row.mac,
        summary="",
        chain=row.chain,
        chain_seq=row.chain_seq,
    )
    return replace(event, summary=describe(event, names.get))


def actions() -> Sequence[str]:
    """Every action's stored text, for a filter's choices."""
    return [a.value for a in AuditAction]
