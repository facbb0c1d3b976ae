"""`reconcile`'s rule for config versions: each version row against its `configure` event
and the state the verified chain makes.

It reads every version row with its event (100,000 rows in the issue's vault), so the rows
are read as plain tuples: on SQLite, on the driver's own cursor in the snapshot's
transaction (`driver._OnDriver`; SQLAlchemy converts none of these columns there), where
SQLAlchemy's rows, their attribute reads and a `groupby` cost about as much as the join
itself; elsewhere as SQLAlchemy's rows, a batch at a time (a server-side cursor). Each
row is handed on as a plain dict, which the row MAC and the version's opening read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import closing
from typing import Any, Literal

from sqlalchemy import Connection, and_, case, exists, func, or_, select

from toolkit_vault.canonical import parse_json
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.driver import _OnDriver, batches
from toolkit_vault.store.integrity import Row
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.models import AuditEvent, ConfigVersion

__all__ = ["Finding", "Kind", "VersionKey", "versions_rule"]

Kind = Literal["unauthenticated", "replayed", "deleted", "unaudited"]
VersionKey = tuple[str, str, int]  # (session, toolkit, version)
Finding = tuple[Row | None, str | VersionKey, tuple[Kind, str] | None]

_CONFIGURE = and_(
    AuditEvent.action == AuditAction.CONFIGURE,
    AuditEvent.session_id == ConfigVersion.session_id,
    AuditEvent.toolkit_name == ConfigVersion.toolkit_name,
    AuditEvent.version == ConfigVersion.version,
)


def _query() -> Any:
    purge = AuditEvent.__table__.alias().c  # its own FROM, never correlated with the joined one
    purged_audited = exists().where(
        # wrapped: bare, SQLite looks the event up by `ix_audit_events_action` and scans
        # every purge for each row; wrapped it takes `ix_audit_events_session`
        func.coalesce(purge.action, "") == AuditAction.PURGE,
        purge.session_id == ConfigVersion.session_id,
        or_(purge.toolkit_name.is_(None), purge.toolkit_name == ConfigVersion.toolkit_name),
    )
    return (
        select(
            ConfigVersion,  # whole: the upgrade's backfill reads the sealed half too
            AuditEvent.actor.label("event_actor"),
            AuditEvent.details.label("event_details"),
            # asked of purged rows only (`_disagreement`): SQLite's CASE runs it for them alone
            case((ConfigVersion.status == "purged", purged_audited), else_=None).label(
                "purge_audited"
            ),
        )
        .outerjoin(AuditEvent, _CONFIGURE)
        .order_by(ConfigVersion.id)
    )


_QUERY = _query()
_NAMES = tuple(_QUERY.selected_columns.keys())
_ON_DRIVER = _OnDriver(_QUERY)
_ID, _SESSION, _TOOLKIT, _VERSION, _STATUS, _ACTOR = (
    _NAMES.index(name)
    for name in ("id", "session_id", "toolkit_name", "version", "status", "actor")
)
_EVENT_ACTOR, _EVENT_DETAILS, _PURGE_AUDITED = (
    _NAMES.index(name) for name in ("event_actor", "event_details", "purge_audited")
)


def _batches(conn: Connection, batch_size: int) -> Iterator[Sequence[Sequence[Any]]]:
    """The query's rows, `batch_size` at a time, as tuples (or rows that index like them)."""
    if conn.dialect.name == "sqlite":
        yield from batches(_ON_DRIVER(conn, {}), batch_size)
        return
    query = _QUERY.execution_options(yield_per=batch_size)
    with closing(conn.execute(query)) as result:
        yield from result.partitions()


def versions_rule(conn: Connection, batch_size: int, chain: ChainState) -> Iterator[Finding]:
    """Versions whose `configure` event is missing or disagrees (actor, status), purged
    versions with no `purge` event, versions the chain purged that hold a live row again,
    and `configure` events whose version is gone. A version joined to more than one
    `configure` event comes as adjacent rows (ordered by id): it holds if any of them does."""
    group: list[Sequence[Any]] = []
    for rows in _batches(conn, batch_size):
        for row in rows:
            if group and group[0][_ID] != row[_ID]:
                yield _finding(group, chain)
                group = []
            group.append(row)
    if group:
        yield _finding(group, chain)
    gone = (
        select(AuditEvent.session_id, AuditEvent.toolkit_name, AuditEvent.version)
        .outerjoin(ConfigVersion, _CONFIGURE)
        .where(AuditEvent.action == AuditAction.CONFIGURE, ConfigVersion.id.is_(None))
        .order_by(AuditEvent.seq)
    )
    for event in conn.execute(gone):
        detail = "its configure event is in the audit chain; the row is gone"
        yield None, (event[0], event[1], event[2]), ("deleted", detail)


def _finding(group: list[Sequence[Any]], chain: ChainState) -> Finding:
    first = group[0]
    found: tuple[Kind, str] | None = None
    reason = _disagreement(first)
    if reason is not None and all(_disagreement(row) for row in group[1:]):
        found = ("unaudited", reason)
    name = (first[_SESSION], first[_TOOLKIT], first[_VERSION])
    if found is None and chain.was_purged(*name) and first[_STATUS] != "purged":
        found = ("replayed", "the audit chain purged this version; its row was put back")
    return dict(zip(_NAMES, first, strict=True)), name, found


def _disagreement(row: Sequence[Any]) -> str | None:
    if row[_EVENT_ACTOR] is None:
        return "no configure event"
    if row[_EVENT_ACTOR] != row[_ACTOR]:
        return "actor differs from its configure event"
    if row[_STATUS] == "purged":
        return None if row[_PURGE_AUDITED] else "purged without a purge event"
    try:
        status = parse_json(row[_EVENT_DETAILS]).get("status")
    except (ValueError, AttributeError):
        status = None
    return None if status == row[_STATUS] else "status differs from its configure event"
