"""The audit trail as auditors read it: events filtered, paged by a cursor, said in words.

One reader for `audit list`, `audit tail`, `GET /v1/audit/events` and the console's Audit
page. An event comes back as stored (its `details` too: the chain never held a secret, so
nothing here can show one), with the names a person needs: the actor's and the subject
principal's, from the principals table or, for a principal whose row is gone, from the
chain's own `token_created` event; else the id as stored. `summary` says in words what the
event is about, from its fields alone.

Pages follow `seq`, the chain's order: `list_events` goes up from a cursor (`after`),
`newest_events` down from the newest (or from `before`); each page's `next` is the cursor
of the page after it, None when none follows. `follow_events` yields what is committed
after a cursor, polling cheaply. Listing proves nothing: `audit verify` proves the chain.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, and_, func, or_, select

from toolkit_vault.audit.history import iso_time, parse_time
from toolkit_vault.errors import VaultError
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.ledger import details_of
from toolkit_vault.store.models import AuditEvent, PrincipalRow, SessionRow
from toolkit_vault.store.scopes import principal_of, principal_scope
from toolkit_vault.store.storage import Store

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
    "last_seq",
    "list_events",
    "newest_events",
]

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_SEQ = 2**62  # a cursor beyond any chain, still a 64-bit integer for every database
MAX_TEXT = 200  # the longest name, id or toolkit a filter takes (the columns' own width)
_TOKEN_EVENTS = (AuditAction.TOKEN_CREATED, AuditAction.TOKEN_REVOKED)
_INTAKE_ACTOR = "intake:"
_MADE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # uuid4


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
    (`until` excludes its moment)."""

    actions: tuple[str, ...] = ()
    actor: str | None = None
    session: str | None = None
    principal: str | None = None
    toolkit: str | None = None
    since: str | float | None = None
    until: str | float | None = None


@dataclass(frozen=True)
class TrailEvent:
    """One audit event for a reader: as stored, plus names and a sentence."""

    seq: int
    ts: float
    action: str
    actor: str  # as stored: a principal id, or `operator`, `init`, `intake:<link id>`
    actor_name: str
    session_id: str | None
    principal_id: str | None  # whom the event is about: the session's or scope's owner,
    principal_name: str | None  # or the principal a token event names
    toolkit_name: str | None
    version: int | None
    details: dict[str, Any]
    mac: bytes
    summary: str

    def as_json(self) -> dict[str, Any]:
        """The documented, stable shape (docs/auditors.md); keys are only ever added."""
        return {
            "seq": self.seq,
            "at": iso_time(self.ts),
            "ts": self.ts,
            "action": self.action,
            "actor": self.actor,
            "actor_name": self.actor_name,
            "session_id": self.session_id,
            "principal_id": self.principal_id,
            "principal_name": self.principal_name,
            "toolkit_name": self.toolkit_name,
            "version": self.version,
            "details": self.details,
            "summary": self.summary,
            "mac": self.mac.hex(),
        }


@dataclass(frozen=True)
class EventPage:
    events: list[TrailEvent]
    next: int | None  # the cursor of the next page (`after` going up, `before` going down)
    names: dict[str, str] = field(default_factory=dict, repr=False)  # id -> name, as shown

    def as_json(self) -> dict[str, Any]:
        return {"events": [e.as_json() for e in self.events], "next": self.next}


@dataclass(frozen=True)
class _Resolved:
    actions: tuple[str, ...]
    actors: tuple[str, ...]
    session: str | None
    principal: str | None
    toolkit: str | None
    since: float | None
    until: float | None


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


def last_seq(store: Store) -> int:
    """The chain's last sequence number (0 when empty): one indexed read."""
    with store.read() as conn:
        found = conn.execute(select(func.max(AuditEvent.seq))).scalar()
    return int(found or 0)


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
    while not stop.is_set():
        now = store.commit_mark()
        if now is None or now != mark:
            mark = now
            head = last_seq(store)
            while cursor < head and not stop.is_set():
                page = _page(store, resolved, after=cursor, limit=MAX_LIMIT, upto=head)
                if page.events:
                    yield page.events
                cursor = head if page.next is None else page.next
        stop.wait(interval)


def resolve(store: Store, filters: EventFilter) -> _Resolved:
    """Check every filter and turn names into ids; `BadFilter` names the one that fails."""
    actions = tuple(filters.actions)
    known = {a.value for a in AuditAction}
    for action in actions:
        if action not in known:
            raise BadFilter("action", "unknown action; one of " + ", ".join(sorted(known)))
    for name in ("actor", "session", "principal", "toolkit"):
        value = getattr(filters, name)
        if value is not None and (not value or len(value) > MAX_TEXT or "\x00" in value):
            raise BadFilter(name, f"takes 1 to {MAX_TEXT} characters, no NUL")
    since, until = _time("since", filters.since), _time("until", filters.until)
    if since is not None and until is not None and until <= since:
        raise BadFilter("until", "must be later than since")
    principal = None
    if filters.principal is not None:
        principal = _principal_id(store, filters.principal)
        if principal is None:
            raise BadFilter("principal", "no principal has that name or id")
    actors: tuple[str, ...] = ()
    if filters.actor is not None:
        actors = _actors(store, filters.actor)
    return _Resolved(actions, actors, filters.session, principal, filters.toolkit, since, until)


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


def _principal_id(store: Store, typed: str) -> str | None:
    with store.read() as conn:
        found = conn.execute(
            select(PrincipalRow.principal_id).where(
                or_(PrincipalRow.principal_id == typed, PrincipalRow.name == typed)
            )
        ).scalar()
        if found is None:  # a principal whose row is gone: the chain still names it
            for event in _token_events(conn):
                details = details_of(event.details)
                if typed in (details.get("principal_id"), details.get("name")):
                    found = details.get("principal_id")
    return found if isinstance(found, str) else None


def _actors(store: Store, typed: str) -> tuple[str, ...]:
    """The stored actor strings `typed` means: a principal's id (by id or name), and the
    plain actor itself (`operator`, `init`); refused when neither exists."""
    principal = _principal_id(store, typed)
    if principal is not None:
        return tuple(dict.fromkeys((principal, typed)))
    with store.read() as conn:
        acted = conn.execute(select(AuditEvent.seq).where(AuditEvent.actor == typed).limit(1))
        if acted.first() is None:
            raise BadFilter("actor", "no principal has that name or id, and no event has it")
    return (typed,)


def _token_events(conn: Any, ids: Sequence[str] = ()) -> list[Any]:
    """The `token_created` events (naming one of `ids`, when given), oldest first."""
    query = (
        select(AuditEvent.details)
        .where(AuditEvent.action == AuditAction.TOKEN_CREATED.value)
        .order_by(AuditEvent.seq)
    )
    if ids:
        named = [f'%"principal_id": "{_like(i)}"%' for i in ids]
        query = query.where(or_(*(AuditEvent.details.like(n, escape="\\") for n in named)))
    return list(conn.execute(query))


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _query(f: _Resolved) -> Select[AuditEvent, str]:
    query = select(AuditEvent, SessionRow.principal_id.label("owner")).outerjoin(
        SessionRow, SessionRow.session_id == AuditEvent.session_id
    )
    if f.actions:
        query = query.where(AuditEvent.action.in_(f.actions))
    if f.actors:
        query = query.where(AuditEvent.actor.in_(f.actors))
    if f.session is not None:
        query = query.where(AuditEvent.session_id == f.session)
    if f.toolkit is not None:
        query = query.where(AuditEvent.toolkit_name == f.toolkit)
    if f.principal is not None:
        named = f'%"principal_id": "{_like(f.principal)}"%'  # as `json.dumps` writes it
        query = query.where(
            or_(
                SessionRow.principal_id == f.principal,
                AuditEvent.session_id == principal_scope(f.principal),
                and_(
                    AuditEvent.action.in_([a.value for a in _TOKEN_EVENTS]),
                    AuditEvent.details.like(named, escape="\\"),
                ),
            )
        )
    if f.since is not None:
        query = query.where(AuditEvent.ts >= f.since)
    if f.until is not None:
        query = query.where(AuditEvent.ts < f.until)
    return query


def _page(
    store: Store,
    f: _Resolved,
    *,
    after: int = 0,
    before: int | None = None,
    limit: int,
    newest: bool = False,
    upto: int | None = None,
) -> EventPage:
    query = _query(f)
    if newest:
        if before is not None:
            query = query.where(AuditEvent.seq < before)
        query = query.order_by(AuditEvent.seq.desc())
    else:
        query = query.where(AuditEvent.seq > after).order_by(AuditEvent.seq)
    if upto is not None:
        query = query.where(AuditEvent.seq <= upto)
    with store.read() as conn:
        rows = conn.execute(query.limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        subjects = [(row, _subject(row)) for row in rows]
        wanted = {row.actor for row in rows} | {s for _, s in subjects if s}
        names = _names(conn, wanted)
    events = [
        _event(row, subject, names)
        for row, subject in subjects
        if f.principal is None or subject == f.principal  # SQLite's LIKE ignores case
    ]
    return EventPage(events, rows[-1].seq if more and rows else None, names)


def _subject(row: Any) -> str | None:
    """Whom an event is about: the principal a token event names, else its scope's owner."""
    if row.action in _TOKEN_EVENTS:
        named = details_of(row.details).get("principal_id")
        return named if isinstance(named, str) else None
    if row.session_id is None:
        return None
    owner = row.owner if isinstance(row.owner, str) else principal_of(row.session_id)
    return owner


def _names(conn: Any, ids: Iterable[str]) -> dict[str, str]:
    """Names by principal id; `intake:<link>` actors as the intake of whoever asked."""
    wanted = set(ids)
    links = {i for i in wanted if i.startswith(_INTAKE_ACTOR)}
    asked: dict[str, str] = {}
    for actor in links:
        link = actor[len(_INTAKE_ACTOR) :]
        found = conn.execute(
            select(AuditEvent.actor)
            .where(
                AuditEvent.action == AuditAction.INTAKE_REQUESTED.value,
                AuditEvent.details.like(f'%"link_id": "{_like(link)}"%', escape="\\"),
            )
            .limit(1)
        ).scalar()
        if isinstance(found, str):
            asked[actor] = found
    principals = (wanted - links) | set(asked.values())
    names: dict[str, str] = {}
    if principals:
        rows = conn.execute(
            select(PrincipalRow.principal_id, PrincipalRow.name).where(
                PrincipalRow.principal_id.in_(sorted(principals))
            )
        )
        names = {row.principal_id: row.name for row in rows}
    gone = sorted(i for i in principals - set(names) if _MADE_ID.fullmatch(i))
    if gone:  # rows gone: the chain remembers the names it gave (a rare, slower read)
        for event in _token_events(conn, gone):
            details = details_of(event.details)
            pid, name = details.get("principal_id"), details.get("name")
            if pid in gone and pid not in names and isinstance(name, str):
                names[pid] = name
    for actor, principal in asked.items():
        names[actor] = f"intake link of {names.get(principal, principal)}"
    return names


def _event(row: Any, subject: str | None, names: Mapping[str, str]) -> TrailEvent:
    details = details_of(row.details)
    event = TrailEvent(
        seq=int(row.seq),
        ts=float(row.ts),
        action=str(row.action),
        actor=str(row.actor),
        actor_name=names.get(row.actor, str(row.actor)),
        session_id=row.session_id,
        principal_id=subject,
        principal_name=None if subject is None else names.get(subject, subject),
        toolkit_name=row.toolkit_name,
        version=row.version,
        details=details,
        mac=bytes(row.mac),
        summary="",
    )
    return _with_summary(event, names)


def _with_summary(event: TrailEvent, names: Mapping[str, str]) -> TrailEvent:
    return replace(event, summary=describe(event, names.get))


# -- in words ---------------------------------------------------------------------------------


def describe(
    event: TrailEvent,
    name: Callable[[str], str | None] = lambda _: None,
    session: Callable[[str], str] = lambda s: s,
) -> str:
    """What the event is about, in one sentence of its own fields (`session` may shorten
    session ids for a table); never raises, whatever an edited row holds."""
    try:
        said = _SAY.get(event.action)
        return said(_Words(event, name, session)) if said else event.action.replace("_", " ")
    except (TypeError, ValueError, KeyError, AttributeError):
        return event.action.replace("_", " ")


@dataclass(frozen=True)
class _Words:
    event: TrailEvent
    name: Callable[[str], str | None]
    session: Callable[[str], str]

    def d(self, key: str, default: Any = None) -> Any:
        return self.event.details.get(key, default)

    def who(self, principal_id: Any) -> str:
        text = str(principal_id)
        return self.name(text) or text

    @property
    def toolkit(self) -> str:
        return str(self.event.toolkit_name)

    @property
    def where(self) -> str:
        """`in session S` or `for principal P` (its own configs)."""
        scope = self.event.session_id
        if scope is None:
            return ""
        owner = principal_of(scope)
        if owner is not None:
            return f"for principal {self.who(owner)}"
        return f"in session {self.session(scope)}"

    def fields(self, key: str) -> str:
        items = self.d(key) or []
        return ", ".join(str(i) for i in items)

    def errors(self) -> str:
        found = []
        for item in self.d("errors") or []:
            if isinstance(item, Mapping):
                found.append(f"{item.get('pointer', '')} {item.get('keyword', '')}".strip())
        return ", ".join(found)


def _when(epoch: Any) -> str:
    return datetime.fromtimestamp(float(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _configure(w: _Words) -> str:
    status, v = w.d("status"), w.event.version
    secrets = w.fields("changed")
    tail = f"; secret fields {secrets}" if secrets else ""
    if status == "error":
        return f"{w.toolkit} v{v} {w.where} failed to initialize (status error; not current)"
    if status == "intake":
        return f"{w.toolkit} v{v} {w.where} waits for a person's intake"
    return f"configured {w.toolkit} v{v} {w.where} (status {status}){tail}"


def _refused(w: _Words) -> str:
    if w.event.toolkit_name is None:
        return f"refused a configure of an unknown toolkit {w.where}".rstrip()
    errors = w.errors()
    why = f": {errors}" if errors else f" ({w.d('reason')})"
    return f"refused an invalid config of {w.toolkit} {w.where}{why}"


def _session(w: _Words) -> str:
    scope = str(w.event.session_id)
    owner = principal_of(scope)
    if owner is not None:
        return f"principal scope of {w.who(owner)} created"
    by = w.event.principal_name
    return f"session {w.session(scope)} opened" + (f" by {by}" if by else "")


def _purge(w: _Words) -> str:
    scope = str(w.event.session_id)
    owner = principal_of(scope)
    what = (
        f"principal {w.who(owner)}'s own configs"
        if owner is not None
        else f"session {w.session(scope)}"
    )
    if w.event.toolkit_name is not None:
        what += f", toolkit {w.toolkit}"
    count = int(w.d("versions", 0))
    text = f"purged {what}: {count} version{'' if count == 1 else 's'} shredded"
    unconfigured = w.fields("unconfigured")
    return text + (f"; {unconfigured} no longer configured" if unconfigured else "")


def _intake_requested(w: _Words) -> str:
    missing = w.fields("missing")
    text = f"intake link for {w.toolkit} {w.where} issued"
    if missing:
        text += f", asking for {missing}"
    if w.d("expires_at") is not None:
        text += f"; expires {_when(w.d('expires_at'))}"
    return text


def _intake_refused(w: _Words) -> str:
    errors = w.errors()
    return f"intake form for {w.toolkit} {w.where} refused" + (f": {errors}" if errors else "")


def _intake_completed(w: _Words) -> str:
    return f"intake for {w.toolkit} {w.where} completed (status {w.d('status')})"


def _oauth_connected(w: _Words) -> str:
    return f"{w.toolkit} {w.where} connected at {w.d('issuer')} (scope {w.d('scope')})"


def _oauth_callback_refused(w: _Words) -> str:
    return (
        f"refused an authorization response for {w.toolkit} {w.where} ({w.d('reason')}): "
        f"not from {w.d('issuer')}, the server the connection was started with; no code "
        "exchanged"
    )


def _oauth_refreshed(w: _Words) -> str:
    rotated = " and rotated its refresh token" if w.d("refresh_token_rotated") else ""
    return f"refreshed the OAuth token of {w.toolkit} v{w.event.version} {w.where}{rotated}"


def _oauth_refresh_failed(w: _Words) -> str:
    return (
        f"{w.d('issuer')} refused to refresh {w.toolkit} {w.where} ({w.d('error')}): "
        "a person must connect again"
    )


def _oauth_disconnected(w: _Words) -> str:
    return f"revoked the OAuth tokens of {w.toolkit} {w.where} at {w.d('issuer')}"


def _token_created(w: _Words) -> str:
    text = f"token created for {w.d('name') or w.who(w.d('principal_id'))} ({w.d('role')})"
    if w.d("expires_at") is not None:
        text += f", expires {_when(w.d('expires_at'))}"
    return text


def _token_revoked(w: _Words) -> str:
    return f"token revoked for {w.event.principal_name or w.who(w.d('principal_id'))}"


def _overrides(w: _Words) -> str:
    said = []
    for item in w.d("overrides") or []:
        if isinstance(item, Mapping):
            flag = "--secret" if item.get("secret") else "--public"
            said.append(f"{flag} {item.get('field')}")
    return ", ".join(said)


def _imported(w: _Words) -> str:
    text = f"imported toolkit {w.toolkit}"
    if w.d("renamed_from"):
        text += f" (renamed from {w.d('renamed_from')})"
    if w.d("previous_digest"):
        text += ", replacing the earlier import"
    overrides = _overrides(w)
    if overrides:
        text += f" with overrides {overrides}"
    secrets = w.fields("secret_fields")
    return text + f"; secret fields {secrets or 'none'}"


def _removed(w: _Words) -> str:
    count = len(w.d("unconfigured") or [])
    text = f"removed imported toolkit {w.toolkit}"
    return text + (f"; unconfigured in {count} scope{'' if count == 1 else 's'}" if count else "")


def _key_added(w: _Words) -> str:
    key = w.d("key_id") or w.d("kek_id")
    under = f" under master key {w.d('master_key')}" if w.d("master_key") else ""
    provider = f" ({w.d('provider')} provider)" if w.d("provider") else ""
    return f"vault key {key} added{under}{provider}"


def _initialized(w: _Words) -> str:
    return "vault initialized: " + _key_added(w)


def _rotated(w: _Words) -> str:
    failed = int(w.d("failed", 0))
    text = f"vault key rotated: {w.d('active')} active, {w.d('rewrapped')} data keys rewrapped"
    return text + (f", {failed} failed" if failed else "")


def _master_rotated(w: _Words) -> str:
    return f"master key rotated to {w.d('master_key')}; {w.d('vault_keys')} vault keys rewrapped"


def _upgraded(w: _Words) -> str:
    return (
        f"key hierarchy upgrade: {w.d('rewrapped')} data keys moved under vault key "
        f"{w.d('vault_key')}"
    )


def _authenticated(w: _Words) -> str:
    signed = w.d("signed") or {}
    count = sum(int(n) for n in signed.values()) if isinstance(signed, Mapping) else 0
    return f"stored rows signed under the state key: {count}; {w.d('left_unsigned')} left unsigned"


def _restore(w: _Words) -> str:
    return (
        f"restore accepted: the witness moved from event {w.d('witness_seq')} "
        f"to {w.d('database_seq')}"
    )


_SAY: dict[str, Callable[[_Words], str]] = {
    AuditAction.CONFIGURE: _configure,
    AuditAction.CONFIGURE_REFUSED: _refused,
    AuditAction.SESSION_CREATED: _session,
    AuditAction.PURGE: _purge,
    AuditAction.INTAKE_REQUESTED: _intake_requested,
    AuditAction.INTAKE_REFUSED: _intake_refused,
    AuditAction.INTAKE_COMPLETED: _intake_completed,
    AuditAction.OAUTH_CONNECTED: _oauth_connected,
    AuditAction.OAUTH_CALLBACK_REFUSED: _oauth_callback_refused,
    AuditAction.OAUTH_REFRESHED: _oauth_refreshed,
    AuditAction.OAUTH_REFRESH_FAILED: _oauth_refresh_failed,
    AuditAction.OAUTH_DISCONNECTED: _oauth_disconnected,
    AuditAction.CREDENTIAL_EXPIRING: lambda w: (
        f"the credential of {w.toolkit} v{w.event.version} {w.where} ends at "
        f"{_when(w.d('expires_at'))}"
    ),
    AuditAction.TOKEN_CREATED: _token_created,
    AuditAction.TOKEN_REVOKED: _token_revoked,
    AuditAction.TOOLKIT_IMPORTED: _imported,
    AuditAction.TOOLKIT_REMOVED: _removed,
    AuditAction.VAULT_INITIALIZED: _initialized,
    AuditAction.VAULT_KEY_ADDED: _key_added,
    AuditAction.VAULT_KEY_ROTATED: _rotated,
    AuditAction.VAULT_KEY_RETIRED: lambda w: f"vault key {w.d('key_id')} retired",
    AuditAction.INTERNAL_KEY_ADDED: lambda w: f"internal {w.d('name')} key added",
    AuditAction.MASTER_KEY_ROTATED: _master_rotated,
    AuditAction.MASTER_KEY_RETIRED: lambda w: f"master key {w.d('master_key')} retired",
    AuditAction.KEK_ADDED: lambda w: f"master key {w.d('kek_id')} added",
    AuditAction.KEK_RETIRED: lambda w: f"master key {w.d('kek_id')} retired",
    AuditAction.STATE_AUTHENTICATED: _authenticated,
    AuditAction.KEY_HIERARCHY_UPGRADED: _upgraded,
    AuditAction.RESTORE_ACCEPTED: _restore,
}


def actions() -> Sequence[str]:
    """Every action's stored text, for a filter's choices."""
    return [a.value for a in AuditAction]
