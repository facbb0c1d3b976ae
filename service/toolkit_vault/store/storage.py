"""The store: ciphertext, wrapped keys and metadata in, the same out; no key ever.

Every change and every failed attempt is one atomic write that also appends its audit
event: a transaction of its own, or on SQLite a savepoint of its own in a group commit
(`writer`). Config versions are append-only; the current-version pointer moves only by
compare-and-set, and a writer that loses a race (unique version or audit sequence taken,
pointer moved) retries from a fresh read, so concurrent writers never lose an update.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from operator import itemgetter
from pathlib import Path
from typing import Any, cast, overload

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from toolkit_vault.errors import (
    PrincipalEnded,
    StoreError,
    ToolkitNotFound,
    VaultError,
    VersionMoved,
)
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.chain import AUDIT_FIELDS, Signer, audit_payload, head_link, verified_end
from toolkit_vault.store.database import BUSY_TIMEOUT_MS, read_only
from toolkit_vault.store.integrity import POINTERS, PRINCIPALS, SESSIONS, VERSIONS, RowAuthenticator
from toolkit_vault.store.integrity import Row as StoredRow
from toolkit_vault.store.ledger import LIVE, ChainState, Ledger, StateUnknown, behind
from toolkit_vault.store.models import (
    AuditEvent,
    AuditHead,
    ConfigVersion,
    CurrentConfig,
    ImportedToolkitRow,
    PrincipalRow,
    SessionRow,
    VaultKey,
)
from toolkit_vault.store.notices import STATE_CHANNEL, CommitNotices
from toolkit_vault.store.records import (
    AuditDraft,
    VersionDraft,
    VersionRecord,
    bounded_details,
    version_record,
)
from toolkit_vault.store.scopes import PREFIX, principal_of
from toolkit_vault.store.witness import Witness
from toolkit_vault.store.writer import Write, Writer

__all__ = ["AuditSink", "Source", "Store"]

Source = tuple[str, int]  # where a session's config of a toolkit comes from: (scope id, version)
# Takes a transaction's audit events (dicts of the chained fields, `mac`, `previous`), in
# `seq` order, before it commits; raising rolls the transaction back (`audit.devices`).
AuditSink = Callable[[Sequence[Mapping[str, Any]]], None]

log = logging.getLogger(__name__)
_SQL_LOG = logging.getLogger("sqlalchemy.engine.Engine")
_MAX_ATTEMPTS = 20
_PG_LOCK = 0x746B76  # "tkv"
# A PostgreSQL write's first round trip: the chain's lock, and the notice its commit sends
# to every process's `notices`, carrying this process's token (two statements, sent at
# once: no parameters; the token is hex).
_PG_BEGIN_WRITE = f"SELECT pg_advisory_xact_lock({_PG_LOCK}); NOTIFY {STATE_CHANNEL}, '{{}}'"


def _as_given(params: dict[str, Any]) -> dict[str, Any]:
    return params


def _in_order(names: tuple[str, ...]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A dict's values as a tuple, in `names` order (`itemgetter` of one name gives the
    value alone, of none fails)."""
    if len(names) > 1:
        return itemgetter(*names)
    return lambda params: tuple(params[name] for name in names)


class _OnDriver:
    """A prebuilt statement compiled once per dialect, then sent on the driver's own cursor
    (in the caller's transaction): through SQLAlchemy's execution machinery, even as plain
    driver SQL, every statement paid for an execution context and a result set-up, more
    CPU than the database's own work on a configure's statements (benchmarks/configure.py).
    Engine events do not see these statements (none of them writes a principal); they are
    logged as SQLAlchemy logs its own, to its engine logger at INFO. A driver error is
    raised as SQLAlchemy's, as `Store.write` and `retrying` expect, and a connection it
    leaves unusable is invalidated, as SQLAlchemy would."""

    def __init__(self, statement: Any) -> None:
        self.statement = statement
        self._compiled: dict[str, tuple[str, Callable[[dict[str, Any]], Any], dict[str, Any]]] = {}

    def _for(self, dialect: Any) -> tuple[str, Callable[[dict[str, Any]], Any], dict[str, Any]]:
        """The SQL, what picks its parameters out of a dict (named: the dict itself;
        positional: a tuple in order), and the parameters the statement fixes."""
        found = self._compiled.get(dialect.name)
        if found is None:
            compiled = self.statement.compile(dialect=dialect)
            pick = _in_order(tuple(compiled.positiontup)) if dialect.positional else _as_given
            fixed = {name: b.value for name, b in compiled.binds.items() if not b.required}
            found = self._compiled[dialect.name] = (compiled.string, pick, fixed)
        return found

    def __call__(self, conn: Connection, params: dict[str, Any] | list[dict[str, Any]]) -> Any:
        """The driver's cursor, executed: `fetchone()`, `rowcount`."""
        dialect = conn.dialect
        sql, pick, fixed = self._for(dialect)

        def bound(given: dict[str, Any]) -> Any:
            return pick({**fixed, **given} if fixed else given)

        if _SQL_LOG.isEnabledFor(logging.INFO):
            _SQL_LOG.info("%s\n[on the driver] %r", sql, params)
        driver: Any = conn.connection.dbapi_connection
        cursor = driver.cursor()
        try:
            if isinstance(params, list):
                cursor.executemany(sql, [bound(p) for p in params])
            else:
                cursor.execute(sql, bound(params))
        except dialect.loaded_dbapi.Error as exc:
            lost = read_only(exc) or dialect.is_disconnect(exc, driver, cursor)
            if lost:
                conn.invalidate()
            raise DBAPIError.instance(
                sql, None, exc, dialect.loaded_dbapi.Error, connection_invalidated=lost
            ) from None
        return cursor


# The statements of every configure and audit write, built once with bound parameters:
# building them per call cost more CPU than the rest of a configure (benchmarks/).
_LATEST_VERSION = select(func.coalesce(func.max(ConfigVersion.version), 0)).where(
    ConfigVersion.session_id == bindparam("session_id"),
    ConfigVersion.toolkit_name == bindparam("toolkit_name"),
)
_PRIMARY_KEK = select(VaultKey.key_id).where(VaultKey.is_active.is_(True))  # the active vault key
_VERSION_COLUMNS = (
    "session_id",
    "toolkit_name",
    "version",
    "status",
    "message",
    "actor",
    "created_at",
    "schema_digest",
    "public_config",
    "secret_fingerprints",
    "sealed_secrets",
    "dek_id",
    "kek_id",
    "wrapped_dek",
    "mac",
)
_INSERT_VERSION = _OnDriver(
    insert(ConfigVersion).values({c: bindparam(c) for c in _VERSION_COLUMNS})
)
_POINTER_KEY = (  # not named like a column: an UPDATE reserves those names for its SET
    CurrentConfig.session_id == bindparam("key_session"),
    CurrentConfig.toolkit_name == bindparam("key_toolkit"),
)
_CURRENT_POINTER = select(CurrentConfig.version).where(*_POINTER_KEY)
_INSERT_POINTER = _OnDriver(
    insert(CurrentConfig).values(
        session_id=bindparam("key_session"),
        toolkit_name=bindparam("key_toolkit"),
        version=bindparam("new_version"),
        updated_at=bindparam("now"),
        mac=bindparam("pointer_mac"),
    )
)
_MOVE_POINTER = _OnDriver(
    update(CurrentConfig)
    .where(*_POINTER_KEY, CurrentConfig.version == bindparam("expected"))
    .values(
        version=bindparam("new_version"), updated_at=bindparam("now"), mac=bindparam("pointer_mac")
    )
)
_EVENT_COLUMNS = (*AUDIT_FIELDS, "details", "mac")
_INSERT_EVENT = _OnDriver(insert(AuditEvent).values({c: bindparam(c) for c in _EVENT_COLUMNS}))
_INSERT_HEAD = _OnDriver(
    insert(AuditHead).values(
        id=1, seq=bindparam("new_seq"), mac=bindparam("new_mac"), head_mac=bindparam("new_head")
    )
)
_MOVE_HEAD = _OnDriver(
    update(AuditHead)
    .where(AuditHead.id == 1)
    .values(seq=bindparam("new_seq"), mac=bindparam("new_mac"), head_mac=bindparam("new_head"))
)
_CHAIN_END_COLUMNS = (  # the head's columns, then the last event's
    *(
        select(column).where(AuditHead.id == 1).scalar_subquery()
        for column in (AuditHead.seq, AuditHead.mac, AuditHead.head_mac)
    ),
    *(
        select(column).order_by(AuditEvent.seq.desc()).limit(1).scalar_subquery()
        for column in (AuditEvent.seq, AuditEvent.mac)
    ),
)
_CHAIN_END = _OnDriver(select(*_CHAIN_END_COLUMNS))
_WRITE_STATE = _OnDriver(  # one round trip: latest version, primary KEK, pointer, chain end
    select(
        _LATEST_VERSION.scalar_subquery(),
        _PRIMARY_KEK.scalar_subquery(),
        _CURRENT_POINTER.scalar_subquery(),
        *_CHAIN_END_COLUMNS,
    )
)

# A principal's revocation and expiry (`Store._principal_ended`).
_PRINCIPAL_STANDING = _OnDriver(
    select(PrincipalRow.revoked_at, PrincipalRow.expires_at).where(
        PrincipalRow.principal_id == bindparam("principal_id")
    )
)
_ENDED = {
    "revoked": "this principal's token was revoked while the request ran: nothing was stored",
    "expired": "this principal's token expired while the request ran: nothing was stored",
    "removed": "this principal was removed while the request ran: nothing was stored",
}
# A version's status (`Store._check_waiting`).
_VERSION_STATUS = _OnDriver(
    select(ConfigVersion.status).where(
        ConfigVersion.session_id == bindparam("session_id"),
        ConfigVersion.toolkit_name == bindparam("toolkit_name"),
        ConfigVersion.version == bindparam("version"),
    )
)
# An imported toolkit's package digest (`Store._check_imported`).
_IMPORTED = _OnDriver(
    select(ImportedToolkitRow.package_digest).where(
        ImportedToolkitRow.name == bindparam("toolkit_name")
    )
)
# PostgreSQL: `_WRITE_STATE` for each (scope, toolkit) of a group of appends, one row each,
# led by its key and ended by the toolkit's `_IMPORTED` (`Store._read_ahead`).
_PG_GROUP_STATE = (
    "SELECT k.s, k.t,"
    " (SELECT coalesce(max(v.version), 0) FROM config_versions v"
    "  WHERE v.session_id = k.s AND v.toolkit_name = k.t),"
    " (SELECT key_id FROM vault_keys WHERE is_active),"
    " (SELECT c.version FROM current_configs c WHERE c.session_id = k.s AND c.toolkit_name = k.t),"
    " h.seq, h.mac, h.head_mac, e.seq, e.mac,"
    " (SELECT i.package_digest FROM imported_toolkits i WHERE i.name = k.t)"
    " FROM unnest(%s::text[], %s::text[]) AS k(s, t)"
    " LEFT JOIN audit_head h ON h.id = 1"
    " LEFT JOIN (SELECT seq, mac FROM audit_events ORDER BY seq DESC LIMIT 1) e ON true"
)

_CURRENT_VERSIONS = (  # a session's current versions and their pointers
    select(
        ConfigVersion,
        CurrentConfig.version.label("pointer_version"),
        CurrentConfig.mac.label("pointer_mac"),
    )
    .join(
        CurrentConfig,
        (CurrentConfig.session_id == ConfigVersion.session_id)
        & (CurrentConfig.toolkit_name == ConfigVersion.toolkit_name)
        & (CurrentConfig.version == ConfigVersion.version),
    )
    .where(CurrentConfig.session_id.in_(bindparam("scopes", expanding=True)))
    .order_by(ConfigVersion.toolkit_name)
)
# A list's only query, run on the driver directly (`Store.fetch`): through SQLAlchemy's
# Core it cost most of a list's CPU, as a plain DBAPI statement a small part (BENCHMARKS.md).
_CURRENT_POINTERS = (
    "SELECT session_id, toolkit_name, version FROM current_configs WHERE session_id IN (?, ?)"
)


# The chain head, then the events a process has not followed yet: one statement, so one
# snapshot on either database (the first row is the head's, with NULL event columns).
_HEAD_ROW = (
    "SELECT 0, seq, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM audit_head WHERE id = 1"
)
_EVENTS_AFTER = (
    "SELECT 1, seq, ts, actor, action, session_id, toolkit_name, version, details, mac"
    " FROM audit_events WHERE seq > ?"
)
_FOLLOW = f"{_HEAD_ROW} UNION ALL {_EVENTS_AFTER} ORDER BY 1, 2"
# PostgreSQL: the same, and a session's pointers as `_CURRENT_POINTERS` gives them (kind 2,
# in the scope, toolkit and version columns): a list's read of the store in one statement.
_FOLLOW_AND_POINTERS = _FOLLOW.replace(
    " ORDER BY 1, 2",
    " UNION ALL SELECT 2, 0, NULL, NULL, NULL, session_id, toolkit_name, version, NULL, NULL"
    " FROM current_configs WHERE session_id IN (?, ?) ORDER BY 1, 2",
)
# `_FOLLOW`, at most `FOLLOW_BATCH` events at a time (`Store._follow`).
_FOLLOW_BATCH = (
    f"{_HEAD_ROW} UNION ALL SELECT * FROM ({_EVENTS_AFTER} ORDER BY seq LIMIT ?) AS batch"  # noqa: S608
    " ORDER BY 1, 2"
)
FOLLOW_BATCH = 10_000
_FOLLOWED = ("seq", "ts", "actor", "action", "session_id", "toolkit_name", "version", "details")
_WRITTEN = "tkv_written"  # conn.info: the events a transaction wrote, in order
_AHEAD = "tkv_ahead"  # conn.info: a group's append states, read ahead (`_read_ahead`)
_IMPORTS_AHEAD = "tkv_imports_ahead"  # conn.info: their toolkits' package digests, the same
_PIPELINED = "tkv_pipelined"  # conn.info: a pipelined group's appends, checked at its sync


def _prefixed_insert(table: Any, columns: Iterable[str], prefix: str) -> Any:
    return insert(table).values(
        {name: bindparam(prefix + name, type_=table.c[name].type) for name in columns}
    )


def _pg_append(pointer: str | None) -> Any:
    """PostgreSQL: a configure's four writes (version, pointer, audit event, head) as one
    statement of data-modifying CTEs, one round trip instead of four; it returns how many
    pointer rows it wrote (1 for no pointer), which compare-and-set checks as before."""
    ctes = [
        _prefixed_insert(ConfigVersion.__table__, _VERSION_COLUMNS, "v_").cte("new_version"),
        _prefixed_insert(AuditEvent.__table__, _EVENT_COLUMNS, "e_").cte("new_event"),
        _MOVE_HEAD.statement.returning(AuditHead.id).cte("new_head"),
    ]
    if pointer is None:
        return select(literal(1)).add_cte(*ctes)
    write = _INSERT_POINTER if pointer == "insert" else _MOVE_POINTER
    moved = write.statement.returning(CurrentConfig.version).cte("new_pointer")
    return select(func.count()).select_from(moved).add_cte(*ctes)


_PG_APPEND = {pointer: _OnDriver(_pg_append(pointer)) for pointer in (None, "insert", "update")}


def _effective(session_id: str, rows: Iterable[Sequence[Any]]) -> dict[str, Source]:
    """Per toolkit, the session's own pointer, else its principal's (`_CURRENT_POINTERS`)."""
    found: dict[str, Source] = {}
    for scope, name, version in rows:
        if scope == session_id or name not in found:
            found[name] = (scope, version)
    return found


def _refusal(exc: BaseException) -> BaseException:
    """What a failed write raises: a conflict, or a connection opened read-only, as the
    driver's error (`Store.retrying` tries again); any other refusal of the database as a
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


class Store:
    """Repository over one engine. `sign` computes audit chain links and `rows` the MACs of
    authenticated rows; both hold keys the database only has wrapped (see `integrity`)."""

    def __init__(
        self,
        engine: Engine,
        sign: Signer | None = None,
        rows: RowAuthenticator | None = None,
        witness: Witness | None = None,
        audit_sink: AuditSink | None = None,
    ) -> None:
        self.engine = engine
        self._sign = sign
        self._rows = rows
        self.witness = witness
        self.audit_sink = audit_sink  # the audit devices: each write's events, in seq order
        self._ledger: Ledger | None = None if sign is None else Ledger(sign)
        self._followed_mark: int | None = None
        self._accepting_restore = False
        self.makes_witness = False  # `init`: a home without a witness gets one
        self._witness_verified: tuple[int, bytes, bytes] | None = None
        self._witness_looked_at: list[tuple[int, bytes, bytes]] | None = None  # `witnessed`
        # This process's writes queue for its writer thread, which commits them in groups
        # (`writer`), and a write of its own (`write`) waits on the same lock. SQLite: instead
        # of on its busy handler, which sleeps up to 100 ms between tries (and so gave
        # concurrent writers a p99 of seconds: BENCHMARKS.md); other processes queue on the
        # file. PostgreSQL: a group holds the chain's advisory lock once for all the writes
        # queued meanwhile, instead of each write taking it in a transaction of its own (its
        # throughput fell as connections rose: BENCHMARKS.md); other processes queue on it.
        self._writers = threading.RLock()
        self._writer = Writer(self._commit_group, self._again, self._writers, _busy_s)
        self.notices: CommitNotices | None = None  # PostgreSQL's commit mark, once `listen`ed
        self._notice_token = secrets.token_hex(8)  # tells this process's notices from others'
        self._pg_begin_write = _PG_BEGIN_WRITE.format(self._notice_token)
        self._placeholder = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        # The SQLite file a connection of the store's own watches (`_on_watch`); mode=rw: it
        # never creates a missing file. None: nothing to watch (PostgreSQL, in memory, URI).
        url = engine.url
        on_file = url.database not in (None, "", ":memory:") and not url.query
        self._watched: str | None = None
        if url.get_backend_name() == "sqlite" and on_file and url.database:
            self._watched = Path(url.database).resolve().as_uri() + "?mode=rw"
        self._watch: sqlite3.Connection | None = None
        self._watch_lock = threading.Lock()

    @property
    def commits_in_groups(self) -> bool:
        """Whether this process's writes commit on the store's writer thread, so a caller's
        thread leaves its write there instead of waiting on the database (always, now; kept
        for the transports that ask)."""
        return True

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

    def set_keys(self, sign: Signer, rows: RowAuthenticator | None) -> None:
        self._sign, self._rows = sign, rows
        self._ledger, self._followed_mark = Ledger(sign), None

    # -- freshness: the verified chain's word, followed (see `ledger`) ----------------------

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
        return ledger.require()

    def chain_state_at_once(self) -> ChainState | None:
        """`chain_state`, followed only if that needs no wait (SQLite: one statement on the
        watching connection, which never waits for a lock), so it may run on an event loop;
        PostgreSQL: the ledger as it is, while no other process committed since its last
        read (`notices.foreign`), which its own commits kept current (`Ledger.committed`).
        None when it cannot be read so (a lock held, a first walk, a failure, a commit of
        another process or a doubt)."""
        ledger = self._ledger
        if ledger is None or ledger.failure is not None or ledger.seq == 0:
            return None
        if self.notices is not None:
            foreign = self.notices.foreign()
            if foreign is None or foreign != self._followed_mark:
                return None
            return None if ledger.failure is not None else ledger.state
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
            last = conn.execute(select(func.max(AuditEvent.seq))).scalar()
            stored = conn.execute(select(AuditEvent.mac).where(AuditEvent.seq == seq)).scalar()
        if (last or 0) < seq:
            return behind(seq, last or 0)
        if stored is None or not hmac.compare_digest(bytes(stored), mac):
            return (
                f"the database holds another audit event {seq} than the one this vault home "
                "witnessed: it is another database, or an older copy written over since"
            )
        return None

    def _advance_witness(self, seq: int, mac: bytes, *, force: bool = False) -> None:
        if self.witness is not None and self._sign is not None and seq > 0:
            head = (seq, mac, head_link(self._sign, seq, mac))
            if force:
                self.witness.put(head)
            else:
                self.witness.advance(head)

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
            if self._ledger is not None and self._sign is not None:
                self._ledger, self._followed_mark = Ledger(self._sign), None

    def mac(self, table: str, row: StoredRow) -> bytes:
        """The MAC a row of `table` is written with (`integrity` says what it covers)."""
        if self._rows is None:
            raise StoreError("the state key is not loaded: run `toolkit-vault init`")
        return self._rows.mac(table, row)

    def authentic(self, table: str, row: StoredRow) -> bool:
        """Whether a row read back is exactly as the vault wrote it (never raises)."""
        return self._rows is not None and self._rows.verify(table, row)

    @contextmanager
    def write(self) -> Iterator[Connection]:
        queue = self._writers
        if not queue.acquire(timeout=BUSY_TIMEOUT_MS / 1000):
            raise StoreError("the database refused the write (busy)")
        try:
            with self.engine.connect().execution_options(vault_write=True) as conn:
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
            with self.engine.connect() as conn, conn.begin():
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
            cursor.execute(sql, params)
            return list(cursor.fetchall())
        except self.engine.dialect.loaded_dbapi.Error as exc:
            alone = False
            raw.invalidate()  # whatever broke, the next read gets a fresh connection
            raise StoreError(f"the database refused the read ({type(exc).__name__})") from None
        finally:
            if alone:
                driver.autocommit = False
            raw.close()

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
        rows = self._on_watch("PRAGMA data_version", ())
        return None if rows is None else int(rows[0][0])

    def pointers_at_once(self, session_id: str, scope_id: str) -> dict[str, Source] | None:
        """`effective_pointers`, read only if it needs no wait (SQLite: one `SELECT` on the
        watching connection, which never waits for a lock), so it may run on an event loop;
        PostgreSQL: the pointers the ledger's state makes current, while it is current
        without a read (`chain_state_at_once`). None when it cannot be read so (a lock held,
        anything odd)."""
        if self.notices is not None:
            state = self.chain_state_at_once()
            if state is None:
                return None
            scopes = (scope_id, session_id)
            return {
                name: (scope, version)
                for scope in scopes
                for name, version in state.pointers.get(scope, {}).items()
            }
        rows = self._on_watch(_CURRENT_POINTERS, (session_id, scope_id))
        return None if rows is None else _effective(session_id, rows)

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

    def retrying(
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
        each write under its savepoint (every `work` may run again: `retrying`)."""
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

    def _check_imported(self, conn: Connection, toolkit_name: str, digest: str) -> None:
        """(In an append's write transaction.) The package `digest` is still the one imported
        under `toolkit_name` (as its group read it ahead, or read now), or nothing is written.

        A process brings its registry in line with the chain before each configure of an
        imported toolkit (`Vault.toolkit`); this closes the moment between that and the
        write, in which another process may remove the toolkit: the version would otherwise
        become current after its removal, and so configured again by a later import of the
        name. Writes are serialized (SQLite's lock, PostgreSQL's advisory lock, held since
        before the group read ahead), so a removal is either committed before this reads or
        waits for the configure and then ends it."""
        ahead = conn.info.get(_IMPORTS_AHEAD)
        if ahead is not None and toolkit_name in ahead:
            found = ahead[toolkit_name]
        else:
            row = _IMPORTED(conn, {"toolkit_name": toolkit_name}).fetchone()
            found = None if row is None else row[0]
        if found is None:
            raise ToolkitNotFound("toolkit not found")
        if found != digest:
            raise VaultError(
                f"toolkit {toolkit_name!r} was imported again meanwhile: nothing stored"
            )

    @staticmethod
    def _check_waiting(
        conn: Connection, session_id: str, toolkit_name: str, waiting: int, latest: int
    ) -> None:
        """(In an append's write transaction.) `waiting` is still the last version and not
        purged. A purge keeps a shredded version's number, so the number alone would let
        a config typed (or a token exchanged) while the purge landed make the toolkit
        configured again."""
        if latest != waiting:
            raise VersionMoved(f"{toolkit_name}: a version was written after {waiting}")
        key = {"session_id": session_id, "toolkit_name": toolkit_name, "version": waiting}
        row = _VERSION_STATUS(conn, key).fetchone()
        if row is None or row[0] == "purged":  # `audit.history`'s shredded status
            raise VersionMoved(f"{toolkit_name}: version {waiting} was purged", purged=True)

    def _write_state(self, conn: Connection, params: dict[str, Any]) -> Sequence[Any]:
        """An append's `_WRITE_STATE`: read, or as its group read it ahead (or as the
        group's last append to the same key left it: `_appended`), then with the chain's
        end at the last event this transaction wrote (under the chain's lock, as
        `audit_many` follows its own links). Any other write reads."""
        ahead = conn.info.get(_AHEAD)
        key = (params["session_id"], params["toolkit_name"])
        found: Sequence[Any] | None = None if ahead is None else ahead.get(key)
        if found is None or self._sign is None:
            state: Sequence[Any] = _WRITE_STATE(conn, params).fetchone()
            return state
        written = conn.info.get(_WRITTEN)
        if not written:
            return found
        seq, mac = written[-1]["seq"], written[-1]["mac"]
        return (*found[:3], seq, mac, head_link(self._sign, seq, mac), seq, mac)

    def audit(self, conn: Connection, draft: AuditDraft) -> None:
        """Append the next chain link and move the authenticated head, in the caller's
        transaction."""
        event, head = self._link(draft, _CHAIN_END(conn, {}).fetchone())
        _write_link(conn, event, head)

    def audit_many(self, conn: Connection, drafts: Sequence[AuditDraft]) -> None:
        """Append many links at once, for bulk loads: one read of the chain end, one insert
        of all the events, one move of the head."""
        chain_end: Sequence[Any] = _CHAIN_END(conn, {}).fetchone()
        events: list[dict[str, Any]] = []
        head: dict[str, Any] = {}
        for draft in drafts:
            event, head = self._link(draft, chain_end)
            events.append(event)
            seq, mac = event["seq"], event["mac"]
            chain_end = (seq, mac, head["new_head"], seq, mac)
        if events:
            _INSERT_EVENT(conn, events)
            (_INSERT_HEAD if events[0]["seq"] == 1 else _MOVE_HEAD)(conn, head)
            _wrote(conn, *events)

    def _link(
        self, draft: AuditDraft, chain_end: Sequence[Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The next event row and head parameters, after `chain_end` (the columns of
        `_CHAIN_END`, read in this transaction). A head that does not match the last event
        (tail deleted, rows forged beyond it) stops every write rather than extending a
        chain it cannot vouch for."""
        if self._sign is None:
            raise StoreError("the audit key is not loaded")
        last_seq, previous = verified_end(chain_end, self._sign)
        self._require_current(last_seq)
        seq = last_seq + 1
        event: dict[str, Any] = {
            "seq": seq,
            "ts": time.time(),
            "actor": draft.actor,
            "action": str(draft.action),  # the stored text, not the enum member
            "session_id": draft.session_id,
            "toolkit_name": draft.toolkit_name,
            "version": draft.version,
            "details": bounded_details(draft.details),  # bounded: callers size them
        }
        mac = self._sign(previous, audit_payload(event))
        head = {"new_seq": seq, "new_mac": mac, "new_head": head_link(self._sign, seq, mac)}
        return {**event, "mac": mac, "previous": previous}, head

    def _require_current(self, last_seq: int) -> None:
        """Writes extend only a chain that is at least what the witness saw, and that this
        process has not found broken (a write never launders a rolled-back database)."""
        if self._ledger is not None and self._ledger.failure is not None:
            raise StoreError(self._ledger.failure)
        witness = self.witnessed()
        if witness is not None and last_seq < witness[0]:
            raise StoreError(behind(witness[0], last_seq))
        excused = self.makes_witness or self._accepting_restore
        if witness is None and self.witness is not None and last_seq > 0 and not excused:
            raise StoreError(_missing(self.witness))

    # -- principals and sessions ------------------------------------------------------------

    def ensure_principal(self, principal_id: str, name: str, role: str) -> None:
        """The tokenless principal of local transports (stdio), made once by `init`."""
        with self.read() as conn:
            found = conn.execute(
                select(PrincipalRow.principal_id).where(PrincipalRow.principal_id == principal_id)
            ).first()
        if found is None:
            row = {
                "principal_id": principal_id,
                "name": name,
                "role": role,
                "token_hash": None,
                "created_at": time.time(),
                "revoked_at": None,
            }
            self.retrying(
                lambda conn: conn.execute(
                    insert(PrincipalRow).values(**row, mac=self.mac(PRINCIPALS, row))
                )
            )

    def create_session(self, session_id: str, principal_id: str) -> None:
        row = {"session_id": session_id, "principal_id": principal_id, "created_at": time.time()}

        def work(conn: Connection) -> None:
            conn.execute(insert(SessionRow).values(**row, mac=self.mac(SESSIONS, row)))
            self.audit(
                conn, AuditDraft(principal_id, AuditAction.SESSION_CREATED, session_id=session_id)
            )

        self.retrying(work)

    def session_owned_by(self, session_id: str, principal_id: str) -> bool:
        """True only for a session row the vault wrote for this principal: a row whose owner
        was edited (or that was inserted by hand) fails its MAC and owns nothing."""
        with self.read() as conn:
            row = conn.execute(
                select(SessionRow).where(SessionRow.session_id == session_id)
            ).first()
        if row is None or row.principal_id != principal_id:
            return False
        if not self.authentic(SESSIONS, row._mapping):
            log.warning("session %s fails its integrity check; refused", session_id)
            return False
        return True

    # -- config versions ----------------------------------------------------------------------

    @overload
    def append_version(
        self,
        session_id: str,
        toolkit_name: str,
        build: Callable[[int, str], VersionDraft],
        audit_action: AuditAction,
        *,
        imported: str | None = None,
        after: int | None = None,
        waiting: int | None = None,
        principal: str | None = None,
    ) -> int: ...

    @overload
    def append_version(
        self,
        session_id: str,
        toolkit_name: str,
        build: Callable[[int, str], VersionDraft],
        audit_action: AuditAction,
        then: Callable[[int], None],
        *,
        imported: str | None = None,
        after: int | None = None,
        waiting: int | None = None,
        principal: str | None = None,
    ) -> int | None: ...

    def append_version(
        self,
        session_id: str,
        toolkit_name: str,
        build: Callable[[int, str], VersionDraft],
        audit_action: AuditAction,
        then: Callable[[int], None] | None = None,
        *,
        imported: str | None = None,
        after: int | None = None,
        waiting: int | None = None,
        principal: str | None = None,
    ) -> int | None:
        """Append the next version (built for its number) and, if live, make it current;
        `then(version)` once it is committed (and the write may be left to commit:
        `retrying`). `imported`: the package digest of the imported toolkit the config was
        validated against; nothing is written unless it is still the one imported under
        `toolkit_name` (`_check_imported`). `after`: the version the caller read as current
        and built on; nothing is written (VersionMoved) unless it is still the last and
        still current: a version appended since, or a purge, stands. `waiting`: the version
        that waits for a person's config (an intake link's); nothing is written unless it
        is still the last and not purged (`_check_waiting`). `principal`: the principal the
        write acts for; nothing is written (PrincipalEnded, with a `configure_refused`
        event) unless its token is still neither revoked nor expired (`_principal_ended`).

        `build(version, primary_kek_id)` is called again with a new number when another
        writer took the previous one, because every envelope is bound to its version
        number; it learns the store's active vault key inside the transaction, so a writer
        whose ring predates a rotation can rewrap under the new key before it commits.
        """

        def work(conn: Connection) -> int | PrincipalEnded:
            if principal is not None and (ended := self._principal_ended(conn, principal)):
                why = {"reason": type(ended).__name__, "token": ended.message}
                action = AuditAction.CONFIGURE_REFUSED
                self.audit(conn, AuditDraft(principal, action, session_id, toolkit_name, None, why))
                return PrincipalEnded(_ENDED[ended.message])  # the refusal's event commits
            if imported is not None:
                self._check_imported(conn, toolkit_name, imported)
            key = {"session_id": session_id, "toolkit_name": toolkit_name}
            pointer = {"key_session": session_id, "key_toolkit": toolkit_name}
            state = self._write_state(conn, {**key, **pointer})
            latest, primary, current, chain_end = state[0], state[1], state[2], state[3:]
            if after is not None and not int(latest) == current == after:
                raise VersionMoved(f"{toolkit_name}: version {after} is no longer current")
            if waiting is not None:
                self._check_waiting(conn, session_id, toolkit_name, waiting, int(latest))
            if primary is None:
                raise StoreError("the store has no active vault key: run `toolkit-vault init`")
            version = int(latest) + 1
            draft = build(version, primary)
            now = time.time()
            row = draft.columns(session_id, toolkit_name, version, now)
            row["mac"] = self.mac(VERSIONS, row)
            details = {"status": draft.status, "changed": sorted(draft.secret_fingerprints)}
            if principal_of(session_id) is not None:
                details["scope"] = "principal"
            event, head = self._link(
                AuditDraft(draft.actor, audit_action, session_id, toolkit_name, version, details),
                chain_end,
            )
            target = {"session_id": session_id, "toolkit_name": toolkit_name, "version": version}
            move = {**pointer, "expected": current, "new_version": version, "now": now}
            move["pointer_mac"] = self.mac(POINTERS, target)
            live = draft.status in LIVE
            if conn.dialect.name == "postgresql" and head["new_seq"] > 1:
                pointer_write = ("insert" if current is None else "update") if live else None
                params = {f"v_{k}": v for k, v in row.items()}
                params |= {f"e_{k}": v for k, v in event.items()}
                _moved_one(conn, _PG_APPEND[pointer_write](conn, params | head | move))
                _wrote(conn, event)
                _appended(conn, (session_id, toolkit_name), version, primary, current, live)
                return version
            _INSERT_VERSION(conn, row)
            if live:
                if current is None:
                    _INSERT_POINTER(conn, move)
                elif _MOVE_POINTER(conn, move).rowcount != 1:
                    raise _pointer_moved()
            _write_link(conn, event, head)
            return version

        def told(result: int | PrincipalEnded) -> None:
            if isinstance(result, PrincipalEnded):
                raise result  # the refusal's event committed; the caller hears the refusal
            if then is not None:
                then(result)

        # keyed: its group may read its state ahead and pipeline it (`_appends_pipelined`);
        # with no `then`, nothing is left to commit (the caller waits for the version)
        key = (session_id, toolkit_name)
        result = self.retrying(work, None if then is None else told, key)
        if isinstance(result, PrincipalEnded):
            raise result
        return cast("int | None", result)

    @staticmethod
    def _principal_ended(conn: Connection, principal_id: str) -> PrincipalEnded | None:
        """(In the write's transaction, under the chain's lock.) Whether the principal's
        token was revoked or expired since its request was let in, or the principal removed:
        a revocation commits its event under the same lock, so it is either seen here or
        ordered after this write. The message is the audit event's word for it."""
        row = _PRINCIPAL_STANDING(conn, {"principal_id": principal_id}).fetchone()
        if row is None:
            return PrincipalEnded("removed")
        if row[0] is not None:
            return PrincipalEnded("revoked")
        if row[1] is not None and time.time() >= row[1]:
            return PrincipalEnded("expired")
        return None

    def effective_pointers(self, session_id: str, scope_id: str) -> dict[str, Source]:
        """Per toolkit, where the session's config comes from: its own current version, else
        the one of `scope_id` (its principal's). Pointers as stored: `effective_versions`
        authenticates what is opened."""
        return _effective(session_id, self.fetch(_CURRENT_POINTERS, (session_id, scope_id)))

    def effective_sources(
        self, session_id: str, scope_id: str
    ) -> tuple[dict[str, Source], ChainState | None]:
        """`effective_pointers` and the chain's state, followed in the same read (one
        transaction); None for the state when nothing stored can be believed."""
        if self._placeholder != "?" and self._ledger is not None:
            return self._sources_in_one_statement(session_id, scope_id, self._ledger)
        sql = _CURRENT_POINTERS.replace("?", self._placeholder)
        with self.read() as conn:
            try:
                state: ChainState | None = self.chain_state(conn)
            except StateUnknown:
                state = None
            rows = conn.exec_driver_sql(sql, (session_id, scope_id)).all()
        return _effective(session_id, rows), state

    def _sources_in_one_statement(
        self, session_id: str, scope_id: str, ledger: Ledger
    ) -> tuple[dict[str, Source], ChainState | None]:
        """PostgreSQL: `effective_sources` as one statement in autocommit (`fetch`), one
        snapshot, one round trip where a transaction took four (a list's read, each time
        another write moved the commit mark: a mixed load's lists are mostly these)."""
        mark = self._followed_by(None)
        if ledger.seq == 0 and ledger.failure is None:  # a first walk: in batches
            with suppress(StateUnknown):  # the ledger says why; the state below is None
                self.chain_state()
        witness = self.witnessed()  # before the read, as `chain_state` takes it
        after = ledger.seq
        rows = self.fetch(_FOLLOW_AND_POINTERS, (after, session_id, scope_id))
        if ledger.failure is None:
            self._take_rows(ledger, witness, after, [r for r in rows if r[0] != 2], mark)
        try:
            state: ChainState | None = ledger.require()
        except StateUnknown:
            state = None
        return _effective(session_id, [(r[5], r[6], r[7]) for r in rows if r[0] == 2]), state

    def effective_versions(self, session_id: str, scope_id: str) -> dict[str, VersionRecord]:
        """The current version each toolkit of the session resolves to (`effective_pointers`),
        as `current_versions` reads and authenticates it."""
        found: dict[str, VersionRecord] = {}
        for record in self.current_versions(session_id, scope_id):
            if record.session_id == session_id or record.toolkit_name not in found:
                found[record.toolkit_name] = record
        chain = self._ledger.state if self._ledger is not None else None
        for name, record in found.items():
            own = chain is not None and chain.pointer(session_id, name) is not None
            if record.session_id != session_id and own:
                # The chain says the session has its own config: its pointer was deleted,
                # and the principal's must not stand in for it.
                log.warning("%s of session %s: its own pointer is gone; refused", name, session_id)
                found[name] = replace(record, authentic=False)
        return found

    def current_versions(self, *scope_ids: str) -> list[VersionRecord]:
        """The current version of every toolkit configured in these scopes (sessions or
        principal scopes), each marked `authentic` only when its row and its pointer carry
        valid MACs and the pointer names the version the verified audit chain makes
        current (a pointer put back from an older copy, after a purge or a newer version,
        is not believed; see `ledger`)."""
        for attempt in (1, 2):
            with self.read() as conn:
                try:
                    state: ChainState | None = self.chain_state(conn, force=attempt == 2)
                except StateUnknown as exc:
                    log.error("stored configs are not believed: %s", exc)
                    state = None
                rows = conn.execute(_CURRENT_VERSIONS, {"scopes": list(scope_ids)}).all()
            records = [self._checked(row, state) for row in rows]
            if state is None or all(r.authentic for r in records):
                break  # else once more, after following the chain in the rows' snapshot
        for record in records:
            if not record.authentic:
                log.warning(
                    "%s of scope %s fails its integrity or freshness check; not initialized",
                    record.toolkit_name,
                    record.session_id,
                )
        return records

    def _checked(self, row: Any, state: ChainState | None) -> VersionRecord:
        mapping = row._mapping
        pointer = {
            "session_id": row.session_id,
            "toolkit_name": row.toolkit_name,
            "version": row.pointer_version,
            "mac": row.pointer_mac,
        }
        authentic = (
            state is not None
            and state.pointer(row.session_id, row.toolkit_name) == row.version
            and self.authentic(VERSIONS, mapping)
            and self.authentic(POINTERS, pointer)
        )
        return version_record(mapping, authentic=authentic)

    def version_if_latest(self, scope: str, toolkit: str, version: int) -> VersionRecord | None:
        """A version, only if it is authentic and the last one the verified chain wrote
        for (scope, toolkit) (an intake link's pending version: one edited, deleted or
        followed by another is refused)."""
        with self.read() as conn:
            state = self.chain_state(conn)
            row = conn.execute(
                select(ConfigVersion).where(
                    ConfigVersion.session_id == scope,
                    ConfigVersion.toolkit_name == toolkit,
                    ConfigVersion.version == version,
                )
            ).first()
        if state.last_version(scope, toolkit) != version or row is None:
            return None
        if not self.authentic(VERSIONS, row._mapping):
            log.warning("%s v%s of scope %s fails its integrity check", toolkit, version, scope)
            return None
        return version_record(row._mapping)

    def ensure_scope(self, scope_id: str, principal_id: str) -> None:
        """The `sessions` row of a principal scope, made (and audited like a session) on its
        first use; a concurrent maker's row is taken as is."""
        row = {"session_id": scope_id, "principal_id": principal_id, "created_at": time.time()}

        def work(conn: Connection) -> None:
            found = conn.execute(
                select(SessionRow.session_id).where(SessionRow.session_id == scope_id)
            ).first()
            if found is None:
                conn.execute(insert(SessionRow).values(**row, mac=self.mac(SESSIONS, row)))
                details = {"scope": "principal"}
                made = AuditDraft(
                    principal_id, AuditAction.SESSION_CREATED, scope_id, details=details
                )
                self.audit(conn, made)

        self.retrying(work)

    def versions_by_scope(self) -> dict[str, int]:
        """How many config versions each kind of scope holds (for `check`)."""
        principal = ConfigVersion.session_id.startswith(PREFIX, autoescape=True)
        query = select(
            select(func.count()).select_from(ConfigVersion).scalar_subquery(),
            select(func.count()).where(principal).scalar_subquery(),
        )
        with self.read() as conn:
            total, principals = conn.execute(query).one()
        return {"session": int(total) - int(principals), "principal": int(principals)}

    def record_attempt(self, draft: AuditDraft) -> None:
        """Audit a refused attempt (unknown toolkit, invalid config) that stored nothing else."""
        self.retrying(lambda conn: self.audit(conn, draft))


def _write_link(conn: Connection, event: dict[str, Any], head: dict[str, Any]) -> None:
    """Append a chain link made by `Store._link` and move the head to it (the first link
    creates the head row)."""
    _INSERT_EVENT(conn, event)
    (_INSERT_HEAD if head["new_seq"] == 1 else _MOVE_HEAD)(conn, head)
    _wrote(conn, event)


def _appended(
    conn: Connection, key: tuple[str, str], version: int, primary: str, current: Any, live: bool
) -> None:
    """In a group read ahead: the key's state after this append, for the next one to it."""
    ahead = conn.info.get(_AHEAD)
    if ahead is not None and key in ahead:
        ahead[key] = (version, primary, version if live else current)


def _moved_one(conn: Connection, cursor: Any, *, at_sync: bool = False) -> None:
    """An append statement's compare-and-set: its pointer moved from the version read,
    or it raises the conflict `retrying` retries; in a pipelined group, checked at its sync."""
    pipelined = None if at_sync else conn.info.get(_PIPELINED)
    if pipelined is not None:
        pipelined.append(cursor)
    elif cursor.fetchone()[0] != 1:
        raise _pointer_moved()


def _wrote(conn: Connection, *events: dict[str, Any]) -> None:
    """Note the events a transaction wrote, for the witness and the ledger once it commits."""
    conn.info.setdefault(_WRITTEN, []).extend(events)


def _missing(witness: Witness) -> str:
    return (
        f"the audit witness {witness.path} is missing: nothing stored is believed; if this "
        "database is the latest, run `toolkit-vault init` to witness it again"
    )


def _pointer_moved() -> IntegrityError:
    """A lost compare-and-set, raised as the conflict `Store.retrying` retries."""
    return IntegrityError("current pointer moved", None, Exception("compare-and-set lost"))
