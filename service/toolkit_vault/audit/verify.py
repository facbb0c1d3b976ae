"""Audit chain verification: find the first event that was edited, inserted or deleted.

Tool calls' records are on chains of their own, one per process, anchored in the main
chain: `call_verify` walks them in the same snapshot, and a break there fails the report.

Every event's `mac` is HMAC(audit key, previous mac || canonical event), and the one-row
`audit_head` holds an HMAC over the last (seq, mac), written in the same transaction as
each event. Walking the events in `seq` order from `CHAIN_START` therefore proves every
event up to the head; the head proves nothing after it was cut off. The walk streams the
table and reads one snapshot, so a vault that is being written to still verifies. The
links are checked in batches, by worker processes on a large walk (`walk`).

A run whose chains verify leaves a mark in the home (`store.verified`): the chain's length,
its last link, each call chain's and the state the chain makes, MACed under the audit key.
The next run (unless `full`) believes it only when its MAC holds and this snapshot still
agrees (the same link at its seq, no event missing below it), and walks only the events
after it, starting the state from the mark's. Otherwise it says why and walks everything.
What that proves and does not is in SECURITY.md: events before the mark are not read
again, so an edit of one made since is found only by a full run.

The chain alone cannot tell a row forged, replayed from an older copy or deleted behind its
back, so every authenticated table is then reconciled with the verified chain (`reconcile`):
each such row is named. Nothing here reads a secret: events carry none.
"""

from __future__ import annotations

import dataclasses
import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from toolkit_vault import crypto
from toolkit_vault.audit.call_verify import CallChainsReport, verify_call_chains
from toolkit_vault.audit.walk import Break as _Break
from toolkit_vault.audit.walk import ChainWalk as _Walk
from toolkit_vault.audit.walk import Problem
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import StoreError
from toolkit_vault.store.chain import CHAIN_START, Signer, head_link
from toolkit_vault.store.chain_snapshot import ChainHead, ChainSnapshot, chain_snapshot
from toolkit_vault.store.integrity import RECOVERY, VERSIONS, Row, recovery_wrap_opens
from toolkit_vault.store.ledger import ChainState, behind
from toolkit_vault.store.reconcile import StateProblem, StateReport
from toolkit_vault.store.storage import Store
from toolkit_vault.store.verified import AUDIT, Mark, MarkRefused, mark_path, read_mark, write_mark

__all__ = ["AuditReport", "Problem", "VersionsFor", "verify_audit_chain"]

BATCH_SIZE = 5000
# given the state the verified walk made (None: it broke), what sees each version row
VersionsFor = Callable[[ChainState | None], Callable[[Row, bool], None] | None]


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
    state_problems: list[StateProblem] = field(default_factory=list)
    state_problem_count: int = 0
    witness_warning: str | None = None  # a damaged witness slot (`Store.witness_damage`)
    calls: CallChainsReport | None = None  # the call chains (`call_verify`)
    since: int = 0  # events 1..since were taken from the last run's mark, not walked
    full: bool = True  # whether every event was walked
    mark_refused: str | None = None  # why the last run's mark was not believed
    # the state the verified chain makes (None when it broke): `backup verify` holds the
    # versions to it without a second walk
    chain_state: ChainState | None = field(default=None, repr=False, compare=False)

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
            "state_problems": [p.as_json() for p in self.state_problems],
            "state_problem_count": self.state_problem_count,
            "witness_warning": self.witness_warning,
            "call_records": None if self.calls is None else self.calls.as_json(),
            "since": self.since,
            "full": self.full,
            "mark_refused": self.mark_refused,
        }


def verify_audit_chain(
    store: Store,
    audit_key: SecretBytes,
    *,
    recovery: SecretBytes | None = None,
    batch_size: int = BATCH_SIZE,
    full: bool = False,
    versions: VersionsFor | None = None,
) -> AuditReport:
    """Walk the chain and its head, then reconcile the stored state with it. Recovery
    wraps are authentic when they open under `recovery`, the vault's recovery key (None:
    the vault holds none, and no wrap is believed). Without `full`, the walk starts after
    the last run's mark when it is believed (`store.verified`), and a run whose chains
    verify leaves a new one. `versions`: asked, once the walk is done, for what to hand
    each config version row the reconciliation reads (with its MAC's verdict), given the
    state the verified chain makes (None: the walk broke); it may answer None."""

    def authentic(table: str, row: Row) -> bool:
        if table == RECOVERY:
            return recovery_wrap_opens(recovery, row)
        return store.authentic(table, row)

    return _verify(
        store, audit_key, authentic, batch_size, full=full, remember=True, versions=versions
    )


def verify_chain_only(store: Store, audit_key: SecretBytes) -> AuditReport:
    """The walk alone, with every row taken as authentic: what the upgrade backfill asks
    before it trusts the chain to decide which rows to sign."""
    return _verify(
        store, audit_key, lambda _table, _row: True, BATCH_SIZE, full=True, remember=False
    )


def _verify(
    store: Store,
    audit_key: SecretBytes,
    authentic: Callable[[str, Row], bool],
    batch_size: int,
    *,
    full: bool,
    remember: bool,
    versions: VersionsFor | None = None,
) -> AuditReport:
    sign: Signer = partial(crypto.chain_hash, audit_key)
    path = mark_path(store, AUDIT) if remember else None
    mark, refused = None, None
    if not full:
        try:
            mark = read_mark(path, AUDIT, sign)
        except MarkRefused as exc:
            refused = str(exc)
    with chain_snapshot(store) as snapshot:
        head = snapshot.head()
        head_ok = head is not None and hmac.compare_digest(
            head_link(sign, head.seq, head.mac), head.head_mac
        )
        trusted_head = head.seq if head is not None and head_ok else None
        total = snapshot.event_count()
        if mark is not None and (why := _disbelieved(snapshot, mark)) is not None:
            mark, refused = None, why
        since = 0 if mark is None else mark.seq
        # the mark's state is its own, decoded from the file for this run: the walk goes on
        # from it in place (a deep copy of it was a tenth of an incremental run at 1M)
        made = ChainState() if mark is None or mark.state is None else mark.state
        walk = _Walk(snapshot, audit_key.reveal(), sign, trusted_head, made)
        verified, last_mac, broken = walk.run(
            since, CHAIN_START if mark is None else mark.link, batch_size, int(total)
        )
        if broken is None:
            broken = _check_head(head, head_ok, verified, last_mac)
        if broken is None:
            broken = _check_witness(store, snapshot, verified)
        calls = verify_call_chains(
            snapshot.call_chains(),
            sign,
            verified,
            batch_size,
            since=None if mark is None else mark.body.get("calls"),
            main_since=since,
        )
        walked = made if broken is None else None
        seen = None if versions is None else versions(walked)
        state = snapshot.reconcile(authentic, batch_size, walked, seen)
    if broken is None and calls.broken is None and path is not None:
        body = {"calls": calls.marks}
        write_mark(path, Mark(AUDIT, verified, last_mac, time.time(), body, made), sign)
    report = _report(store, broken, calls, state, verified, int(total), head)
    return dataclasses.replace(
        report,
        since=since,
        full=mark is None,
        mark_refused=refused,
        chain_state=made if broken is None else None,
        message=report.message + _how(since, mark, refused),
    )


def _how(since: int, mark: Mark | None, refused: str | None) -> str:
    """How much of the chain this run walked, in words."""
    if mark is not None and since:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(mark.at))
        return (
            f" (incremental: events after {since}; 1..{since} were verified by the run of"
            f" {when}; `--full` walks them all)"
        )
    if refused is not None:
        return f" (the last run's mark is not believed: {refused}; the whole chain was walked)"
    return ""


def _disbelieved(snapshot: ChainSnapshot, mark: Mark) -> str | None:
    """Why the chain no longer agrees with a mark that verified; None when it does."""
    if mark.seq == 0:
        return None
    stored = snapshot.link_of(mark.seq)
    if stored is None:
        return f"the chain no longer holds its event {mark.seq} (cut, or an older copy restored)"
    if not hmac.compare_digest(stored, mark.link):
        return f"the chain holds another event at its seq {mark.seq}"
    if snapshot.count_to(mark.seq) != mark.seq:
        return f"events before its seq {mark.seq} were deleted"
    if mark.state is None:
        return "it holds no state"
    return None


def _report(
    store: Store,
    broken: _Break | None,
    calls: CallChainsReport,
    state: StateReport,
    verified: int,
    total: int,
    head: ChainHead | None,
) -> AuditReport:
    unaudited = [p for p in state.problems if (p.table, p.problem) == (VERSIONS, "unaudited")]
    count = len(unaudited)
    if broken is not None:
        problem: Problem | None = broken.problem
        message = broken.message
    elif calls.broken is not None:
        problem, message = calls.broken.problem, calls.broken.message
    elif count and count == state.count:
        problem, message = "unaudited", f"{count} config versions have no matching audit event"
    elif state.count:
        problem = "state"
        message = (
            f"{state.count} stored rows disagree with their MAC or the audit chain: "
            + "; ".join(f"{p.table} {p.row}: {p.problem}" for p in state.problems[:3])
        )
    else:
        problem, message = None, f"all {verified} audit events verify up to the chain head"
        if calls.records:
            message += (
                f"; all {calls.verified} call records verify in {calls.chain_count} call chains"
                f" ({calls.unanchored} after their chain's last anchor, proven by its head row)"
            )
    return AuditReport(
        ok=problem is None,
        events=total,
        verified=verified,
        head_seq=None if head is None else int(head.seq),
        first_bad_seq=None if broken is None else broken.seq,
        problem=problem,
        message=message,
        unaudited_versions=[_unaudited(p) for p in unaudited],
        unaudited_count=count,
        state_problems=state.problems,
        state_problem_count=state.count,
        witness_warning=_witness_damage(store),
        calls=calls,
    )


def _witness_damage(store: Store) -> str | None:
    try:
        return store.witness_damage()
    except StoreError:
        return None  # an unreadable witness is the chain's problem (`_check_witness`)


def _unaudited(problem: StateProblem) -> dict[str, Any]:
    session_id, toolkit_name, version = problem.version or ("", "", None)
    return {
        "session_id": session_id,
        "toolkit_name": toolkit_name,
        "version": version,
        "reason": problem.detail,
    }


def _check_witness(store: Store, snapshot: ChainSnapshot, last_seq: int) -> _Break | None:
    """The chain must reach the head the vault home witnessed, through the same link."""
    try:
        witnessed = store.witnessed()
    except StoreError as exc:
        return _Break(last_seq + 1, "behind", exc.message)
    if witnessed is None:
        return None
    seq, mac = witnessed
    if last_seq < seq:
        return _Break(last_seq + 1, "behind", behind(seq, last_seq))
    stored = snapshot.link_of(seq)
    if stored is None or not hmac.compare_digest(stored, mac):
        what = f"event {seq} differs from the one the vault home witnessed: another database"
        return _Break(seq, "behind", what)
    return None


def _check_head(
    head: ChainHead | None, head_ok: bool, last_seq: int, last_mac: bytes
) -> _Break | None:
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
    if not hmac.compare_digest(head.mac, last_mac):
        return _Break(last_seq, "edited", f"event {last_seq} does not match the chain head")
    return None
