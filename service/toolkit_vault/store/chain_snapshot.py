"""One read-only snapshot of the audit chain and the state it vouches for.

`audit verify` and `audit export` read the chain's head, its events in order and the
authenticated tables in one consistent snapshot (REPEATABLE READ on PostgreSQL; SQLite's
read transaction is one already), so a vault being written to still verifies. Callers get
this snapshot's reads, never its connection.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.exc import OperationalError

from toolkit_vault.errors import StoreError
from toolkit_vault.store.call_chain_reads import CallChainReads
from toolkit_vault.store.checkpoints import count_events, count_to
from toolkit_vault.store.driver import _OnDriver, batches
from toolkit_vault.store.integrity import Row
from toolkit_vault.store.ledger import ChainState
from toolkit_vault.store.models import AuditEvent, AuditHead
from toolkit_vault.store.reconcile import StateReport, reconcile
from toolkit_vault.store.storage import Store

__all__ = ["ChainHead", "ChainSnapshot", "chain_snapshot"]

_ROW = ("seq", "ts", "actor", "action", "session_id", "toolkit_name", "version", "details", "mac")
_EVENTS = select(*(AuditEvent.__table__.c[name] for name in _ROW)).order_by(AuditEvent.seq)
_ALL_EVENTS = _OnDriver(_EVENTS)
_EVENTS_AFTER = _OnDriver(_EVENTS.where(AuditEvent.seq > bindparam("after")))


@dataclass(frozen=True)
class ChainHead:
    """The one-row authenticated head as stored: the last event's (seq, mac) and the MAC
    over them (`chain.head_link`)."""

    seq: int
    mac: bytes
    head_mac: bytes


class ChainSnapshot:
    """The reads of one snapshot (`chain_snapshot`)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._events: int | None = None  # `event_count`, once asked (one snapshot)

    def head(self) -> ChainHead | None:
        found = self._conn.execute(select(AuditHead).where(AuditHead.id == 1)).first()
        if found is None:
            return None
        return ChainHead(int(found.seq), bytes(found.mac), bytes(found.head_mac))

    def event_count(self) -> int:
        """How many events this snapshot holds, whatever their seq (`count_events`)."""
        if self._events is None:
            self._events = count_events(self._conn)
        return self._events

    def link_of(self, seq: int) -> bytes | None:
        """The stored `mac` of event `seq`; None when there is no such event."""
        found = self._conn.execute(select(AuditEvent.mac).where(AuditEvent.seq == seq)).scalar()
        return None if found is None else bytes(found)

    def events(
        self, after: int | None = None, *, batch_size: int
    ) -> Generator[dict[str, Any], None, None]:
        """The events (after `after`; None: every one, whatever its seq) in `seq` order,
        as stored, streamed `batch_size` rows at a time."""
        query = select(AuditEvent).order_by(AuditEvent.seq)
        if after is not None:
            query = query.where(AuditEvent.seq > after)
        query = query.execution_options(yield_per=batch_size)
        with closing(self._conn.execute(query)) as result:
            for row in result:
                yield dict(row._mapping)

    def event_rows(self, after: int | None, *, batch_size: int) -> Generator[list[Any], None, None]:
        """The events (after `after`; None: every one, whatever its seq) in `seq` order
        as rows that index like tuples, a batch at a time:
        (seq, ts, actor, action, session_id, toolkit_name, version, details, mac). On
        SQLite, the driver's own tuples on this snapshot's connection (inside its
        transaction): SQLAlchemy's rows, which a full walk paid for on every event, convert
        none of these columns there."""
        if self._conn.dialect.name == "sqlite":
            if after is None:
                yield from batches(_ALL_EVENTS(self._conn, {}), batch_size)
            else:
                yield from batches(_EVENTS_AFTER(self._conn, {"after": after}), batch_size)
            return
        query = _EVENTS if after is None else _EVENTS.where(AuditEvent.seq > after)
        query = query.execution_options(yield_per=batch_size)
        with closing(self._conn.execute(query)) as result:
            for rows in result.partitions():
                yield list(rows)

    def count_to(self, seq: int) -> int:
        """How many events the chain holds from 1 to `seq` (`checkpoints.count_to`; from
        `event_count`'s count when it was asked: the same snapshot)."""
        return count_to(self._conn, seq, self._events)

    def call_chains(self) -> CallChainReads:
        """The call chains, read in this snapshot (`call_chains`)."""
        return CallChainReads(self._conn)

    def reconcile(
        self,
        authentic: Callable[[str, Row], bool],
        batch_size: int,
        state: ChainState | None = None,
        versions: Callable[[Row, bool], None] | None = None,
    ) -> StateReport:
        """Every authenticated table held to its MAC and the chain (`reconcile`); `state`:
        the chain's, when the walk made it; `versions`: handed each version row."""
        return reconcile(self._conn, authentic, batch_size, state, versions)


@contextmanager
def chain_snapshot(store: Store) -> Iterator[ChainSnapshot]:
    """One read-only snapshot: the head and the events it covers are read consistently."""
    try:
        with store.engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                conn = conn.execution_options(
                    isolation_level="REPEATABLE READ", postgresql_readonly=True
                )
            with conn.begin():
                yield ChainSnapshot(conn)
    except OperationalError as exc:
        raise StoreError(f"the database refused the read ({type(exc.orig).__name__})") from None
