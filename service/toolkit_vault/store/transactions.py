"""Transactions: reads, writes, and writes grouped into one commit.

Every change and every failed attempt is one atomic write that also appends its audit
event: a transaction of its own, or on SQLite a savepoint of its own in a group commit
(`writer`); on PostgreSQL a group of appends runs without savepoints, its statements
pipelined. A writer that loses a race (unique version or audit sequence taken, pointer
moved) is tried again from a fresh read (`transact`), so concurrent writers never lose an
update. A commit moves the witness and the ledger to the events it wrote.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from toolkit_vault.errors import StoreError
from toolkit_vault.store.chain import head_link
from toolkit_vault.store.database import BUSY_TIMEOUT_MS, read_only
from toolkit_vault.store.marks import CommitMarks
from toolkit_vault.store.statements import _PG_GROUP_STATE
from toolkit_vault.store.writer import Write, Writer
from toolkit_vault.telemetry import metrics, traces

# Takes a transaction's audit events (dicts of the chained fields, `mac`, `previous`), in
# `seq` order, before it commits; raising rolls the transaction back (`audit.devices`).
AuditSink = Callable[[Sequence[Mapping[str, Any]]], None]

_MAX_ATTEMPTS = 20
_WRITTEN = "tkv_written"  # conn.info: the events a transaction wrote, in order
_AHEAD = "tkv_ahead"  # conn.info: a group's append states, read ahead (`_read_ahead`)
_IMPORTS_AHEAD = "tkv_imports_ahead"  # conn.info: their toolkits' package digests, the same
_PIPELINED = "tkv_pipelined"  # conn.info: a pipelined group's appends, checked at its sync


class Transactions(CommitMarks):
    """The `Store`'s transactions: `read`, `write`, `fetch`, and `transact` (a write tried
    again when it lost a race, committed in a group by the writer thread)."""

    audit_sink: AuditSink | None  # the audit devices: each write's events, in seq order
    _writers: threading.RLock  # this process's writes queue here (`Store.__init__`)
    _writer: Writer
    _pg_begin_write: str  # `_PG_BEGIN_WRITE`, with this process's notice token
    _placeholder: str  # the driver's: `?` or `%s`

    @property
    def commits_in_groups(self) -> bool:
        """Whether this process's writes commit on the store's writer thread, so a caller's
        thread leaves its write there instead of waiting on the database (always, now; kept
        for the transports that ask)."""
        return True

    @contextmanager
    def write(self) -> Iterator[Connection]:
        queue = self._writers
        if not queue.acquire(timeout=BUSY_TIMEOUT_MS / 1000):
            raise StoreError("the database refused the write (busy)")
        try:
            with (
                traces.span("storage.write"),
                self.engine.connect().execution_options(vault_write=True) as conn,
            ):
                try:
                    with conn.begin():
                        if conn.dialect.name == "postgresql":
                            # The audit chain is one sequence: writers queue here, as SQLite's
                            # BEGIN IMMEDIATE makes them queue, instead of failing and retrying.
                            # The same round trip queues the commit's notice (`notices`).
                            driver: Any = conn.connection.dbapi_connection
                            try:
                                driver.execute(self._pg_begin_write)
                            except conn.dialect.loaded_dbapi.OperationalError as exc:
                                # Past SQLAlchemy, so said as it would: the connection is
                                # dropped, not rolled back (which would fail and hide why).
                                conn.invalidate(exc)
                                raise OperationalError(self._pg_begin_write, None, exc) from None
                        yield conn
                        if self.audit_sink is not None and conn.info.get(_WRITTEN):
                            # Still under the chain's lock (BEGIN IMMEDIATE, the advisory
                            # lock), so every process sends in seq order; a sink that
                            # raises (fail-closed) rolls the write back.
                            self.audit_sink(conn.info[_WRITTEN])
                    written = conn.info.get(_WRITTEN)
                finally:
                    conn.info.pop(_WRITTEN, None)
            if written:  # committed: the witness may move to its head, the ledger take them
                last = written[-1]
                self._advance_witness(last["seq"], last["mac"], force=self._accepting_restore)
                if self._ledger is not None:
                    self._ledger.committed(written)  # before the mark moves, for who sees it
            if self.notices is not None:
                self.notices.moved()  # this process's own commit shows before its notice
        except BaseException as exc:
            if self.notices is not None:
                self.notices.moved(foreign=True)  # it may have committed all the same, unheard
            refusal = _refusal(exc)
            if refusal is exc:
                raise
            raise refusal from None
        finally:
            queue.release()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        try:
            with traces.span("storage.read"), self.engine.connect() as conn, conn.begin():
                yield conn
        except OperationalError as exc:
            raise StoreError(f"the database refused the read ({type(exc.orig).__name__})") from None

    def fetch(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """One read-only statement (`?` placeholders) on a pooled driver connection. A
        single statement reads one consistent snapshot; the pool's reset rolls back what
        the driver began. On PostgreSQL it runs in autocommit: no BEGIN before it and no
        ROLLBACK after it, one round trip where there were three."""
        if self._placeholder != "?":
            sql = sql.replace("?", self._placeholder)
        raw = self.engine.raw_connection()
        driver: Any = raw.driver_connection
        alone = self._placeholder != "?"  # psycopg
        try:
            if alone:
                driver.autocommit = True
            cursor = raw.cursor()
            started = time.perf_counter()
            cursor.execute(sql, params)
            rows = list(cursor.fetchall())
            metrics.observe_statement(time.perf_counter() - started)
            return rows
        except self.engine.dialect.loaded_dbapi.Error as exc:
            alone = False
            raw.invalidate()  # whatever broke, the next read gets a fresh connection
            raise StoreError(f"the database refused the read ({type(exc).__name__})") from None
        finally:
            if alone:
                driver.autocommit = False
            raw.close()

    def transact(
        self,
        work: Callable[[Connection], Any],
        then: Callable[[Any], None] | None = None,
        key: tuple[str, str] | None = None,
    ) -> Any:
        """`work` in a write transaction, tried again from a fresh read when it lost a race
        (`_again`), in a group commit (`writer`). `then`
        runs with its result once it is committed; given one, inside `writer.deferring`,
        the write is left to commit and this returns None at once. `key`: the (scope,
        toolkit) an `append_version` appends to (`_commit_all_or_none` reads ahead)."""
        writer = self._writer
        if not writer.on_writer_thread():
            return writer.submit(work, then, key)
        write = Write(work, None)  # a write made by the writer thread, inside its group
        while True:
            try:
                with self.write() as conn:
                    write.result = work(conn)
                break
            except DBAPIError as exc:
                write.error = exc
                if not self._again(write):
                    raise write.error from None
        if then is not None:
            then(write.result)
        return write.result

    def _again(self, write: Write) -> bool:
        """Whether a write that failed is tried again: it lost a race (version or audit
        sequence taken, pointer moved, a serialization failure), or its first connection was
        opened while the SQLite file was read-only (which that connection stays; a fresh one
        writes if the file is writable again). Else its `error` is made final."""
        exc = write.error
        if not isinstance(exc, DBAPIError):
            return False
        write.tries += 1
        fresh = write.tries == 1 and read_only(exc.orig)
        if not (fresh or _retryable(exc)):
            write.error = StoreError(f"the database refused the write ({type(exc.orig).__name__})")
        elif write.tries >= _MAX_ATTEMPTS:
            write.error = StoreError("too many concurrent writers; nothing was written, try again")
        else:
            write.error = None
            return True
        return False

    def _commit_group(self, group: list[Write]) -> None:
        """(The writer thread, writers' lock held.) `group` in one transaction, each write
        under a savepoint of its own (`writer`). Never raises: a group that cannot commit
        fails every write in it."""
        postgresql = self.engine.dialect.name == "postgresql"
        if len(group) > 1 and postgresql and self._commit_all_or_none(group):
            return
        try:
            with self.write() as conn:
                if len(group) == 1:
                    group[0].result = group[0].work(conn)
                else:
                    driver: Any = conn.connection.dbapi_connection
                    for write in group:
                        driver.execute("SAVEPOINT attempt")
                        before = len(conn.info.get(_WRITTEN, ()))
                        try:
                            write.result = write.work(conn)
                        except Exception as exc:
                            write.error = _refusal(exc)
                            driver.execute("ROLLBACK TO attempt")
                            del conn.info.get(_WRITTEN, [])[before:]  # its events are gone too
                        driver.execute("RELEASE attempt")
        except BaseException as exc:
            for write in group:
                if write.error is None:
                    write.error = exc
                    write.result = None

    def _commit_all_or_none(self, group: list[Write]) -> bool:
        """PostgreSQL: `group` in one transaction without savepoints, each of which costs a
        round trip there (two a write: most of a grouped configure's); whether it committed.
        Writes rarely fail once they hold the chain's lock (no other writer can race them),
        so when one does, the whole group is undone and `_commit_group` writes it again,
        each write under its savepoint (every `work` may run again: `transact`)."""
        keys = [write.key for write in group if write.key is not None]
        try:
            with self.write() as conn:
                if len(keys) < len(group):
                    results = [write.work(conn) for write in group]
                else:  # appends alone: their states in one round trip, their writes in one
                    results = self._appends_pipelined(conn, group, keys)
        except Exception:
            return False
        for write, result in zip(group, results, strict=True):
            write.result = result
        return True

    def _read_ahead(self, conn: Connection, keys: list[tuple[str, str]]) -> None:
        """(PostgreSQL, chain's lock held.) Each append's `_WRITE_STATE` and its toolkit's
        `_IMPORTED`, in one statement, where a group's appends read them one by one (a round
        trip each, on the writer's path: the bound on a mixed load's configures).
        `_write_state` and `_check_imported` hand them out."""
        driver: Any = conn.connection.dbapi_connection
        sessions, toolkits = [k[0] for k in keys], [k[1] for k in keys]
        rows = driver.execute(_PG_GROUP_STATE, (sessions, toolkits)).fetchall()
        conn.info[_AHEAD] = {(row[0], row[1]): row[2:-1] for row in rows}
        conn.info[_IMPORTS_AHEAD] = {row[1]: row[-1] for row in rows}

    def _appends_pipelined(
        self, conn: Connection, group: list[Write], keys: list[tuple[str, str]]
    ) -> list[Any]:
        """(PostgreSQL, chain's lock held.) A group of appends: their states read ahead,
        their statements sent in psycopg's pipeline mode with one sync for them all (each
        append's compare-and-set is checked there: `_moved_one`). A failure anywhere fails
        the group, which `_commit_group` then writes again, write by write."""
        driver: Any = conn.connection.dbapi_connection
        self._read_ahead(conn, keys)
        pipelined: list[Any] = []
        conn.info[_PIPELINED] = pipelined
        try:
            with driver.pipeline():
                results = [write.work(conn) for write in group]
            for cursor in pipelined:
                _moved_one(conn, cursor, at_sync=True)
        finally:
            for name in (_AHEAD, _IMPORTS_AHEAD, _PIPELINED):
                conn.info.pop(name, None)
        return results

    def _advance_witness(self, seq: int, mac: bytes, *, force: bool = False) -> None:
        if self.witness is not None and self._sign is not None and seq > 0:
            head = (seq, mac, head_link(self._sign, seq, mac))
            if force:
                self.witness.put(head)
            else:
                self.witness.advance(head)


def _refusal(exc: BaseException) -> BaseException:
    """What a failed write raises: a conflict, or a connection opened read-only, as the
    driver's error (`Store.transact` tries again); any other refusal of the database as a
    `StoreError`; anything else as it is."""
    if isinstance(exc, OperationalError) and not read_only(exc.orig):
        return StoreError(f"the database refused the write ({type(exc.orig).__name__})")
    return exc


def _busy_s() -> float:
    return BUSY_TIMEOUT_MS / 1000


def _retryable(exc: DBAPIError) -> bool:
    if isinstance(exc, IntegrityError):
        return True
    code = getattr(exc.orig, "sqlstate", None)
    return code in ("40001", "40P01")


def _moved_one(conn: Connection, cursor: Any, *, at_sync: bool = False) -> None:
    """An append statement's compare-and-set: its pointer moved from the version read,
    or it raises the conflict `transact` retries; in a pipelined group, checked at its sync."""
    pipelined = None if at_sync else conn.info.get(_PIPELINED)
    if pipelined is not None:
        pipelined.append(cursor)
    elif cursor.fetchone()[0] != 1:
        raise _pointer_moved()


def _wrote(conn: Connection, *events: dict[str, Any]) -> None:
    """Note the events a transaction wrote, for the witness and the ledger once it commits."""
    conn.info.setdefault(_WRITTEN, []).extend(events)


def _pointer_moved() -> IntegrityError:
    """A lost compare-and-set, raised as the conflict `Store.transact` retries."""
    return IntegrityError("current pointer moved", None, Exception("compare-and-set lost"))
