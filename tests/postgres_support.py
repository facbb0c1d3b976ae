"""The scratch PostgreSQL database emptied between tests (conftest.py's `database_url` and
`fresh_postgres_url`), as cheaply as a new database would be had."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, text

from toolkit_vault.store.models import Base

__all__ = ["dispose", "empty_postgres"]

# Past this many rows a table is emptied by TRUNCATE, below it by DELETE: TRUNCATE gives the
# table and each index a new file, some 300 ms for the 15 tables even when they hold a few
# rows each, against 2 ms for their DELETEs (tests/durations.md, "Set-up cuts").
TRUNCATE_FROM = 5000
_engines: dict[str, Engine] = {}  # one connection per database, kept (a new one is ~15 ms)


def empty_postgres(url: str) -> None:
    """Every row of the vault's tables gone, as a new database would have them (sequences
    are not reset, as TRUNCATE without RESTART IDENTITY did not reset them)."""
    engine = _engines.get(url)
    if engine is None:  # pinged: a test may have terminated this database's backends
        engine = _engines[url] = create_engine(url, pool_size=1, pool_pre_ping=True)
    names = [t.name for t in Base.metadata.sorted_tables]
    with engine.begin() as conn:
        if not conn.execute(text("select to_regclass('alembic_version')")).scalar():
            return
        probe = " UNION ALL ".join(
            f"SELECT '{n}' WHERE EXISTS (SELECT 1 FROM {n} OFFSET {TRUNCATE_FROM})"  # noqa: S608
            for n in names  # the models' table names
        )
        big = set(conn.execute(text(probe)).scalars())
        if big:
            conn.execute(text(f"TRUNCATE {', '.join(sorted(big))} CASCADE"))
        # Referencing tables first (the reverse of the dependency order), in one round trip.
        statements = [f"DELETE FROM {n}" for n in reversed(names) if n not in big]  # noqa: S608
        if statements:
            conn.execute(text("; ".join(statements)))


def dispose() -> None:
    """Close the kept connections (before the database is dropped)."""
    for engine in _engines.values():
        engine.dispose()
    _engines.clear()
