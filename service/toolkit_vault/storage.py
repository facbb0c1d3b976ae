"""The store: ciphertext, wrapped keys and metadata in, the same out; no key ever.

Every change and every failed attempt is one transaction that also appends its audit
event. Config versions are append-only; the current-version pointer moves only by
compare-and-set, and a writer that loses a race (unique version or audit sequence taken,
pointer moved) retries from a fresh read, so concurrent writers never lose an update.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    func,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from .chain import AUDIT_FIELDS, Signer, audit_payload, head_link, verified_end
from .database import BUSY_TIMEOUT_MS, read_only
from .errors import StoreError
from .models import (
    AuditEvent,
    AuditHead,
    ConfigVersion,
    CurrentConfig,
    InternalKey,
    MasterKey,
    Principal,
)
from .models import Session as SessionRow
from .records import AuditDraft, VersionDraft, VersionRecord, version_record

__all__ = ["Store"]

_MAX_ATTEMPTS = 20
_PG_LOCK = 0x746B76  # "tkv"
_LIVE = ("ok", "partial")

# The statements of every configure and audit write, built once with bound parameters:
# building them per call cost more CPU than the rest of a configure (benchmarks/).
_LATEST_VERSION = select(func.coalesce(func.max(ConfigVersion.version), 0)).where(
    ConfigVersion.session_id == bindparam("session_id"),
    ConfigVersion.toolkit_name == bindparam("toolkit_name"),
)
_PRIMARY_KEK = select(MasterKey.kek_id).where(MasterKey.is_primary.is_(True))
_INSERT_VERSION = insert(ConfigVersion)
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
)
_POINTER_KEY = (  # not named like a column: an UPDATE reserves those names for its SET
    CurrentConfig.session_id == bindparam("key_session"),
    CurrentConfig.toolkit_name == bindparam("key_toolkit"),
)
_CURRENT_POINTER = select(CurrentConfig.version).where(*_POINTER_KEY)
_CURRENT_TOOLKITS = select(CurrentConfig.toolkit_name).where(  # built once: half a list's read
    CurrentConfig.session_id == bindparam("session_id")
)
_INSERT_POINTER = insert(CurrentConfig).values(
    session_id=bindparam("key_session"),
    toolkit_name=bindparam("key_toolkit"),
    version=bindparam("new_version"),
    updated_at=bindparam("now"),
)
_MOVE_POINTER = (
    update(CurrentConfig)
    .where(*_POINTER_KEY, CurrentConfig.version == bindparam("expected"))
    .values(version=bindparam("new_version"), updated_at=bindparam("now"))
)
_INSERT_EVENT = insert(AuditEvent)
_INSERT_HEAD = insert(AuditHead).values(
    id=1, seq=bindparam("new_seq"), mac=bindparam("new_mac"), head_mac=bindparam("new_head")
)
_MOVE_HEAD = (
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
_CHAIN_END = select(*_CHAIN_END_COLUMNS)
_WRITE_STATE = select(  # one round trip: latest version, primary KEK, pointer, chain end
    _LATEST_VERSION.scalar_subquery(),
    _PRIMARY_KEK.scalar_subquery(),
    _CURRENT_POINTER.scalar_subquery(),
    *_CHAIN_END_COLUMNS,
)


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
        _prefixed_insert(AuditEvent.__table__, (*AUDIT_FIELDS, "details", "mac"), "e_").cte(
            "new_event"
        ),
        _MOVE_HEAD.returning(AuditHead.id).cte("new_head"),
    ]
    if pointer is None:
        return select(literal(1)).add_cte(*ctes)
    write = _INSERT_POINTER if pointer == "insert" else _MOVE_POINTER
    moved = write.returning(CurrentConfig.version).cte("new_pointer")
    return select(func.count()).select_from(moved).add_cte(*ctes)


_PG_APPEND = {pointer: _pg_append(pointer) for pointer in (None, "insert", "update")}


def _retryable(exc: DBAPIError) -> bool:
    if isinstance(exc, IntegrityError):
        return True
    code = getattr(exc.orig, "sqlstate", None)
    return code in ("40001", "40P01")


class Store:
    """Repository over one engine; `sign` computes audit chain links (key held elsewhere)."""

    def __init__(self, engine: Engine, sign: Signer | None = None) -> None:
        self.engine = engine
        self._sign = sign
        # SQLite: this process's writers queue on a lock, woken in turn, instead of on
        # SQLite's busy handler, which sleeps up to 100 ms between tries (configure p99 at
        # 16 concurrent writers: 1-2 s without it). Other processes still queue on the file.
        self._writers = threading.RLock() if engine.dialect.name == "sqlite" else None

    def set_signer(self, sign: Signer) -> None:
        self._sign = sign

    @contextmanager
    def write(self) -> Iterator[Connection]:
        queue = self._writers
        if queue is not None and not queue.acquire(timeout=BUSY_TIMEOUT_MS / 1000):
            raise StoreError("the database refused the write (busy)")
        try:
            with self.engine.connect().execution_options(vault_write=True) as conn, conn.begin():
                if conn.dialect.name == "postgresql":
                    # The audit chain is one sequence: writers queue here, as SQLite's
                    # BEGIN IMMEDIATE makes them queue, instead of failing and retrying.
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
                yield conn
        except IntegrityError:
            raise
        except OperationalError as exc:
            if read_only(exc.orig):
                raise  # `retrying` tries once more: the pool dropped that connection
            raise StoreError(
                f"the database refused the write ({type(exc.orig).__name__})"
            ) from None
        finally:
            if queue is not None:
                queue.release()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn, conn.begin():
                yield conn
        except OperationalError as exc:
            raise StoreError(f"the database refused the read ({type(exc.orig).__name__})") from None

    def retrying(self, work: Callable[[Connection], Any]) -> Any:
        for attempt in range(_MAX_ATTEMPTS):
            try:
                with self.write() as conn:
                    return work(conn)
            except DBAPIError as exc:
                # A connection opened while the SQLite file was read-only stays so; with a
                # fresh one, the write succeeds if the file is writable again.
                fresh = attempt == 0 and read_only(exc.orig)
                if not (fresh or _retryable(exc)):
                    raise StoreError(
                        f"the database refused the write ({type(exc.orig).__name__})"
                    ) from None
        raise StoreError("too many concurrent writers; nothing was written, try again")

    def audit(self, conn: Connection, draft: AuditDraft) -> None:
        """Append the next chain link and move the authenticated head, in the caller's
        transaction."""
        _write_link(conn, *self._link(draft, conn.execute(_CHAIN_END).one()))

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
        seq = last_seq + 1
        event: dict[str, Any] = {
            "seq": seq,
            "ts": time.time(),
            "actor": draft.actor,
            "action": draft.action,
            "session_id": draft.session_id,
            "toolkit_name": draft.toolkit_name,
            "version": draft.version,
            "details": json.dumps(draft.details),
        }
        mac = self._sign(previous, audit_payload(event))
        head = {"new_seq": seq, "new_mac": mac, "new_head": head_link(self._sign, seq, mac)}
        return {**event, "mac": mac}, head

    # -- keys ---------------------------------------------------------------------------

    def master_keys(self) -> list[MasterKey]:
        with self.read() as conn:
            rows = conn.execute(select(MasterKey).order_by(MasterKey.created_at)).all()
        return [MasterKey(**row._mapping) for row in rows]

    def internal_keys(self) -> dict[str, tuple[str, bytes]]:
        with self.read() as conn:
            rows = conn.execute(
                select(InternalKey.name, InternalKey.kek_id, InternalKey.wrapped_key)
            )
            return {name: (kek_id, bytes(wrapped)) for name, kek_id, wrapped in rows}

    def bootstrap_keys(
        self, kek_id: str, check_value: bytes, internal: dict[str, bytes], actor: str
    ) -> None:
        """Record the first KEK and the wrapped internal keys, with the first audit event."""

        def work(conn: Connection) -> None:
            conn.execute(
                insert(MasterKey).values(
                    kek_id=kek_id, check_value=check_value, is_primary=True, created_at=time.time()
                )
            )
            for name, wrapped in internal.items():
                conn.execute(
                    insert(InternalKey).values(name=name, kek_id=kek_id, wrapped_key=wrapped)
                )
            self.audit(conn, AuditDraft(actor, "vault_initialized", details={"kek_id": kek_id}))

        self.retrying(work)

    # -- principals and sessions ------------------------------------------------------------

    def ensure_principal(self, principal_id: str, name: str, role: str) -> None:
        with self.read() as conn:
            found = conn.execute(
                select(Principal.principal_id).where(Principal.principal_id == principal_id)
            ).first()
        if found is None:
            self.retrying(
                lambda conn: conn.execute(
                    insert(Principal).values(
                        principal_id=principal_id, name=name, role=role, created_at=time.time()
                    )
                )
            )

    def create_session(self, session_id: str, principal_id: str) -> None:
        def work(conn: Connection) -> None:
            conn.execute(
                insert(SessionRow).values(
                    session_id=session_id, principal_id=principal_id, created_at=time.time()
                )
            )
            self.audit(conn, AuditDraft(principal_id, "session_created", session_id=session_id))

        self.retrying(work)

    def session_owned_by(self, session_id: str, principal_id: str) -> bool:
        with self.read() as conn:
            row = conn.execute(
                select(SessionRow.principal_id).where(SessionRow.session_id == session_id)
            ).first()
        return row is not None and row[0] == principal_id

    # -- config versions ----------------------------------------------------------------------

    def append_version(
        self,
        session_id: str,
        toolkit_name: str,
        build: Callable[[int, str], VersionDraft],
        audit_action: str,
    ) -> int:
        """Append the next version (built for its number) and, if live, make it current.

        `build(version, primary_kek_id)` is called again with a new number when another
        writer took the previous one, because every envelope is bound to its version
        number; it learns the store's primary KEK inside the transaction, so a writer whose
        ring predates a rotation can rewrap under the new key before it commits.
        """

        def work(conn: Connection) -> int:
            key = {"session_id": session_id, "toolkit_name": toolkit_name}
            pointer = {"key_session": session_id, "key_toolkit": toolkit_name}
            state = conn.execute(_WRITE_STATE, {**key, **pointer}).one()
            latest, primary, current, chain_end = state[0], state[1], state[2], state[3:]
            if primary is None:
                raise StoreError("the store has no primary master key: run `toolkit-vault init`")
            version = int(latest) + 1
            draft = build(version, primary)
            now = time.time()
            row = draft.columns(session_id, toolkit_name, version, now)
            details = {"status": draft.status, "changed": sorted(draft.secret_fingerprints)}
            event, head = self._link(
                AuditDraft(draft.actor, audit_action, session_id, toolkit_name, version, details),
                chain_end,
            )
            move = {**pointer, "expected": current, "new_version": version, "now": now}
            live = draft.status in _LIVE
            if conn.dialect.name == "postgresql" and head["new_seq"] > 1:
                pointer_write = ("insert" if current is None else "update") if live else None
                params = {f"v_{k}": v for k, v in row.items()}
                params |= {f"e_{k}": v for k, v in event.items()}
                if conn.execute(_PG_APPEND[pointer_write], params | head | move).scalar_one() != 1:
                    raise _pointer_moved()
                return version
            conn.execute(_INSERT_VERSION, row)
            if live:
                if current is None:
                    conn.execute(_INSERT_POINTER, move)
                elif conn.execute(_MOVE_POINTER, move).rowcount != 1:
                    raise _pointer_moved()
            _write_link(conn, event, head)
            return version

        result: int = self.retrying(work)
        return result

    def current_toolkits(self, session_id: str) -> set[str]:
        with self.read() as conn:
            rows = conn.execute(_CURRENT_TOOLKITS, {"session_id": session_id})
            return {name for (name,) in rows}

    def current_versions(self, session_id: str) -> list[VersionRecord]:
        """The current version of every toolkit configured in a session."""
        query = (
            select(ConfigVersion)
            .join(
                CurrentConfig,
                (CurrentConfig.session_id == ConfigVersion.session_id)
                & (CurrentConfig.toolkit_name == ConfigVersion.toolkit_name)
                & (CurrentConfig.version == ConfigVersion.version),
            )
            .where(CurrentConfig.session_id == session_id)
            .order_by(ConfigVersion.toolkit_name)
        )
        with self.read() as conn:
            return [version_record(row._mapping) for row in conn.execute(query)]

    def record_attempt(self, draft: AuditDraft) -> None:
        """Audit a refused attempt (unknown toolkit, invalid config) that stored nothing else."""
        self.retrying(lambda conn: self.audit(conn, draft))


def _write_link(conn: Connection, event: dict[str, Any], head: dict[str, Any]) -> None:
    """Append a chain link made by `Store._link` and move the head to it (the first link
    creates the head row)."""
    conn.execute(_INSERT_EVENT, event)
    conn.execute(_INSERT_HEAD if head["new_seq"] == 1 else _MOVE_HEAD, head)


def _pointer_moved() -> IntegrityError:
    """A lost compare-and-set, raised as the conflict `Store.retrying` retries."""
    return IntegrityError("current pointer moved", None, Exception("compare-and-set lost"))
