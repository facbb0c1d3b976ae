"""PostgreSQL's commit mark: a number that changes whenever any process commits a write.

SQLite has `PRAGMA data_version`, so a list is answered from memory while nothing was
committed since its last read (`Store.commit_mark`). PostgreSQL has no such number, so
every write transaction of every vault process sends `NOTIFY` on `STATE_CHANNEL` (in the
transaction: delivered only if it commits, in commit order, before its writer is told it
committed), and this process keeps one connection that LISTENs to it. Its mark moves on
every notice, on every commit of this process (so its own writes show at once, before
their notice is back), and on every (re)connection; a forged notice only costs a read.
A notice is in PostgreSQL's queue before the writer hears its commit, but this process may
take it later than an agent's next request arrives here, so the mark a list goes by
(`exact_mark`; `exact_mark_on_loop` on a server's event loop) also reads the chain head: a
head that moved since the last such read moves it, as `data_version` moves on SQLite.

Each notice carries its process's `token`, so this process tells its own notices from the
others': `foreign()` moves only on another process's commit (or on doubt: a reconnection, a
write that failed, a head no notice explains). While it stands still, every commit is this
process's own, which its ledger took as it committed (`Ledger.committed`), so the ledger is
current without a read (`Store.chain_state_at_once`).

It believes its LISTEN only while it has proof that nothing was missed: the connection is
up, and it read the chain head on that connection within the last `STALE_S` seconds (each
`CHECK_S` it does; a head that moved without a notice, from a writer that sent none, moves
the mark too, and the foreign mark if the ledger does not hold it). Otherwise `mark()` and
`foreign()` are None, and every list reads the database. Other channels
(`transports.relay`'s status events) share the connection: `subscribe`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

__all__ = ["CHECK_S", "HEAD_READ_S", "STALE_S", "STATE_CHANNEL", "CommitNotices"]

STATE_CHANNEL = "toolkit_vault_state"
CHECK_S = 1.0  # how often the head is read on the listening connection
STALE_S = 3.0  # a mark is believed this long after the last such read, no longer
HEAD_READ_S = 3.0  # `exact_mark_on_loop` gives up on a head read after this long
_HEAD = "SELECT seq FROM audit_head WHERE id = 1"
log = logging.getLogger(__name__)


class CommitNotices:
    """The listening thread of one process and its mark (see the module's docstring)."""

    def __init__(
        self,
        conninfo: str,
        token: str,
        known_head: Callable[[], int | None],
        check_s: float = CHECK_S,
    ) -> None:
        """`token`: what this process's notices carry; `known_head`: the last event this
        process's ledger holds (None: no ledger)."""
        self._conninfo, self.token, self._known_head = conninfo, token, known_head
        self.check_s = check_s
        self._channels: dict[str, list[Callable[[str], None]]] = {}
        self._lock = threading.Lock()
        self._count = 0
        self._foreign = 0
        self._checked: float | None = None  # monotonic time of the last head read; None: down
        self._stopped = threading.Event()
        self.listening = threading.Event()
        self._thread: threading.Thread | None = None
        self._reading = threading.Lock()  # `exact_mark`'s connection and the head it last read
        self._reader: psycopg.Connection[tuple[int]] | None = None
        self._read_head: object = None  # a first read moves the mark (no head is None)
        self._on_loop: _LoopReader | None = None

    def subscribe(self, channel: str, receive: Callable[[str], None]) -> None:
        """`receive(payload)` for each notice on `channel` (before `start`)."""
        self._channels.setdefault(channel, []).append(receive)

    def start(self) -> CommitNotices:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pg-notices", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        with self._reading:
            self._close_reader()
        if self._on_loop is not None:
            self._on_loop.close()

    def mark(self) -> int | None:
        """The mark, or None when a missed commit cannot be ruled out."""
        return self._believed(lambda: self._count)

    def foreign(self) -> int | None:
        """A number that moves on every commit of another process; None as for `mark`."""
        return self._believed(lambda: self._foreign)

    def _believed(self, count: Callable[[], int]) -> int | None:
        with self._lock:
            checked = self._checked
            if checked is None or time.monotonic() - checked > STALE_S:
                return None
            return count()

    def moved(self, *, foreign: bool = False) -> None:
        """Something was committed: by this process (its own commit), or by another one or
        maybe by anyone (`foreign`: a notice not this process's, a write that failed)."""
        with self._lock:
            self._count += 1
            self._foreign += foreign

    def _run(self) -> None:
        import psycopg  # only PostgreSQL's stores pay for it

        while not self._stopped.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    for channel in (STATE_CHANNEL, *self._channels):
                        conn.execute(f"LISTEN {channel}")
                    head = self._head(conn)  # after LISTEN: any later commit is heard
                    self.listening.set()
                    while not self._stopped.is_set():
                        for notice in conn.notifies(timeout=self.check_s):
                            if notice.channel == STATE_CHANNEL:
                                if notice.payload != self.token:  # its own moved at commit
                                    self.moved(foreign=True)
                            else:
                                self._tell(notice.channel, notice.payload)
                        now = self._head(conn, moved=head)
                        head = now
            except psycopg.Error as exc:
                log.warning("lost the notices connection (%s); reconnecting", type(exc).__name__)
            finally:
                self.listening.clear()
                with self._lock:
                    self._checked = None
            self._stopped.wait(1.0)

    def _tell(self, channel: str, payload: str) -> None:
        """Hand a notice to its receivers; one that fails stops neither the others nor the
        listening (a dead thread would leave every list reading and no event relayed)."""
        for receive in self._channels.get(channel, ()):
            try:
                receive(payload)
            except Exception as exc:
                log.error("unexpected %s handling a notice on %s", type(exc).__name__, channel)

    def _head(self, conn: psycopg.Connection[tuple[int]], moved: object = ...) -> object:
        """Read the chain head on the listening connection (`_saw`; a first read, after a
        (re)connection, moves both marks); either way both are believed for `STALE_S` more."""
        known_before = self._known_head()
        head = self._saw(conn.execute(_HEAD).fetchone(), known_before, moved)
        with self._lock:
            self._checked = time.monotonic()
        return head

    def exact_mark(self) -> int | None:
        """`mark()`, made exact as SQLite's `data_version`: the chain head, read after the
        call began on a connection of its own, moves it if the head moved since the last
        such read. A commit acknowledged anywhere before the call thus shows, its notice
        heard yet or not (a notice crosses two processes and this one's GIL; an agent's
        next request to another replica may arrive first). One statement, no transaction."""
        import psycopg  # only PostgreSQL's stores pay for it

        if self.mark() is None:
            return None
        with self._reading:
            try:
                if self._reader is None or self._reader.closed:
                    self._reader = psycopg.connect(self._conninfo, autocommit=True)
                known_before = self._known_head()
                row = self._reader.execute(_HEAD).fetchone()
                self._read_head = self._saw(row, known_before, self._read_head)
            except psycopg.Error as exc:
                log.warning("could not read the chain head (%s)", type(exc).__name__)
                self._close_reader()
                return None
        return self.mark()

    async def exact_mark_on_loop(self) -> int | None:
        """`exact_mark` on an event loop, on a connection of that loop's: the loop serves
        other requests while the head read is on its way, instead of blocking on it or
        handing it to a thread. A read that takes longer than `HEAD_READ_S` (a database
        gone silent) is given up, so the lists waiting for it read the store instead of
        waiting for as long as the network takes to notice."""
        import psycopg  # only PostgreSQL's stores pay for it

        if self.mark() is None:
            return None
        reader = self._on_loop
        if reader is None or reader.loop is not asyncio.get_running_loop():
            if reader is not None:
                reader.close()
            reader = self._on_loop = _LoopReader(asyncio.get_running_loop())
        async with reader.lock:
            try:
                known_before = self._known_head()
                row = await asyncio.wait_for(reader.head_row(self._conninfo), HEAD_READ_S)
                reader.head = self._saw(row, known_before, reader.head)
            except (psycopg.Error, TimeoutError) as exc:
                log.warning("could not read the chain head (%s)", type(exc).__name__)
                reader.close()
                return None
        return self.mark()

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _saw(self, row: tuple[int] | None, known_before: int | None, moved: object) -> object:
        """The chain head `row` just read (`known_before`: the ledger's last event before
        it was); a head other than `moved` (`...`: unknown) moves the mark, and the foreign
        mark too if this process's ledger does not hold it."""
        head = 0 if row is None else row[0]
        known_after = self._known_head()
        held = (  # every commit up to the head is in the ledger, and none was taken back
            moved is not ...
            and known_before is not None
            and known_after is not None
            and known_before <= head <= known_after
        )
        with self._lock:
            if head != moved:
                self._count += 1
                self._foreign += not held
        return head


@dataclass
class _LoopReader:
    """`exact_mark_on_loop`'s connection on one event loop, and the head it read last."""

    loop: asyncio.AbstractEventLoop
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    conn: psycopg.AsyncConnection[Any] | None = None
    head: object = None

    async def head_row(self, conninfo: str) -> tuple[int] | None:
        import psycopg  # only PostgreSQL's stores pay for it

        if self.conn is None or self.conn.closed:
            self.conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        row: tuple[int] | None = await (await self.conn.execute(_HEAD)).fetchone()
        return row

    def close(self) -> None:
        """Close the connection from any thread (an async close needs its own loop)."""
        if self.conn is not None:
            self.conn.pgconn.finish()
            self.conn = None
