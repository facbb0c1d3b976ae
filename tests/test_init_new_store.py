"""`init` on a store that held nothing: the state_authenticated event is written without the
upgrade's walk (`audit.upgrade.authenticate_state(new=True)`), and that is allowed only when
the store held no row at all (`store.backfill.holds_nothing`)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from test_vault import handshake, request, secret_config
from toolkit_vault.audit.verify import verify_audit_chain
from toolkit_vault.bootstrap import init_vault, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store import backfill
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.database import open_engine
from toolkit_vault.store.models import AuditEvent, Base
from toolkit_vault.store.storage import Store

pytestmark = pytest.mark.key_providers("file")


def _authenticated(url: str) -> list[Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = select(AuditEvent.details).where(
                AuditEvent.action == AuditAction.STATE_AUTHENTICATED
            )
            return [json.loads(d) if isinstance(d, str) else d for d in conn.scalars(query)]
    finally:
        engine.dispose()


def test_a_new_vault_records_what_the_walk_records(
    home: VaultSettings,
    vault: Vault,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    key_options: dict[str, str],
) -> None:
    new = _authenticated(home.database_url)  # `home` made it on an emptied store: no walk
    other = tmp_path / "walked"
    walked_url = f"sqlite:///{other / 'vault.db'}"
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(other))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", walked_url)
    monkeypatch.setattr(backfill, "holds_nothing", lambda _store: False)  # the walk runs
    init_vault(load_settings("file", {}))
    walked = _authenticated(walked_url)
    assert new == walked == [{"signed": dict.fromkeys(walked[0]["signed"], 0), "left_unsigned": 0}]
    assert set(walked[0]["signed"]) >= {"principals", "vault_keys", "config_versions"}
    key = vault._audit_key
    assert key is not None
    report = verify_audit_chain(vault.store, key, full=True)
    assert report.ok and report.problem is None, report.message  # every row it holds is signed
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(home.home))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", home.database_url)
    assert init_vault(load_settings()).upgraded is None  # done once: a second init skips it


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # files to copy
def test_a_store_holds_nothing_only_when_every_table_is_empty(
    home: VaultSettings, tmp_path: Path
) -> None:
    opened = open_vault(home)
    try:
        conn, _ = handshake(opened)
        message = {"type": "toolkit/configure/req", "toolkit_name": "secretive"}
        answer = request(conn, {**message, "config": secret_config()})
        assert answer[0]["status"] == "ok"
    finally:
        opened.store.close()
    database = Path(home.database_url.removeprefix("sqlite:///"))
    tables = [t.name for t in Base.metadata.sorted_tables]
    filled = [t for t in tables if _count(database, t)]
    assert {"audit_events", "principals", "sessions", "config_versions"} <= set(filled)
    assert not _holds_nothing(database)
    for kept in filled:  # each table alone, every other table emptied
        copy = tmp_path / f"only-{kept}.db"
        _copy(database, copy)
        _delete(copy, [t for t in tables if t != kept])
        assert _count(copy, kept) and not _holds_nothing(copy), kept
    _delete(database, tables)
    assert _holds_nothing(database)


def _holds_nothing(database: Path) -> bool:
    engine = open_engine(f"sqlite:///{database}")
    try:
        return backfill.holds_nothing(Store(engine))
    finally:
        engine.dispose()


def _count(database: Path, table: str) -> int:
    with closing(sqlite3.connect(database)) as db:
        return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608


def _copy(database: Path, copy: Path) -> None:
    """The database as its connections see it (its WAL's pages too), in a new file."""
    with closing(sqlite3.connect(database)) as source, closing(sqlite3.connect(copy)) as target:
        source.backup(target)


def _delete(database: Path, tables: list[str]) -> None:
    with closing(sqlite3.connect(database)) as db:
        db.execute("PRAGMA foreign_keys=OFF")
        for table in tables:
            db.execute(f"DELETE FROM {table}")  # noqa: S608 (the models' own tables)
        db.commit()
