"""Freshness: the verified chain's word, followed (see `ledger`), and the witness that says
how far the chain had reached.

A process follows the chain from the last event its ledger holds, in batches on a first
walk, and believes no stored row while the chain breaks, went back, or ends before the
home's witness (`state_failure` says why).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection

from toolkit_vault.errors import StoreError
from toolkit_vault.store.chain import head_link
from toolkit_vault.store.checkpoints import Checkpoints
from toolkit_vault.store.ledger import ChainState, Ledger, StateUnknown, behind
from toolkit_vault.store.statements import _EVENT_MAC, _FOLLOW, _FOLLOW_BATCH, _LAST_EVENT_SEQ
from toolkit_vault.store.transactions import Transactions
from toolkit_vault.store.witness import Witness

FOLLOW_BATCH = 10_000  # events a walk holds at a time (`_follow`)
_FOLLOWED = ("seq", "ts", "actor", "action", "session_id", "toolkit_name", "version", "details")

log = logging.getLogger(__name__)


class Following(Transactions):
    """The `Store`'s following of the chain (`chain_state`) and reading of the witness
    (`witnessed`)."""

    makes_witness: bool  # `init`: a home without a witness gets one
    _followed_mark: int | None  # the commit mark the ledger was current at
    _witness_verified: tuple[int, bytes, bytes] | None  # the witness head whose MAC held
    _witness_looked_at: list[tuple[int, bytes, bytes]] | None  # `witnessed`
    checkpoints: Checkpoints  # where a first walk starts, and the checkpoints this one writes

    def chain_state(self, conn: Connection | None = None, *, force: bool = False) -> ChainState:
        """What the verified chain says is current, followed up to now (in `conn`'s
        snapshot, if given). Raises StateUnknown when nothing can be believed: the chain
        breaks, went back, or the database is behind the home's witness.

        On SQLite it reads only when something was committed since the last time (`PRAGMA
        data_version`, as lists do); elsewhere, one statement."""
        ledger = self._ledger
        if ledger is None:
            raise StoreError("the audit key is not loaded")
        mark = self._exact_mark()
        if ledger.failure is None and (force or mark is None or mark != self._followed_mark):
            mark = self._followed_by(mark)
            witness = self.witnessed()
            if conn is None:
                with self.read() as own:
                    self._follow(ledger, witness, own, mark)
            else:
                self._follow(ledger, witness, conn, mark)
            if self._sign is not None and not self._accepting_restore:
                self.checkpoints.consider(ledger, self._sign, self.write)
        return ledger.require()

    def write_checkpoint(self) -> int | None:
        """Checkpoint the chain's state as followed now (`checkpoints`), without waiting for
        one to be due: the seq written, or None (no home, no audit key, nothing followed)."""
        self.chain_state(force=True)
        if self._ledger is None or self._sign is None:
            return None
        return self.checkpoints.write_now(self._ledger, self._sign, self.write)

    def followed_state(self) -> ChainState:
        """The chain's state as this process last followed it, read from nothing: for a
        caller that has just read the store (a list's `_sync`), or knows by the commit mark
        that nothing was committed since. Raises StateUnknown as `chain_state` does."""
        ledger = self._ledger
        if ledger is None:
            raise StoreError("the audit key is not loaded")
        return ledger.require()

    def chain_state_at_once(self, mark: int | None = None) -> ChainState | None:
        """`chain_state`, followed only if that needs no wait (SQLite: one statement on the
        watching connection, which never waits for a lock), so it may run on an event loop;
        PostgreSQL: the ledger as it is, while no other process committed since its last
        read (`notices.foreign`), which its own commits kept current (`Ledger.committed`).
        None when it cannot be read so (a lock held, a first walk, a failure, a commit of
        another process or a doubt). `mark` (SQLite): a commit mark the caller read before
        calling (`chain_state_at_mark`), taken as the one the read follows instead of
        reading it again: older than the rows read here, so at worst the next caller reads
        once more."""
        ledger = self._ledger
        if ledger is None or ledger.failure is not None or ledger.seq == 0:
            return None
        if self.notices is not None:
            foreign = self.notices.foreign()
            if foreign is None or foreign != self._followed_mark:
                return None
            return None if ledger.failure is not None else ledger.state
        if mark is None:
            mark = self._exact_mark()
            if mark is None:
                return None
        if mark != self._followed_mark:
            witness = self.witnessed()
            after = ledger.seq
            rows = self._on_watch(_FOLLOW, (after,))
            if rows is None:
                return None
            self._take_rows(ledger, witness, after, rows, mark)
        return None if ledger.failure is not None else ledger.state

    def chain_state_at_mark(self, mark: int | None) -> ChainState | None:
        """`chain_state_at_once` for a caller holding a commit mark it just read
        (`commit_mark`): on SQLite, when the ledger was followed at that very mark nothing
        was committed between them, so its state is handed out without reading the mark
        again; otherwise `chain_state_at_once` at that mark (under tool calls, each a
        commit, the mark moves between any two calls: one read of it a call, not two)."""
        ledger = self._ledger
        if (
            self.notices is None
            and mark is not None
            and ledger is not None
            and ledger.failure is None
            and ledger.seq > 0
            and mark == self._followed_mark
        ):
            return ledger.state
        return self.chain_state_at_once(mark if self.notices is None else None)

    def _take_rows(
        self,
        ledger: Ledger,
        witness: tuple[int, bytes] | None,
        after: int,
        rows: list[Any],
        mark: int | None,
        *,
        partial: bool = False,
        first: bool | None = None,
    ) -> None:
        """Hand one read's rows to the ledger; `partial`: a batch of a longer walk (`first`:
        whether that walk began with an empty ledger)."""
        head = rows[0][1] if rows and rows[0][0] == 0 else None
        events = (
            {**dict(zip(_FOLLOWED, row[1:9], strict=True)), "mac": row[9]}
            for row in rows
            if row[0] == 1
        )
        with ledger.lock:
            first = ledger.seq == 0 if first is None else first
            ledger.take(witness, after, head, events, partial=partial)
            if partial:
                return
            if first and witness is None and self.witness is not None:
                self._first_witness(ledger, self.witness)
            self._followed_mark = mark

    def _followed_by(self, exact: int | None) -> int | None:
        """(Before a read that follows the chain.) The mark the ledger will be current at:
        SQLite's exact one, PostgreSQL's foreign one (`chain_state_at_once`)."""
        if exact is None and self.notices is not None:
            return self.notices.foreign()
        return exact

    def _follow(
        self, ledger: Ledger, witness: tuple[int, bytes] | None, conn: Connection, mark: int | None
    ) -> None:
        """Follow the chain from `ledger.seq` to its head: in batches of `FOLLOW_BATCH`
        events, so a first walk of a long chain holds one batch in memory at a time, not
        every event (the last batch, with the head of its own snapshot, ends the walk)."""
        first = ledger.seq == 0
        if first and ledger.applied == 0 and witness is not None and self._sign is not None:
            self.checkpoints.start(conn, ledger, self._sign, witness)  # from its seq, if believed
        sql = _FOLLOW_BATCH.replace("?", self._placeholder)
        while True:
            after = ledger.seq
            rows = list(conn.exec_driver_sql(sql, (after, FOLLOW_BATCH)).all())
            partial = len(rows) > FOLLOW_BATCH  # the head's row and a full batch
            self._take_rows(ledger, witness, after, rows, mark, partial=partial, first=first)
            if not partial or ledger.failure is not None:
                return

    def _first_witness(self, ledger: Ledger, witness: Witness) -> None:
        """(Ledger lock held.) A home without a witness: `init` makes one from the chain as
        verified (an empty chain needs none yet); anyone else believes nothing."""
        if ledger.failure is not None:
            return
        if self.makes_witness or ledger.seq == 0:
            self._advance_witness(ledger.seq, ledger.mac)
        else:
            ledger.failure = _missing(witness)

    def witnessed(self) -> tuple[int, bytes] | None:
        """The witness's newest (seq, link) whose keyed head MAC holds (this process's own
        newest head, when later); None without one; StoreError when none holds."""
        if self.witness is None or self._accepting_restore:
            return None
        heads = self.witness.read()
        if heads is not None and heads is not self._witness_looked_at:
            self._witness_looked_at = heads  # the file changed: say a damaged slot, once
            if (damage := self.witness_damage()) is not None:
                log.warning("%s", damage)
        own = self.witness.newest  # what this process committed: newer than the file, maybe
        if own is not None and (not heads or own[0] >= heads[0][0]):
            return own[0], own[1]
        if heads is None:
            return None
        sign = self._sign
        for head in heads:
            seq, mac, head_mac = head
            if head == self._witness_verified:
                return seq, mac
            if sign is not None and hmac.compare_digest(head_link(sign, seq, mac), head_mac):
                self._witness_verified = head
                return seq, mac
        raise StoreError(
            f"the audit witness {self.witness.path} fails its MAC: it was not written by "
            "this vault; restore it, or run `toolkit-vault audit accept-restore`"
        )

    def witness_damage(self) -> str | None:
        """Why the witness is weaker than it should be (None: it is whole): a slot that holds
        neither a head nor nothing, or (with the audit key) a head whose MAC fails. The
        other slot is then all the witness has: a database one step behind it, put back on
        purpose, would pass unnoticed, so `audit verify`, the log and readiness say so."""
        if self.witness is None:
            return None
        heads = self.witness.read()
        if heads is None:
            return None
        damaged = self.witness.torn
        sign = self._sign
        if sign is not None:
            damaged += sum(
                1 for seq, mac, head_mac in heads
                if not hmac.compare_digest(head_link(sign, seq, mac), head_mac)
            )  # fmt: skip
        if not damaged:
            return None
        return (
            f"the audit witness {self.witness.path} has a damaged slot: only the other one "
            "is checked, so a database one step behind would pass unnoticed; unless a crash "
            "tore a write, find who wrote the file (`audit accept-restore` rewrites it whole)"
        )

    def behind_witness(self) -> str | None:
        """For readers without the audit key (`history`, `tokens list`): whether the
        database ends before the newest head its home witnessed, or holds another event
        there (None: neither). Neither the witness's MACs nor the chain can be checked
        without the key, but the sequence numbers and the stored link can; a database put
        back from an older copy then shows a purged version `ok` or a revoked token active,
        and these readers say so instead of staying silent. It warns, never refuses: a
        forged witness can only make a reader doubt."""
        if self.witness is None:
            return None
        try:
            heads = self.witness.read()  # first: a witness never leads what it saw committed
        except StoreError as exc:
            return exc.message
        if not heads:
            return None
        seq, mac, _ = heads[0]
        with self.read() as conn:
            last = conn.execute(_LAST_EVENT_SEQ).scalar()
            stored = conn.execute(_EVENT_MAC, {"seq": seq}).scalar()
        if (last or 0) < seq:
            return behind(seq, last or 0)
        if stored is None or not hmac.compare_digest(bytes(stored), mac):
            return (
                f"the database holds another audit event {seq} than the one this vault home "
                "witnessed: it is another database, or an older copy written over since"
            )
        return None

    def state_failure(self) -> str | None:
        """Why stored state is not believed (None: it is), after following the chain."""
        try:
            self.chain_state()
        except StateUnknown as exc:
            return str(exc)
        return None

    @contextmanager
    def accepting_restore(self) -> Iterator[None]:
        """The operator's deliberate restore: the witness is not consulted, and the head
        this write leaves becomes the witness even when it is older (`audit accept-restore`)."""
        self._accepting_restore = True
        try:
            yield
        finally:
            self._accepting_restore = False
            self.checkpoints.forget()
            if self._ledger is not None and self._sign is not None:
                self._ledger, self._followed_mark = Ledger(self._sign), None


def _missing(witness: Witness) -> str:
    return (
        f"the audit witness {witness.path} is missing: nothing stored is believed; if this "
        "database is the latest, run `toolkit-vault init` to witness it again"
    )
