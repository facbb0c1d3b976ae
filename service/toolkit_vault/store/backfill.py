"""The keyed backfill's reads and writes: a pre-0002 vault's rows, table by table as the
chain judges them, and the MACs written back without overwriting anyone's later change.

`audit.upgrade` decides what each row becomes and computes its MAC; this module reads the
rows (`Backfill.findings`, one read per table, closed before the writes) and writes the
batches (`Backfill.sign`), each only where the row is still unsigned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select, update

from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.integrity import Row
from toolkit_vault.store.models import AuditEvent, Base
from toolkit_vault.store.reconcile import Finding, rules
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store

__all__ = ["Backfill", "append_event", "recorded"]


def recorded(store: Store, action: AuditAction) -> bool:
    """Whether the chain holds an event of `action` (one indexed read)."""
    with store.read() as conn:
        query = select(AuditEvent.seq).where(AuditEvent.action == action).limit(1)
        return conn.execute(query).first() is not None


def append_event(store: Store, draft: AuditDraft) -> None:
    """One audit event in a transaction of its own."""
    store.transact(lambda conn: store.audit(conn, draft))


class Backfill:
    """The authenticated tables' rows as `reconcile`'s rules find them, with `authentic`
    deciding which rows count as signed (the chain's state is built once, on first use)."""

    def __init__(
        self, store: Store, batch_size: int, authentic: Callable[[str, Row], bool]
    ) -> None:
        self._store = store
        self._rules = rules(batch_size, authentic)

    @property
    def tables(self) -> list[str]:
        return list(self._rules)

    def findings(self, table: str) -> Iterator[Finding]:
        """Each row of `table` with its name and its disagreement with the chain, in one
        read that ends when the iteration does."""
        with self._store.read() as conn:
            yield from self._rules[table](conn)

    def sign(
        self, table: str, batch: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]
    ) -> None:
        """Write each (key columns, changes with their `mac`) in one transaction; a row
        someone changed or signed since it was read stays as it is."""
        stored = Base.metadata.tables[table]

        def work(conn: Connection) -> None:
            for key, changes in batch:
                where = [stored.c[column] == value for column, value in key.items()]
                conn.execute(update(stored).where(*where, stored.c.mac.is_(None)).values(**changes))

        self._store.transact(work)
