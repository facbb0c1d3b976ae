"""Engines and migrations: SQLite (WAL, foreign keys, busy timeout) and PostgreSQL.

SQLite write transactions start with BEGIN IMMEDIATE, so two writers queue on the busy
timeout instead of deadlocking on a lock upgrade ("database is locked"). The pool keeps
`POOL_SIZE` connections, as many as `serve` runs worker threads, so a busy server reuses
open connections instead of opening one (and running its PRAGMAs) per request. On SQLite
the pool hands out the connection returned last: a connection's page cache stays valid only
while no other connection writes, so the writer thread, which commits every write of the
process, finds its own pages still cached instead of reading them again. A pooled
PostgreSQL connection is pinged before use only when it sat idle for `IDLE_PING_S`: one
that the server or the network dropped meanwhile is replaced instead of failing a
request, and a busy server does not pay a round trip per transaction for it. Alembic is
the only way the schema is created or changed; `require_current` refuses a store that is
not at the head revision instead of guessing.
"""

from __future__ import annotations

import contextlib
import operator
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    OperationalError,
    ProgrammingError,
)

from toolkit_vault.errors import StoreError
from toolkit_vault.store.models import SCHEMA_REVISION
from toolkit_vault.telemetry import metrics

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "POOL_SIZE",
    "alembic_config",
    "migrate",
    "migrations",
    "open_engine",
    "read_only",
    "require_current",
]

BUSY_TIMEOUT_MS = 10_000
POOL_SIZE = 8  # the server's worker threads, one pooled connection each: more only add GIL convoys
_POOL = {"pool_size": POOL_SIZE, "max_overflow": 4}
# Last in, first out (see above): the connection returned last has the writer's pages in
# its cache, so a busy server reads fewer pages a configure (BENCHMARKS.md).
_SQLITE_POOL = {**_POOL, "pool_use_lifo": True}
IDLE_PING_S = 1.0
_RETURNED = "toolkit_vault_returned_at"
_STARTED = "toolkit_vault_statement_started"


def open_engine(url: str, *, scratch: bool = False) -> Engine:
    """An engine with the vault's connection settings; SQLite files are created 0600.
    `scratch`: a SQLite file thrown away after use (`backup verify`'s copy of a backup),
    its journal in memory (a refused row still rolls back) and no fsync: a crash loses
    nothing that was kept."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError("the database URL is not valid") from None
    if parsed.get_backend_name() == "sqlite":
        pool: dict[str, int | bool] = {}
        if parsed.database and parsed.database != ":memory:":
            pool = _SQLITE_POOL
            path = Path(parsed.database)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # Created 0600 (SQLite keeps the mode), and only if missing: closing a descriptor of
            # a live database would drop every POSIX lock this process's connections hold on
            # it, and another process could then checkpoint and delete the WAL under them.
            if not path.exists():
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        engine = create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000}, **pool)
        event.listen(engine, "connect", _scratch_on_connect if scratch else _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
        event.listen(engine, "handle_error", _sqlite_on_error)
        _time_statements(engine)
        return engine
    if parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        engine = create_engine(parsed, **_POOL)
        _ping_when_idle(engine)
        _time_statements(engine)
        return engine
    raise StoreError(
        f"unsupported database {parsed.get_backend_name()!r}; use sqlite or postgresql"
    )


def _time_statements(engine: Engine) -> None:
    """Each statement SQLAlchemy executes, timed for `/metrics` (the driver's own fast
    path, `driver._OnDriver` and `Store.fetch`, time theirs)."""

    def before(conn: Any, _cursor: Any, _sql: Any, _params: Any, _context: Any, _many: Any) -> None:
        conn.info[_STARTED] = time.perf_counter()

    def after(conn: Any, _cursor: Any, _sql: Any, _params: Any, _context: Any, _many: Any) -> None:
        started = conn.info.pop(_STARTED, None)
        if started is not None:
            metrics.observe_statement(time.perf_counter() - started)

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)


def _ping_when_idle(engine: Engine) -> None:
    dialect = engine.dialect

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.get(_RETURNED)
        if returned is None or time.monotonic() - returned < IDLE_PING_S:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error:
            raise DisconnectionError("a pooled connection was dropped") from None  # replaced

    def checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_RETURNED] = time.monotonic()

    event.listen(engine, "checkout", checkout)
    event.listen(engine, "checkin", checkin)


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    _sqlite_settings(
        dbapi_connection,
        "PRAGMA journal_mode=WAL",
        "PRAGMA foreign_keys=ON",
        f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
        "PRAGMA synchronous=FULL",
        "PRAGMA secure_delete=ON",  # purge: freed cells are zeroed, not left behind
    )


def _scratch_on_connect(dbapi_connection: Any, _record: Any) -> None:
    _sqlite_settings(
        dbapi_connection,
        "PRAGMA journal_mode=MEMORY",
        "PRAGMA foreign_keys=ON",
        f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}",
        "PRAGMA synchronous=OFF",
        decode=str,
    )


def _sqlite_settings(
    dbapi_connection: Any, *pragmas: str, decode: Callable[[bytes], str] | None = None
) -> None:
    """`decode`: how text values are read. By default leniently (`_LENIENT_TEXT`): text that
    is not UTF-8 (SQLite stores whatever a writer gives it) must fail that one row's checks,
    not every query that reads past it. A scratch database holds only the text its load
    wrote, from Python strings (always UTF-8), so it reads text with the driver's own
    decoding (`str`: no Python call a value; `backup verify` reads millions, issue 53);
    a text value that were not UTF-8 there would fail the read, and so the verify."""
    # Hand transaction control to SQLAlchemy's "begin" event (the pysqlite recipe).
    dbapi_connection.isolation_level = None
    dbapi_connection.text_factory = _LENIENT_TEXT if decode is None else decode
    cursor = dbapi_connection.cursor()
    for pragma in pragmas:
        cursor.execute(pragma)
    cursor.close()


# bytes -> str, undecodable bytes replaced; called by the driver for every text value it
# reads, so a C callable (no Python frame a value: a full check reads millions, issue 53),
# and one given its arguments by position: `partial(str, encoding=..., errors=...)` built a
# keyword dict for every value (a fifth more instructions a value)
_LENIENT_TEXT = operator.methodcaller("decode", "utf-8", "replace")


def _same(value: None) -> None:
    return value


def _bind_as_given() -> None:
    """Bind bytes, None and bools as the driver always has, without asking the adaptation
    protocol first. The driver binds only int, float, str and bytearray straight away; any
    other value it first offers to `sqlite3.adapters`, and with none registered it asks the
    protocol's type for `__adapt__`, whose failure formats an AttributeError: about 1,200
    instructions a value, for every blob, NULL and flag bound (`backup verify` loads about
    1.5 million, issue 53). Each adapter here returns what the driver then bound anyway
    (the same bytes object, None, the bool's int), for exact types only (the registry is
    keyed by exact type), so every statement binds the same values as before."""
    sqlite3.register_adapter(bytes, bytes)
    sqlite3.register_adapter(bool, int)
    sqlite3.register_adapter(type(None), _same)


_bind_as_given()


def read_only(error: BaseException | None) -> bool:
    """SQLite refused a write because its connection has the file open read-only."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_READONLY


def _sqlite_on_error(context: ExceptionContext) -> None:
    """SQLite opens a file it may not write read-only, and such a connection stays read-only:
    treat it as lost, so the pool opens fresh ones (writable again once the file is)."""
    if read_only(context.original_exception):
        context.is_disconnect = True


def _sqlite_on_begin(connection: Any) -> None:
    """BEGIN (IMMEDIATE for a write), sent on the driver's connection: through
    `exec_driver_sql` it was a large part of an empty write transaction's CPU (an
    execution context and a result for a statement that returns nothing). A refusal (the database
    locked past the busy timeout) is raised as SQLAlchemy's, as `Store.write` and
    `transact` expect; a file opened read-only still begins, and its first write fails."""
    statement = "BEGIN"
    if connection.get_execution_options().get("vault_write", False):
        statement = "BEGIN IMMEDIATE"
    try:
        connection.connection.dbapi_connection.execute(statement)
    except sqlite3.Error as exc:
        raise DBAPIError.instance(statement, None, exc, sqlite3.Error) from None


def migrations() -> Path:
    """Alembic's directory (env.py, versions/). An installed wheel carries it inside the
    package, as `toolkit_vault/_migrations` (pyproject.toml maps the top-level `migrations/`
    there); a source tree (an editable install, a copy on PYTHONPATH) has it beside
    `service/`, as DESIGN.md lays it out."""
    from importlib.resources import files  # only init and the tests ask: not at import

    package = Path(str(files("toolkit_vault")))
    shipped = package / "_migrations"
    return shipped if shipped.is_dir() else package.parents[1] / "migrations"


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config  # alembic costs half a second to import: only for init

    config = Config()
    config.set_main_option("script_location", str(migrations()))
    config.attributes["engine"] = engine
    return config


def migrate(engine: Engine) -> None:
    """Bring the schema to the head revision (idempotent). A database at the head already
    is left without starting Alembic, which costs more than the rest of an `init`."""
    from alembic import command

    try:
        if _revision(engine) == SCHEMA_REVISION:
            return
        command.upgrade(alembic_config(engine), "head")
    except OperationalError as exc:
        raise StoreError(f"cannot migrate the database: {exc.orig.__class__.__name__}") from None


def _revision(engine: Engine) -> str | None:
    """The schema revision Alembic recorded; None before the first migration."""
    try:
        with engine.connect() as connection:
            current = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except ProgrammingError:
        return None
    except OperationalError as exc:
        if "no such table" not in str(exc.orig):
            raise StoreError("cannot open the database; is it reachable?") from None
        return None
    return None if current is None else str(current)


def require_current(engine: Engine) -> None:
    """Refuse a database that `init` has not migrated to this release's schema revision."""
    current = _revision(engine)
    if current != SCHEMA_REVISION:
        raise StoreError(
            f"the database is at revision {current or 'none'}, not {SCHEMA_REVISION}: "
            "run `toolkit-vault init` first"
        )
