"""Whole-database copies for `backup`: one consistent read of every table, and the bulk
load of those rows into an empty database (a scratch one to verify, the target of a
restore).

`backup` decides what a backup file holds and when one is believed; these are its
statements. Rows travel as the database stores them (ciphertext, wrapped keys, row MACs
and chain links as they are), table by table in dependency order, each ordered by its
primary key, so a row's foreign key names a row already loaded.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    LargeBinary,
    func,
    insert,
    inspect,
    make_url,
    select,
    text,
)
from sqlalchemy.exc import DBAPIError, StatementError

from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.store.database import migrate, open_engine
from toolkit_vault.store.models import AuditEvent, AuditHead, Base
from toolkit_vault.store.storage import Store

__all__ = [
    "TABLES",
    "RestoreTarget",
    "RowsRefused",
    "Snapshot",
    "TargetState",
    "audit_head",
    "binary_columns",
    "event_mac",
    "load_rows",
    "scratch_store",
    "snapshot",
]

BATCH = 2000  # rows fetched at a time while a snapshot is read
LOAD_BATCH = 1000  # rows inserted at a time while one is loaded
_TABLES = {table.name: table for table in Base.metadata.sorted_tables}
# Every table in dependency order, with its columns in order: what a backup holds.
TABLES: dict[str, list[str]] = {
    t.name: [c.name for c in t.columns] for t in Base.metadata.sorted_tables
}
# The indexes no row can break (not unique): `load_rows` builds them after the rows.
_SECONDARY = [i for t in Base.metadata.sorted_tables for i in t.indexes if not i.unique]


def binary_columns(table: str) -> list[bool]:
    """Which of `table`'s columns (as `TABLES` orders them) hold bytes."""
    return [isinstance(c.type, LargeBinary) for c in _TABLES[table].columns]


class RowsRefused(StoreError):
    """The database refused a row being loaded (a duplicate, a dangling key, a bad value);
    `reason` names the driver's error class, never a value."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the rows do not load ({reason})")
        self.reason = reason


@dataclass(frozen=True)
class Snapshot:
    """What one read transaction saw: the schema revision, the audit head (seq, link MAC,
    head MAC; None before the first event) and, through `rows`, every table's rows."""

    schema_revision: str
    head: tuple[int, bytes, bytes] | None
    source: str  # the database's dialect: sqlite or postgresql
    _conn: Connection

    def rows(self) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """(table name, row values as `TABLES` orders the columns), table by table."""
        for table in Base.metadata.sorted_tables:
            query = select(table).order_by(*table.primary_key.columns)
            result = self._conn.execution_options(yield_per=BATCH).execute(query)
            for row in result:
                yield table.name, tuple(row)


@contextmanager
def snapshot(store: Store) -> Iterator[Snapshot]:
    """One read-only transaction that sees one snapshot of every table; it writes nothing.

    On SQLite (WAL) a deferred BEGIN pins the snapshot at its first read; on PostgreSQL a
    REPEATABLE READ, READ ONLY transaction does the same."""
    with store.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin() as transaction:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET TRANSACTION READ ONLY"))
            revision = str(conn.execute(text("SELECT version_num FROM alembic_version")).scalar())
            row = conn.execute(select(AuditHead).where(AuditHead.id == 1)).first()
            head = None if row is None else (int(row.seq), bytes(row.mac), bytes(row.head_mac))
            yield Snapshot(revision, head, store.engine.dialect.name, conn)
            transaction.rollback()


def _insert(conn: Connection, rows: Iterable[tuple[str, Sequence[Any]]]) -> None:
    """Each table's rows in batches. Into SQLite, the rows (every column, in `TABLES`'
    order, as `backup.archive.decode_row` gives them) go to the driver as they are: through
    SQLAlchemy's Core, processing each row's parameters cost more than the insert, and
    `backup verify` loads every row it checks (issue 53)."""
    write = _driver_insert if conn.dialect.name == "sqlite" else _core_insert
    try:
        batch: list[Sequence[Any]] = []
        current: str | None = None
        for name, row in rows:
            if name != current or len(batch) >= LOAD_BATCH:
                if batch and current is not None:
                    write(conn, current, batch)
                batch, current = [], name
            batch.append(row)
        if batch and current is not None:
            write(conn, current, batch)
    except (DBAPIError, StatementError) as exc:
        raise RowsRefused(type(exc.orig).__name__) from None


def _core_insert(conn: Connection, table: str, batch: list[Sequence[Any]]) -> None:
    columns = TABLES[table]
    conn.execute(insert(_TABLES[table]), [dict(zip(columns, row, strict=True)) for row in batch])


def _driver_insert(conn: Connection, table: str, batch: list[Sequence[Any]]) -> None:
    names = ", ".join(f'"{name}"' for name in TABLES[table])  # the vault's own model's names
    marks = ", ".join("?" * len(TABLES[table]))
    statement = f'INSERT INTO "{table}" ({names}) VALUES ({marks})'  # noqa: S608
    conn.exec_driver_sql(statement, batch)


def load_rows(store: Store, rows: Iterable[tuple[str, Sequence[Any]]]) -> None:
    """Insert `rows` ((table name, values as `TABLES` orders the columns), tables of
    `TABLES` only, in its order) into `store`'s empty tables in one transaction;
    `RowsRefused` when the database refuses one, and then nothing is loaded.

    The secondary indexes are built again once the rows are in: one sort each is cheaper
    than keeping them row by row (issue 53). Every primary key, unique, foreign key and
    check constraint that refuses a row stays in place throughout, and the indexes are
    back before the commit."""
    with store.engine.begin() as conn:
        for index in _SECONDARY:
            index.drop(conn)
        _insert(conn, rows)
        for index in _SECONDARY:
            index.create(conn)


@contextmanager
def scratch_store() -> Iterator[Store]:
    """A Store over a fresh SQLite file in a private temporary directory, gone after,
    written with its journal in memory and no fsync (`open_engine(scratch=True)`: a crash
    loses only what would be thrown away)."""
    with tempfile.TemporaryDirectory(prefix="tkv-verify-") as directory:
        engine = open_engine(f"sqlite:///{Path(directory) / 'backup.db'}", scratch=True)
        try:
            Base.metadata.create_all(engine)
            store = Store(engine)
            yield store
            store.close_watch()
        finally:
            engine.dispose()


def event_mac(store: Store, seq: int) -> bytes | None:
    """The link MAC of the audit event at `seq` (None: there is none)."""
    with store.engine.connect() as conn:
        mac = conn.execute(select(AuditEvent.mac).where(AuditEvent.seq == seq)).scalar()
    return None if mac is None else bytes(mac)


def audit_head(store: Store) -> tuple[int, bytes] | None:
    """The audit head as stored: (seq, link MAC), or None before the first event."""
    with store.engine.connect() as conn:
        row = conn.execute(select(AuditHead.seq, AuditHead.mac)).first()
    return None if row is None else (int(row.seq), bytes(row.mac))


@dataclass(frozen=True)
class TargetState:
    """A restore target before it is written: its audit head (None: no event), the events
    it holds after the backup's head (action as stored -> count), and whether every vault
    table is empty (or missing)."""

    head: int | None
    lost: dict[str, int]
    empty: bool


class RestoreTarget:
    """The database a restore writes into, by URL (its engine is this object's alone)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._opened: Engine | None = None

    @property
    def _engine(self) -> Engine:
        """Opened at the first statement: opening a SQLite URL creates its file, and a dry
        run that only looks must leave a missing database missing."""
        if self._opened is None:
            self._opened = open_engine(self._url)
        return self._opened

    def close(self) -> None:
        if self._opened is not None:
            self._opened.dispose()

    def state(self, backup_seq: int) -> TargetState:
        if _missing_sqlite_file(self._url):
            return TargetState(None, {}, True)
        try:
            present = set(inspect(self._engine).get_table_names())
        except Exception:
            raise VaultError("cannot open the target database; is it reachable?") from None
        tables = [t for t in Base.metadata.sorted_tables if t.name in present]
        with self._engine.connect() as conn:
            counts = {
                t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in tables
            }
            head, lost = None, {}
            if AuditEvent.__tablename__ in present:
                head = conn.execute(select(func.max(AuditEvent.seq))).scalar()
                rows = conn.execute(
                    select(AuditEvent.action, func.count())
                    .where(AuditEvent.seq > backup_seq)
                    .group_by(AuditEvent.action)
                ).all()
                lost = {str(action): int(count) for action, count in rows}
        return TargetState(head, lost, not any(counts.values()))

    def migrate(self) -> None:
        """Create the vault's tables where there are none (an empty database)."""
        migrate(self._engine)

    def load(
        self, rows: Iterable[tuple[str, Sequence[Any]]], *, unchanged: Callable[[], None]
    ) -> None:
        """`load_rows` into this database, and on PostgreSQL its serial keys set to continue
        after the loaded rows, in one transaction; `unchanged()` is called once every row
        is in, before the commit: raising there loads nothing."""
        with self._engine.begin() as conn:
            _insert(conn, rows)
            unchanged()
            _advance_sequences(conn)


def _missing_sqlite_file(url: str) -> bool:
    parsed = make_url(url)
    name = parsed.database
    return (
        parsed.get_backend_name() == "sqlite"
        and bool(name)
        and name != ":memory:"
        and not Path(str(name)).exists()
    )


def _advance_sequences(conn: Connection) -> None:
    """PostgreSQL: serial keys continue after the restored rows (SQLite does so itself)."""
    if conn.dialect.name != "postgresql":
        return
    for table in Base.metadata.sorted_tables:
        for column in table.primary_key.columns:
            if column.type.python_type is not int:
                continue
            quote = conn.dialect.identifier_preparer.quote
            table_name, column_name = quote(table.name), quote(column.name)
            # Names from the vault's own models, quoted; the values are bound.
            highest = f"SELECT COALESCE(MAX({column_name}), 0) + 1 FROM {table_name}"  # noqa: S608
            conn.execute(
                text(f"SELECT setval(pg_get_serial_sequence(:t, :c), ({highest}), false)"),
                {"t": table.name, "c": column.name},
            )
