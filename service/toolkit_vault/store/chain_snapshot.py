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

from sqlalchemy import Connection, func, select
from sqlalchemy.exc import OperationalError

from toolkit_vault.errors import StoreError
from toolkit_vault.store.call_chain_reads import CallChainReads
from toolkit_vault.store.integrity import Row
from toolkit_vault.store.models import AuditEvent, AuditHead
from toolkit_vault.store.reconcile import StateReport, reconcile
from toolkit_vault.store.storage import Store

__all__ = ["ChainHead", "ChainSnapshot", "chain_snapshot"]


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

    def head(self) -> ChainHead | None:
        found = self._conn.execute(select(AuditHead).where(AuditHead.id == 1)).first()
        if found is None:
            return None
        return ChainHead(int(found.seq), bytes(found.mac), bytes(found.head_mac))

    def event_count(self) -> int:
        return int(self._conn.execute(select(func.count()).select_from(AuditEvent)).scalar_one())

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

    def call_chains(self) -> CallChainReads:
        """The call chains, read in this snapshot (`call_chains`)."""
        return CallChainReads(self._conn)

    def reconcile(self, authentic: Callable[[str, Row], bool], batch_size: int) -> StateReport:
        """Every authenticated table held to its MAC and the chain (`reconcile`)."""
        return reconcile(self._conn, authentic, batch_size)


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
