"""Audit chain verification: find the first event that was edited, inserted or deleted.

Every event's `mac` is HMAC(audit key, previous mac || canonical event), and the one-row
`audit_head` holds an HMAC over the last (seq, mac), written in the same transaction as
each event. Walking the events in `seq` order from `CHAIN_START` therefore proves every
event up to the head; the head proves nothing after it was cut off. The walk streams the
table and reads one snapshot, so a vault that is being written to still verifies.

The chain alone cannot tell that a config version was written without its event (a row
forged straight into `config_versions`), so versions are cross-checked against their
`configure` events too. Nothing here reads a secret: events carry none.
"""

from __future__ import annotations

import hmac
import itertools
import json
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from sqlalchemy import Connection, and_, exists, func, or_, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import aliased

from . import crypto
from .chain import CHAIN_START, Signer, audit_payload, head_link
from .crypto import SecretBytes
from .errors import StoreError
from .models import AuditEvent, AuditHead, ConfigVersion
from .storage import Store

__all__ = ["AuditReport", "Problem", "verify_audit_chain"]

Problem = Literal["edited", "deleted", "inserted", "truncated", "unaudited"]
BATCH_SIZE = 1000
MAX_LISTED = 100  # unaudited versions named in a report; the count covers all of them


@dataclass(frozen=True)
class AuditReport:
    """The outcome of one verification; `as_json` is the documented, stable shape."""

    ok: bool
    events: int
    verified: int
    head_seq: int | None
    first_bad_seq: int | None
    problem: Problem | None
    message: str
    unaudited_versions: list[dict[str, Any]] = field(default_factory=list)
    unaudited_count: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events": self.events,
            "verified": self.verified,
            "head_seq": self.head_seq,
            "first_bad_seq": self.first_bad_seq,
            "problem": self.problem,
            "message": self.message,
            "unaudited_versions": self.unaudited_versions,
            "unaudited_count": self.unaudited_count,
        }


_WHAT = {
    "edited": "edited (its MAC does not match its content)",
    "inserted": "inserted (it is not part of the signed chain)",
}


@dataclass(frozen=True)
class _Break:
    seq: int
    problem: Problem
    message: str


def verify_audit_chain(
    store: Store, audit_key: SecretBytes, *, batch_size: int = BATCH_SIZE
) -> AuditReport:
    """Walk the whole chain and its head, then cross-check config versions."""
    sign: Signer = partial(crypto.chain_hash, audit_key)
    with _snapshot(store) as conn:
        head = conn.execute(select(AuditHead).where(AuditHead.id == 1)).first()
        head_ok = head is not None and hmac.compare_digest(
            head_link(sign, head.seq, bytes(head.mac)), bytes(head.head_mac)
        )
        trusted_head = head.seq if head is not None and head_ok else None
        total = conn.execute(select(func.count()).select_from(AuditEvent)).scalar_one()
        verified, last_mac, broken = _walk(conn, sign, trusted_head, batch_size)
        if broken is None:
            broken = _check_head(head, head_ok, verified, last_mac)
        unaudited, count = _cross_check(conn, batch_size)
    if broken is not None:
        problem: Problem | None = broken.problem
        message = broken.message
    elif count:
        problem, message = "unaudited", f"{count} config versions have no matching audit event"
    else:
        problem, message = None, f"all {verified} audit events verify up to the chain head"
    return AuditReport(
        ok=problem is None,
        events=int(total),
        verified=verified,
        head_seq=None if head is None else int(head.seq),
        first_bad_seq=None if broken is None else broken.seq,
        problem=problem,
        message=message,
        unaudited_versions=unaudited,
        unaudited_count=count,
    )


@contextmanager
def _snapshot(store: Store) -> Iterator[Connection]:
    """One read-only snapshot: the head and the events it covers are read consistently."""
    try:
        with store.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn = conn.execution_options(
                    isolation_level="REPEATABLE READ", postgresql_readonly=True
                )
            with conn.begin():
                yield conn
    except OperationalError as exc:
        raise StoreError(f"the database refused the read ({type(exc.orig).__name__})") from None


def _links(sign: Signer, previous: bytes, event: Mapping[str, Any]) -> bool:
    try:
        payload = audit_payload(event)
    except (ValueError, TypeError, KeyError):
        return False  # details no longer JSON, a float out of range: edited
    return hmac.compare_digest(sign(previous, payload), bytes(event["mac"]))


def _walk(
    conn: Connection, sign: Signer, trusted_head: int | None, batch_size: int
) -> tuple[int, bytes, _Break | None]:
    """Verify every link in seq order, streamed; stop at the first that does not hold.

    Returns how many events verified (they are 1..n), the last good link, and the break.
    """
    query = select(AuditEvent).order_by(AuditEvent.seq).execution_options(yield_per=batch_size)
    good, previous = 0, CHAIN_START
    with closing(conn.execute(query)) as result:
        rows = (dict(row._mapping) for row in result)
        for event in rows:
            seq = event["seq"]
            if seq <= good:
                return good, previous, _Break(seq, "inserted", f"event {seq} is out of sequence")
            if seq > good + 1:
                gap = f"event {good + 1} was deleted (the chain jumps to {seq})"
                return good, previous, _Break(good + 1, "deleted", gap)
            if not _links(sign, previous, event):
                problem = _classify(sign, previous, event, next(rows, None), trusted_head)
                what = _WHAT[problem]
                return good, previous, _Break(seq, problem, f"event {seq} was {what}")
            previous, good = bytes(event["mac"]), seq
    return good, previous, None


def _classify(
    sign: Signer,
    previous: bytes,
    event: Mapping[str, Any],
    following: Mapping[str, Any] | None,
    trusted_head: int | None,
) -> Problem:
    """Edited keeps its stored link (the next event chains from it); inserted does not."""
    seq = event["seq"]
    if trusted_head is not None and seq > trusted_head:
        return "inserted"
    if following is not None and following["seq"] == seq + 1:
        if _links(sign, bytes(event["mac"]), following):
            return "edited"
        if _links(sign, previous, {**following, "seq": seq}):
            return "inserted"  # the next event is the original of this seq, renumbered
    return "edited"


def _check_head(head: Any, head_ok: bool, last_seq: int, last_mac: bytes) -> _Break | None:
    """The walk proved events 1..last_seq; the head says where the chain must end."""
    if head is None:
        what = "the chain is empty" if last_seq == 0 else "the chain head is missing"
        return _Break(last_seq + 1, "truncated", f"{what}: the end of the chain is unproven")
    if not head_ok:
        return _Break(
            last_seq + 1, "truncated", "the chain head fails its MAC: the end is unproven"
        )
    if head.seq > last_seq:
        return _Break(
            last_seq + 1,
            "truncated",
            f"events {last_seq + 1}..{head.seq} were deleted (the head records {head.seq})",
        )
    if head.seq < last_seq:
        return _Break(
            head.seq + 1, "inserted", f"events after {head.seq} are not covered by the head"
        )
    if not hmac.compare_digest(bytes(head.mac), last_mac):
        return _Break(last_seq, "edited", f"event {last_seq} does not match the chain head")
    return None


def _cross_check(conn: Connection, batch_size: int) -> tuple[list[dict[str, Any]], int]:
    """Config versions whose `configure` event is missing or disagrees (actor, status),
    and purged versions with no `purge` event for their session."""
    configure = and_(
        AuditEvent.action == "configure",
        AuditEvent.session_id == ConfigVersion.session_id,
        AuditEvent.toolkit_name == ConfigVersion.toolkit_name,
        AuditEvent.version == ConfigVersion.version,
    )
    purge = aliased(AuditEvent)  # its own FROM, never correlated with the joined event
    purged_audited = exists().where(
        purge.action == "purge",
        purge.session_id == ConfigVersion.session_id,
        or_(purge.toolkit_name.is_(None), purge.toolkit_name == ConfigVersion.toolkit_name),
    )
    query = (
        select(
            ConfigVersion.id,
            ConfigVersion.session_id,
            ConfigVersion.toolkit_name,
            ConfigVersion.version,
            ConfigVersion.status,
            ConfigVersion.actor,
            AuditEvent.actor.label("event_actor"),
            AuditEvent.details.label("event_details"),
            purged_audited.label("purge_audited"),
        )
        .outerjoin(AuditEvent, configure)
        .order_by(ConfigVersion.id)
        .execution_options(yield_per=batch_size)
    )
    listed: list[dict[str, Any]] = []
    count = 0
    with closing(conn.execute(query)) as result:
        for _, group in itertools.groupby(result, key=lambda row: row.id):
            rows = list(group)
            reasons = [_disagreement(row) for row in rows]
            if all(reasons):
                count += 1
                if len(listed) < MAX_LISTED:
                    first = rows[0]
                    listed.append(
                        {
                            "session_id": first.session_id,
                            "toolkit_name": first.toolkit_name,
                            "version": first.version,
                            "reason": reasons[0],
                        }
                    )
    return listed, count


def _disagreement(row: Any) -> str | None:
    if row.event_actor is None:
        return "no configure event"
    if row.event_actor != row.actor:
        return "actor differs from its configure event"
    if row.status == "purged":
        return None if row.purge_audited else "purged without a purge event"
    try:
        status = json.loads(row.event_details).get("status")
    except (ValueError, AttributeError):
        status = None
    return None if status == row.status else "status differs from its configure event"
