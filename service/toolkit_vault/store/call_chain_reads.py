"""The call chains as `audit verify` reads them, in the main chain's snapshot
(`chain_snapshot`): their heads, their records in order, and the main chain's anchors."""

from __future__ import annotations

from collections.abc import Generator
from contextlib import closing
from typing import Any

from sqlalchemy import Connection, func, select, true

from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.ledger import details_of
from toolkit_vault.store.models import AuditEvent, CallChainHead, CallRecordRow

__all__ = ["CallChainReads"]


class CallChainReads:
    """Reads of one snapshot (`ChainSnapshot.call_chains`)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def record_count(self) -> int:
        found = self._conn.execute(select(func.count()).select_from(CallRecordRow))
        return int(found.scalar_one())

    def chains(self) -> list[str]:
        """Every chain a record or a head row names."""
        named = self._conn.execute(select(CallRecordRow.chain).distinct()).scalars()
        heads = self._conn.execute(select(CallChainHead.chain)).scalars()
        return sorted(set(named) | set(heads))

    def heads(self) -> dict[str, tuple[int, bytes, bytes]]:
        """chain -> (seq, mac, head_mac), as stored."""
        rows = self._conn.execute(
            select(
                CallChainHead.chain, CallChainHead.seq, CallChainHead.mac, CallChainHead.head_mac
            )
        )
        return {r.chain: (int(r.seq), bytes(r.mac), bytes(r.head_mac)) for r in rows}

    def anchors(self, upto: int, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        """The main chain's `calls_anchored` events after `after` up to `upto` (the
        verified part): (seq, details), in order."""
        rows = self._conn.execute(
            select(AuditEvent.seq, AuditEvent.details)
            .where(
                AuditEvent.action == AuditAction.CALLS_ANCHORED.value,
                AuditEvent.seq <= upto,
                AuditEvent.seq > after,
            )
            .order_by(AuditEvent.seq)
        )
        return [(int(r.seq), details_of(r.details)) for r in rows]

    def link_of(self, chain: str, seq: int) -> bytes | None:
        """The stored `mac` of `chain`'s record `seq`; None when there is no such record."""
        found = self._conn.execute(
            select(CallRecordRow.mac).where(CallRecordRow.chain == chain, CallRecordRow.seq == seq)
        ).scalar()
        return None if found is None else bytes(found)

    def count_to(self, chain: str, seq: int) -> int:
        """How many of `chain`'s records have a seq from 1 to `seq`."""
        counted = select(func.count()).where(
            CallRecordRow.chain == chain, CallRecordRow.seq.between(1, seq)
        )
        return int(self._conn.execute(counted).scalar_one())

    def records(
        self, chain: str, *, batch_size: int, after: int | None = None
    ) -> Generator[dict[str, Any], None, None]:
        """`chain`'s records (after seq `after`; None: every one, whatever its seq) in
        `seq` order, as stored, streamed."""
        query = (
            select(CallRecordRow)
            .where(CallRecordRow.chain == chain)
            .where(true() if after is None else CallRecordRow.seq > after)
            .order_by(CallRecordRow.seq, CallRecordRow.id)
            .execution_options(yield_per=batch_size)
        )
        with closing(self._conn.execute(query)) as result:
            for row in result:
                yield dict(row._mapping)
