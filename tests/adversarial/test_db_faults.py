"""Database faults under a running vault: a clear error, nothing half written, recovery.

PostgreSQL: the backend serving a configure is terminated (`pg_terminate_backend`) while its
transaction waits for the writers' lock, and again after it has written the version row and
its audit event but before it commits. SQLite: the database becomes read-only under a running
vault (for root, who ignores file modes, SQLite's read-only open is what a 0444 file gives
everyone else), and a writer holds the lock past the busy timeout. Each time the configure
gets one RUNTIME_ERROR naming no value, the store is exactly as before, and the same Vault
object configures again as soon as the fault is gone: no restart.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from adversarial_support import ConnectionChannel, assert_error, config_rows, counts, line
from sqlalchemy import Connection as DBConnection
from sqlalchemy import Engine, create_engine, event, select, text

from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store import database
from toolkit_vault.store.models import ConfigVersion
from toolkit_vault.store.statements import _PG_LOCK

POSTGRES_ONLY = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
CANARY = "tkv-canary-db-fault-9d2e"


def configure(n: int) -> bytes:
    config = {"endpoint": f"https://x{n}.test", "api_key": f"{CANARY}-{n}"}
    return line(
        {
            "type": "toolkit/configure/req",
            "id": f"c{n}",
            "toolkit_name": "secretive",
            "config": config,
        }
    )


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    return thread, result


def _blocked_backend(admin: DBConnection, query_part: str, timeout: float = 20) -> int:
    """The pid of the backend of this database waiting on a lock, running `query_part`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = admin.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND wait_event_type IN ('Lock', 'Advisory')"
                " AND query ILIKE :part"
            ),
            {"part": f"%{query_part}%"},
        ).scalar()
        if pid is not None:
            return int(pid)
        time.sleep(0.02)
    raise AssertionError(f"no backend blocked on {query_part}")


def assert_clean_failure(vault: Vault, response: list[dict[str, Any]], before: Any) -> None:
    assert len(response) == 1, response
    (error,) = response
    assert_error(error, "RUNTIME_ERROR", error["req_id"])
    assert error["message"].startswith("the database refused the write"), error
    assert CANARY not in json.dumps(error)
    assert config_rows(vault) == before["rows"]
    assert counts(vault) == before["counts"]


def assert_recovers(vault: Vault, channel: ConnectionChannel, n: int) -> None:
    response = channel.exchange(configure(n))
    assert response[0]["type"] == "toolkit/configure/resp", json.dumps(response)
    assert response[0]["status"] == "ok"
    listed = channel.exchange(line({"type": "toolkit/list/req"}))[0]
    assert {t["name"]: t["configured"] for t in listed["toolkits"]}["secretive"] is True
    assert vault.verify_audit().ok


def _state(vault: Vault) -> dict[str, Any]:
    return {"rows": config_rows(vault), "counts": counts(vault)}


@POSTGRES_ONLY
@pytest.mark.parametrize("where", ["waiting for the writers' lock", "after writing, before commit"])
def test_postgres_backend_terminated_mid_transaction(
    vault: Vault, database_url: str, where: str
) -> None:
    channel = ConnectionChannel(vault)
    assert channel.exchange(configure(1))[0]["status"] == "ok"
    before = _state(vault)
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    blocker = create_engine(database_url).connect()
    try:
        with admin.connect() as watch:
            if where.startswith("waiting"):
                blocker.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK})
                blocker.commit()
                query = "pg_advisory_xact_lock"
            else:  # the configure's version row and event are written; the head is locked
                blocker.execute(text("SELECT seq FROM audit_head WHERE id = 1 FOR UPDATE"))
                query = "UPDATE audit_head"
            thread, result = in_thread(lambda: channel.exchange(configure(2)))
            pid = _blocked_backend(watch, query)
            assert watch.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
            thread.join(timeout=30)
        assert not thread.is_alive()
    finally:
        if where.startswith("waiting"):
            blocker.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK})
        blocker.rollback()
        blocker.close()
        admin.dispose()
    assert_clean_failure(vault, result[0], before)
    assert result[0][0]["message"] == "the database refused the write (AdminShutdown)"
    assert_recovers(vault, channel, 3)
    with vault.store.engine.connect() as db:
        versions = db.execute(select(ConfigVersion.version).order_by(ConfigVersion.id)).scalars()
        assert list(versions) == [1, 2]  # the failed attempt took no version number


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """New SQLite connections to `path` open read-only, as for a file its user cannot write."""

    def connect(dialect: Any, record: Any, cargs: list[Any], cparams: dict[str, Any]) -> Any:
        if cargs and str(cargs[0]) == str(path):
            return sqlite3.connect(f"file:{path}?mode=ro", *cargs[1:], **{**cparams, "uri": True})
        return None  # any other database: SQLAlchemy connects as usual

    mode = path.stat().st_mode
    path.chmod(0o444)
    event.listen(Engine, "do_connect", connect)
    try:
        yield
    finally:
        event.remove(Engine, "do_connect", connect)
        path.chmod(mode)


@SQLITE_ONLY
def test_sqlite_read_only_database(home: VaultSettings) -> None:
    path = Path(home.home) / "vault.db"
    vault = open_vault(home)
    try:
        channel = ConnectionChannel(vault)
        assert channel.exchange(configure(1))[0]["status"] == "ok"
        before = _state(vault)
        with read_only(path):
            vault.store.engine.dispose()  # every connection from now on finds it read-only
            restarted = open_vault(home)  # and a vault (re)started now still opens
            try:
                for target in (vault, restarted):
                    other = ConnectionChannel(target, channel.session_id)
                    assert_clean_failure(vault, other.exchange(configure(2)), before)
                    listed = other.exchange(line({"type": "toolkit/list/req"}))[0]
                    assert listed["type"] == "toolkit/list/resp"  # reads still work
            finally:
                restarted.store.engine.dispose()
            assert_clean_failure(vault, channel.exchange(configure(2)), before)
        assert_recovers(vault, channel, 3)  # writable again: the same vault, no restart
    finally:
        vault.store.engine.dispose()


@SQLITE_ONLY
def test_sqlite_lock_held_past_the_busy_timeout(
    home: VaultSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "BUSY_TIMEOUT_MS", 300)
    vault = open_vault(home)
    try:
        channel = ConnectionChannel(vault)
        assert channel.exchange(configure(1))[0]["status"] == "ok"
        before = _state(vault)
        holder = sqlite3.connect(Path(home.home) / "vault.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            started = time.monotonic()
            response = channel.exchange(configure(2))
            assert time.monotonic() - started < 10
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert "database is locked" not in json.dumps(response)
        assert_clean_failure(vault, response, before)
        assert_recovers(vault, channel, 3)
    finally:
        vault.store.engine.dispose()


@SQLITE_ONLY
def test_opening_the_vault_again_keeps_the_sqlite_locks(home: VaultSettings) -> None:
    """POSIX locks belong to the process: closing any descriptor of the database file drops
    all of them. Opening a second engine must not do that to the first one's connections, or
    another process ending checkpoints and deletes the WAL under them (SQLite's "how to
    corrupt a database", 2.2)."""
    path = Path(home.home) / "vault.db"
    vault = open_vault(home)
    again = open_vault(home)
    try:
        channel = ConnectionChannel(vault)
        assert channel.exchange(configure(1))[0]["status"] == "ok"
        ConnectionChannel(again)  # both engines now hold open connections
        third = open_vault(home)  # opened while both are live
        third.store.engine.dispose()
        other_process = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        other_process += "c.execute('select count(*) from sqlite_master').fetchall(); c.close()"
        subprocess.run([sys.executable, "-c", other_process, str(path)], check=True, timeout=60)
        assert Path(f"{path}-wal").exists() and Path(f"{path}-shm").exists()
        assert_recovers(vault, channel, 2)
    finally:
        again.store.engine.dispose()
        vault.store.engine.dispose()
