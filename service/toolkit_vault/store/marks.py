"""Commit marks: a number that changes whenever anything is committed to the store, and
the watching SQLite connection that reads it without ever waiting for a lock.

Lists and the chain's followers compare marks to skip reads when nothing was committed
(`following`); PostgreSQL's come from `notices`, once `listen`ed.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from toolkit_vault.errors import StoreError
from toolkit_vault.store.base import StoreBase
from toolkit_vault.store.notices import CommitNotices
from toolkit_vault.store.statements import _DATA_VERSION


class CommitMarks(StoreBase):
    """The `Store`'s commit marks (`commit_mark`) and its watching connection (`_on_watch`)."""

    notices: CommitNotices | None  # PostgreSQL's commit mark, once `listen`ed
    _notice_token: str  # tells this process's notices from others'
    _watched: str | None  # the SQLite file `_on_watch` opens (None: nothing to watch)
    _watch: sqlite3.Connection | None
    _watch_lock: threading.Lock

    def listen(self) -> CommitNotices:
        """PostgreSQL: keep a LISTEN connection whose notices give `commit_mark` (`notices`),
        started once; a long-running server calls this, a short command need not."""
        if self.engine.dialect.name != "postgresql":
            raise StoreError("only PostgreSQL needs a LISTEN connection for its commit mark")
        if self.notices is None:
            url = self.engine.url.set(drivername="postgresql")
            conninfo = url.render_as_string(hide_password=False)
            self.notices = CommitNotices(conninfo, self._notice_token, self._ledger_holds)
        return self.notices

    def _ledger_holds(self) -> int | None:
        """The last event this process's ledger holds (None: it has none, or believes none)."""
        ledger = self._ledger
        return None if ledger is None or ledger.failure is not None else ledger.applied

    def commit_mark(self) -> int | None:
        """A number that changes whenever anything is committed to the store, by any
        connection of any process; equal marks mean nothing was committed between them.

        SQLite's `data_version`, read on a connection of its own that never writes (no
        transaction; a few microseconds alone, several times that in a busy server, where
        `access.SharedMarks` shares one read among the lists waiting together). PostgreSQL's
        `notices`, once `listen`ed, made exact by one read of the chain head
        (`CommitNotices.exact_mark`): a commit of another process shows before its notice
        is heard. None where there is no such signal (PostgreSQL not listening or in
        doubt, an in-memory or URI database) or it cannot be read: then the caller reads."""
        if self.notices is not None:
            return self.notices.exact_mark()
        return self._exact_mark()

    async def commit_mark_on_loop(self) -> int | None:
        """`commit_mark` on an event loop: PostgreSQL's head read waits there, not in a
        thread and not blocking the loop (`CommitNotices.exact_mark_on_loop`)."""
        if self.notices is not None:
            return await self.notices.exact_mark_on_loop()
        return self._exact_mark()

    def _exact_mark(self) -> int | None:
        """`commit_mark` where it never runs behind (SQLite's): what the chain's followers
        go by, since they compare the chain with rows read at once (`current_versions`)."""
        rows = self._on_watch(_DATA_VERSION, ())
        return None if rows is None else int(rows[0][0])

    def close_watch(self) -> None:
        """Close the watching connection (reopened on next use), so that disposing of the
        engine leaves no connection open on the SQLite file: the last one to close
        checkpoints the WAL into it (`init`, before its home is copied or backed up)."""
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def _on_watch(self, sql: str, params: tuple[Any, ...]) -> list[Any] | None:
        """One statement on the SQLite file's watching connection: never writes, never
        waits (busy timeout 0), opened on first use; None where there is none or it fails."""
        if self._watched is None:
            return None
        with self._watch_lock:
            try:
                if self._watch is None:
                    self._watch = sqlite3.connect(
                        self._watched,
                        uri=True,
                        timeout=0,
                        isolation_level=None,
                        check_same_thread=False,
                    )
                return self._watch.execute(sql, params).fetchall()
            except sqlite3.Error:
                return None
