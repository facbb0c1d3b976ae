"""The audit trail's reads: events by typed filter and cursor, with whom each is about.

The trail (`audit.trail`) checks what a reader typed and turns names into ids; these
operations take that checked `TrailQuery` and speak SQL. An event is about a principal
(its `subject`): the principal a token or allowance event names in its details, else the
owner of its session or principal scope. The principal filter keeps exactly the events
whose subject is that id, compared as text after the details are parsed, never by matching
a JSON spelling in SQL (a name holding `%`, `_` or a quoted `"principal_id"` could match
another's).

Pages follow `seq`, the chain's order; a query for calls alone (`calls_only`) reads the
call chains' records (`call_chains`) instead, paged by where each was written (`id`).
Reading proves nothing: `audit verify` proves the chains.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, func, or_, select

from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.ledger import details_of
from toolkit_vault.store.models import AuditEvent, CallRecordRow, PrincipalRow, SessionRow
from toolkit_vault.store.scopes import principal_of, principal_scope
from toolkit_vault.store.storage import Store

__all__ = [
    "TOKEN_EVENTS",
    "TrailQuery",
    "TrailRow",
    "TrailRows",
    "actor_appears",
    "calls_only",
    "last_seq",
    "principal_known",
    "trail_page",
]

TOKEN_EVENTS = (AuditAction.TOKEN_CREATED, AuditAction.TOKEN_REVOKED)
# Events about the principal their details name (`principal_id`), not about a scope.
NAMING_A_PRINCIPAL = (*TOKEN_EVENTS, AuditAction.ALLOWANCE_SET, AuditAction.ALLOWANCE_REMOVED)
_INTAKE_ACTOR = "intake:"
_PERSON_ID = re.compile(r"oidc-[0-9a-f]{32}")  # `core.people.person_id`
_MADE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # uuid4


@dataclass(frozen=True)
class TrailQuery:
    """What a page keeps, already checked: every field optional, all of them must hold.
    `actors` are stored actor strings; `principal` is a principal id; `until` excludes its
    moment."""

    actions: tuple[str, ...] = ()
    actors: tuple[str, ...] = ()
    session: str | None = None
    principal: str | None = None
    toolkit: str | None = None
    since: float | None = None
    until: float | None = None
    arguments_hmac: str | None = None  # `tool_called` events of these arguments (64 hex)


@dataclass(frozen=True)
class TrailRow:
    """One audit event as stored, and its subject (whom it is about, None: no one)."""

    seq: int
    ts: float
    action: str
    actor: str
    session_id: str | None
    toolkit_name: str | None
    version: int | None
    details: dict[str, Any]
    mac: bytes
    subject: str | None
    chain: str | None = None  # a call record's chain, and its place there (`chain_seq`)
    chain_seq: int | None = None


@dataclass(frozen=True)
class TrailRows:
    rows: list[TrailRow]
    next: int | None  # the seq of the last row when more follow, else None
    names: dict[str, str]  # id -> name for the actors and subjects of `rows`


def calls_only(query: TrailQuery) -> bool:
    """Whether `query` keeps tool calls alone, which the call chains hold."""
    return query.arguments_hmac is not None or query.actions == (AuditAction.TOOL_CALLED.value,)


def last_seq(store: Store, query: TrailQuery | None = None) -> int:
    """The chain's last sequence number (0 when empty), or the last call record's place
    when `query` keeps calls alone: one indexed read."""
    position = CallRecordRow.id if query is not None and calls_only(query) else AuditEvent.seq
    with store.read() as conn:
        found = conn.execute(select(func.max(position))).scalar()
    return int(found or 0)


def principal_known(store: Store, typed: str) -> str | None:
    """The id of the principal `typed` names (its id or name), of one whose row is gone
    that a `token_created` event still names, or of a person who signed in through the
    identity provider; None when none."""
    with store.read() as conn:
        found = conn.execute(
            select(PrincipalRow.principal_id).where(
                or_(PrincipalRow.principal_id == typed, PrincipalRow.name == typed)
            )
        ).scalar()
        if found is None:  # a principal whose row is gone: the chain still names it
            for details in _tokens_created(conn):
                if typed in (details.get("principal_id"), details.get("name")):
                    found = details.get("principal_id")
        if found is None:  # a person, by id or by a name they signed in with (the latest)
            signed_in = conn.execute(
                select(AuditEvent.actor, AuditEvent.details)
                .where(AuditEvent.action == AuditAction.PERSON_SIGNED_IN.value)
                .order_by(AuditEvent.seq.desc())
            )
            for row in signed_in:
                if typed in (row.actor, details_of(row.details).get("name")):
                    found = row.actor
                    break
    return found if isinstance(found, str) else None


def actor_appears(store: Store, actor: str) -> bool:
    """Whether any event has `actor` as its stored actor."""
    with store.read() as conn:
        acted = conn.execute(select(AuditEvent.seq).where(AuditEvent.actor == actor).limit(1))
        return acted.first() is not None


def trail_page(
    store: Store,
    query: TrailQuery,
    *,
    after: int = 0,
    before: int | None = None,
    limit: int,
    newest: bool = False,
    upto: int | None = None,
) -> TrailRows:
    """At most `limit` matching events: after `after` going up, or (`newest`) down from
    the newest or from `before`; never past `upto`. The principal filter is applied to
    each event's subject, reading on until the page is full or the chain ends."""
    kept: list[TrailRow] = []
    more = False
    with store.read() as conn:
        while True:
            statement = _statement(query, after=after, before=before, newest=newest, upto=upto)
            rows = conn.execute(statement.limit(limit + 1)).all()
            calls = calls_only(query)
            for row in rows:
                event = _row(row, calls=calls)
                if _keeps(query, event):
                    kept.append(event)
            exact = query.principal is None and query.arguments_hmac is None
            more = len(kept) > limit or (exact and len(rows) > limit)
            if more or len(rows) <= limit:
                break
            # every row read, a page not full: read on past it
            last = int(rows[-1].id if calls else rows[-1].seq)
            after, before = (after, last) if newest else (last, before)
        kept = kept[:limit]
        wanted = {event.actor for event in kept} | {e.subject for e in kept if e.subject}
        names = _names(conn, wanted)
    return TrailRows(kept, kept[-1].seq if more and kept else None, names)


def _statement(
    f: TrailQuery, *, after: int, before: int | None, newest: bool, upto: int | None
) -> Select[Any, str]:
    table: Any = CallRecordRow if calls_only(f) else AuditEvent  # the same columns, but `id`
    position = table.id if table is CallRecordRow else table.seq
    query = select(table, SessionRow.principal_id.label("owner")).outerjoin(
        SessionRow, SessionRow.session_id == table.session_id
    )
    if f.actions:
        query = query.where(table.action.in_(f.actions))
    if f.actors:
        query = query.where(table.actor.in_(f.actors))
    if f.session is not None:
        query = query.where(table.session_id == f.session)
    if f.toolkit is not None:
        query = query.where(table.toolkit_name == f.toolkit)
    if f.principal is not None:  # a superset; `trail_page` keeps those whose subject it is
        query = query.where(
            or_(
                SessionRow.principal_id == f.principal,
                table.session_id == principal_scope(f.principal),
                table.action.in_([a.value for a in NAMING_A_PRINCIPAL]),
            )
        )
    if f.arguments_hmac is not None:  # a superset; `trail_page` compares the parsed details
        query = query.where(
            table.action == AuditAction.TOOL_CALLED.value,
            table.details.like(f'%"arguments_hmac": "{_like(f.arguments_hmac)}"%', "\\"),
        )
    if f.since is not None:
        query = query.where(table.ts >= f.since)
    if f.until is not None:
        query = query.where(table.ts < f.until)
    if newest:
        if before is not None:
            query = query.where(position < before)
        query = query.order_by(position.desc())
    else:
        query = query.where(position > after).order_by(position)
    if upto is not None:
        query = query.where(position <= upto)
    return query


def _keeps(query: TrailQuery, event: TrailRow) -> bool:
    """The filters SQL only narrows, decided on the parsed event."""
    if query.principal is not None and event.subject != query.principal:
        return False
    hashed = query.arguments_hmac
    return hashed is None or event.details.get("arguments_hmac") == hashed


def _row(row: Any, *, calls: bool = False) -> TrailRow:
    details = details_of(row.details)
    return TrailRow(
        seq=int(row.id if calls else row.seq),
        ts=float(row.ts),
        action=str(row.action),
        actor=str(row.actor),
        session_id=row.session_id,
        toolkit_name=row.toolkit_name,
        version=row.version,
        details=details,
        mac=bytes(row.mac),
        subject=_subject(row, details),
        chain=row.chain if calls else None,
        chain_seq=int(row.seq) if calls else None,
    )


def _subject(row: Any, details: dict[str, Any]) -> str | None:
    """Whom an event is about: the principal a token or allowance event names, else its
    scope's owner."""
    if row.action in NAMING_A_PRINCIPAL:
        named = details.get("principal_id")
        return named if isinstance(named, str) else None
    if row.session_id is None:
        return None
    owner = row.owner if isinstance(row.owner, str) else principal_of(row.session_id)
    return owner


def _tokens_created(conn: Connection) -> list[dict[str, Any]]:
    """The details of every `token_created` event, oldest first (a rare, slower read)."""
    query = (
        select(AuditEvent.details)
        .where(AuditEvent.action == AuditAction.TOKEN_CREATED.value)
        .order_by(AuditEvent.seq)
    )
    return [details_of(text) for text in conn.execute(query).scalars()]


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _names(conn: Connection, ids: Iterable[str]) -> dict[str, str]:
    """Names by principal id (a person's from their sign-ins); `intake:<link>` actors as
    the intake of whoever asked."""
    wanted = set(ids)
    links = {i for i in wanted if i.startswith(_INTAKE_ACTOR)}
    asked: dict[str, str] = {}
    for actor in links:
        link = actor[len(_INTAKE_ACTOR) :]
        found = conn.execute(
            select(AuditEvent.actor, AuditEvent.details).where(
                AuditEvent.action == AuditAction.INTAKE_REQUESTED.value,
                AuditEvent.details.like(f'%"link_id": "{_like(link)}"%', escape="\\"),
            )
        ).all()
        for row in found:  # the pattern narrows; the parsed details decide
            if details_of(row.details).get("link_id") == link and isinstance(row.actor, str):
                asked[actor] = row.actor
                break
    principals = (wanted - links) | set(asked.values())
    names: dict[str, str] = {}
    if principals:
        rows = conn.execute(
            select(PrincipalRow.principal_id, PrincipalRow.name).where(
                PrincipalRow.principal_id.in_(sorted(principals))
            )
        )
        names = {row.principal_id: row.name for row in rows}
    people = sorted(i for i in principals - set(names) if _PERSON_ID.fullmatch(i))
    if people:  # people signed in through the identity provider: the name they last had
        signed_in = conn.execute(
            select(AuditEvent.actor, AuditEvent.details)
            .where(
                AuditEvent.action == AuditAction.PERSON_SIGNED_IN.value,
                AuditEvent.actor.in_(people),
            )
            .order_by(AuditEvent.seq)
        )
        for row in signed_in:
            name = details_of(row.details).get("name")
            if isinstance(name, str):
                names[row.actor] = name
    gone = _gone(principals - set(names))
    if gone:  # rows gone: the chain remembers the names it gave
        for details in _tokens_created(conn):
            pid, name = details.get("principal_id"), details.get("name")
            if isinstance(pid, str) and pid in gone and pid not in names and isinstance(name, str):
                names[pid] = name
    for actor, principal in asked.items():
        names[actor] = f"intake link of {names.get(principal, principal)}"
    return names


def _gone(ids: Iterable[str]) -> Sequence[str]:
    return sorted(i for i in ids if _MADE_ID.fullmatch(i))
