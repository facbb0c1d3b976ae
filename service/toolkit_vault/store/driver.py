"""The driver fast path: a prebuilt statement sent on the driver's own cursor.

Through SQLAlchemy's execution machinery every statement paid for an execution context and
a result set-up, more CPU than the database's own work on a configure's statements
(benchmarks/configure.py); `statements` builds the store's hot ones on `_OnDriver` once.
It reads a compiled statement's internals (`positiontup`, `binds`): pyproject's ceiling on
SQLAlchemy names this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from toolkit_vault.store.database import read_only
from toolkit_vault.telemetry import metrics

_SQL_LOG = logging.getLogger("sqlalchemy.engine.Engine")


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
    raised as SQLAlchemy's, as `Store.write` and `transact` expect, and a connection it
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
        started = time.perf_counter()
        try:
            if isinstance(params, list):
                cursor.executemany(sql, [bound(p) for p in params])
            else:
                cursor.execute(sql, bound(params))
            metrics.observe_statement(time.perf_counter() - started)
        except dialect.loaded_dbapi.Error as exc:
            lost = read_only(exc) or dialect.is_disconnect(exc, driver, cursor)
            if lost:
                conn.invalidate()
            raise DBAPIError.instance(
                sql, None, exc, dialect.loaded_dbapi.Error, connection_invalidated=lost
            ) from None
        return cursor


def batches(cursor: Any, size: int) -> Iterator[list[Any]]:
    """A driver cursor's rows, `size` at a time (plain tuples: a full walk or check reads
    every row, and SQLAlchemy's rows cost as much as the query), the cursor closed at the
    end or when the reader stops."""
    try:
        while rows := cursor.fetchmany(size):
            yield rows
    finally:
        cursor.close()
