"""Storage on real SQLite and PostgreSQL: migrations, append-only versions, CAS, audit."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, func, inspect, select, update

from test_import import ENV, VECTORS
from toolkit_package.selection import Selection
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import StoreError
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store import following, transactions, versions, writer
from toolkit_vault.store.database import alembic_config, migrate, open_engine, require_current
from toolkit_vault.store.models import (
    SCHEMA_REVISION,
    AuditEvent,
    Base,
    ConfigVersion,
    CurrentConfig,
    ImportedToolkitRow,
    VaultKey,
)
from toolkit_vault.store.records import AuditDraft, VersionDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.store.writer import Write, deferring
from toolkit_vault.toolkits.imports import import_package

# One key provider (conftest.py picks it): the store sees wrapped keys only, so each
# provider would run the same statements; tests/test_key_hierarchy.py runs every one.


def draft(status: str = "ok") -> VersionDraft:
    return VersionDraft(
        status=status,
        message=None,
        actor="local",
        schema_digest="sha256:00",
        public_config={"a": 1},
        secret_fingerprints={},
        sealed_secrets={},
        dek_id=None,
        kek_id=None,
        wrapped_dek=None,
    )


def test_upgrade_head_on_an_empty_database_then_no_drift(empty_database_url: str) -> None:
    engine = open_engine(empty_database_url)
    with pytest.raises(StoreError, match="run `toolkit-vault init`"):
        require_current(engine)
    migrate(engine)
    migrate(engine)  # idempotent
    require_current(engine)
    assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    engine.dispose()


def test_postgresql_counts_versions_and_chain_positions_past_32_bits(vault: Vault) -> None:
    """PostgreSQL's `integer` ends at 2**31 - 1, which a busy vault's events pass in weeks;
    a version row's id past it is stored and read back (migration 0008)."""
    engine = vault.store.engine
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite's INTEGER is 64-bit")
    serial = "pg_get_serial_sequence('config_versions', 'id')"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"SELECT setval({serial}, 3000000000)")
    session = _session(vault)
    assert vault.store.append_version(session, "t", lambda v, k: draft(), "configure") == 1
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT max(id) FROM config_versions").scalar() == 3000000001
        types = conn.exec_driver_sql(
            "SELECT data_type FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND (table_name, column_name) IN "
            "(('audit_events', 'seq'), ('audit_head', 'seq'), ('config_versions', 'id'))"
        ).all()
    assert [row[0] for row in types] == ["bigint"] * 3
    (record,) = vault.store.current_versions(session)
    assert record.authentic and record.version == 1


def test_schema_revision_is_the_alembic_head(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'v.db'}")
    head = ScriptDirectory.from_config(alembic_config(engine)).get_current_head()
    assert head == SCHEMA_REVISION
    engine.dispose()


def test_sqlite_connection_settings(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'v.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 5000
    assert (tmp_path / "v.db").stat().st_mode & 0o077 == 0  # created 0600
    engine.dispose()


def test_sqlite_hands_out_the_connection_returned_last(tmp_path: Path) -> None:
    """A connection's page cache stays valid only while no other connection writes: the
    pool gives back the connection returned last (the writer thread's, which wrote last),
    instead of rotating through its idle ones, each with a cache gone stale."""
    engine = open_engine(f"sqlite:///{tmp_path / 'v.db'}")
    held = [engine.connect() for _ in range(3)]
    drivers = [conn.connection.dbapi_connection for conn in held]
    for conn in held:
        conn.close()  # back to the pool in this order: the last one is returned last
    for _ in range(3):
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection is drivers[-1]
    engine.dispose()


def _session(vault: Vault) -> str:
    vault.store.create_session("s-1", "local")
    return "s-1"


def test_versions_are_append_only_and_pointer_moves_only_when_live(vault: Vault) -> None:
    session = _session(vault)
    assert vault.store.append_version(session, "t", lambda v, k: draft(), "configure") == 1
    assert vault.store.append_version(session, "t", lambda v, k: draft("error"), "configure") == 2
    assert vault.store.append_version(session, "t", lambda v, k: draft("partial"), "configure") == 3
    with vault.store.engine.connect() as conn:
        assert conn.execute(select(CurrentConfig.version)).scalar_one() == 3
        assert conn.execute(select(func.count()).select_from(ConfigVersion)).scalar_one() == 3


def test_audit_failure_rolls_back_the_version(vault: Vault) -> None:
    session = _session(vault)

    def broken_signer(previous: bytes, payload: bytes) -> bytes:
        raise RuntimeError("signer down")

    store = Store(vault.store.engine, broken_signer, vault.store._rows)
    with pytest.raises(RuntimeError):
        store.append_version(session, "t", lambda v, k: draft(), "configure")
    with vault.store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(ConfigVersion)).scalar_one() == 0
        assert conn.execute(select(func.count()).select_from(CurrentConfig)).scalar_one() == 0


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_pointer_moved_after_the_read_loses_the_compare_and_set_and_retries(
    vault: Vault,
) -> None:
    """PostgreSQL sends a configure's writes as one statement of CTEs: a pointer moved by a
    writer outside the vault's lock between the read and that statement must fail the
    compare-and-set there, roll the attempt back whole and retry from a fresh read. (On
    SQLite no other writer can move it: BEGIN IMMEDIATE holds the database.)"""
    session = _session(vault)
    assert vault.store.append_version(session, "t", lambda v, k: draft(), "configure") == 1
    built: list[int] = []

    def build(version: int, primary: str) -> VersionDraft:
        if not built:
            with vault.store.engine.begin() as other:
                other.execute(update(CurrentConfig).values(version=7))
        built.append(version)
        return draft()

    assert vault.store.append_version(session, "t", build, "configure") == 2
    assert built == [2, 2]
    with vault.store.engine.connect() as conn:
        versions = conn.execute(select(ConfigVersion.version)).scalars().all()
        assert sorted(versions) == [1, 2]  # the lost attempt left no row
        assert conn.execute(select(CurrentConfig.version)).scalar_one() == 2
    assert vault.verify_audit().ok


def test_concurrent_writers_never_lose_an_update(vault: Vault) -> None:
    session = _session(vault)
    built: list[int] = []
    results: list[int] = []
    errors: list[BaseException] = []

    def build(version: int, primary: str) -> VersionDraft:
        built.append(version)
        return draft()

    def writer() -> None:
        try:
            for _ in range(10):
                results.append(vault.store.append_version(session, "t", build, "configure"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sorted(results) == list(range(1, 61))
    with vault.store.engine.connect() as conn:
        stored = (
            conn.execute(select(ConfigVersion.version).order_by(ConfigVersion.version))
            .scalars()
            .all()
        )
        current = conn.execute(select(CurrentConfig.version)).scalar_one()
        seqs: Any = conn.execute(select(AuditEvent.seq).order_by(AuditEvent.seq)).scalars().all()
    assert stored == list(range(1, 61))
    assert current == 60
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
@pytest.mark.parametrize("imported", [False, True], ids=["built-in", "imported"])
def test_a_group_of_appends_reads_their_states_in_one_statement(
    vault: Vault, monkeypatch: pytest.MonkeyPatch, imported: bool
) -> None:
    """PostgreSQL: appends queued behind a write commit as one group that reads their states
    (and an imported toolkit's package, which each checks is still the one it was validated
    against) at once (`_read_ahead`), each taking the chain's end from the event before it
    in the group and a second append to the same key its state from the first: none reads
    its own, and every version lands under its own number with the chain running on."""
    store = vault.store
    sessions = [f"s-{n}" for n in range(4)]
    for session in sessions:
        store.create_session(session, "local")
    toolkit, digest = "t", None
    if imported:
        data = (VECTORS / ENV).read_bytes()
        import_package(store, vault.registry, data, "local", Selection())
        with store.engine.connect() as conn:
            row = conn.execute(select(ImportedToolkitRow.name, ImportedToolkitRow.package_digest))
            toolkit, digest = row.one()
    reads: list[str] = []

    def counting(statement: Any) -> Any:
        def counted(conn: Any, params: dict[str, Any]) -> Any:
            reads.append(params["toolkit_name"])
            return statement(conn, params)

        return counted

    for name in ("_WRITE_STATE", "_IMPORTED"):
        monkeypatch.setattr(versions, name, counting(getattr(versions, name)))
    results: dict[int, int] = {}

    def caller(n: int, session: str) -> None:
        append = store.append_version
        results[n] = append(session, toolkit, lambda v, k: draft(), "configure", imported=digest)

    targets = [*sessions, sessions[0]]
    _as_one_group(store, [partial(caller, n, s) for n, s in enumerate(targets)])
    assert sorted(results.values()) == [1, 1, 1, 1, 2]
    assert reads == []
    assert vault.verify_audit().ok


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_pointer_moved_under_a_pipelined_group_fails_it_and_it_is_written_again(
    vault: Vault,
) -> None:
    """PostgreSQL sends a group of appends in pipeline mode and checks each compare-and-set
    at the sync: a pointer moved by a writer outside the vault's lock meanwhile fails the
    group, which is written again write by write (each from a fresh read)."""
    store = vault.store
    sessions = [f"s-{n}" for n in range(3)]
    for session in sessions:
        store.create_session(session, "local")
        assert store.append_version(session, "t", lambda v, k: draft(), "configure") == 1
    moved: list[int] = []

    def build_for(n: int) -> Any:
        def build(version: int, primary: str) -> VersionDraft:
            if n == 1 and not moved:
                with store.engine.begin() as other:
                    pointer = CurrentConfig.session_id == sessions[1]
                    other.execute(update(CurrentConfig).where(pointer).values(version=7))
                moved.append(version)
            return draft()

        return build

    results: dict[int, int] = {}

    def caller(n: int) -> None:
        results[n] = store.append_version(sessions[n], "t", build_for(n), "configure")

    _as_one_group(store, [partial(caller, n) for n in range(3)])
    assert moved and results == {0: 2, 1: 2, 2: 2}
    with store.engine.connect() as conn:
        rows = conn.execute(select(CurrentConfig.session_id, CurrentConfig.version)).all()
        assert dict(rows) == dict.fromkeys(sessions, 2)
        assert conn.execute(select(func.count()).select_from(ConfigVersion)).scalar_one() == 6
    assert vault.verify_audit().ok


def test_a_first_walk_reads_the_chain_in_batches(
    vault: Vault, home: VaultSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that starts follows the whole chain, one batch of events at a time (a long
    chain's events are never all in memory at once), to the same verified state: only the
    last batch, with the head of its own snapshot, ends the walk."""
    for n in range(10):
        create_token(vault.store, "agent", f"batch-{n}")
    monkeypatch.setattr(following, "FOLLOW_BATCH", 3)
    sizes: list[int] = []
    take = Store._take_rows

    def counted(self: Store, *args: Any, **kwargs: Any) -> None:
        sizes.append(len(args[3]))  # the head's row and the batch's events
        take(self, *args, **kwargs)

    monkeypatch.setattr(Store, "_take_rows", counted)
    other = open_vault(home)
    try:
        state = other.store.chain_state()
        names = {principal.name for principal in state.principals.values()}
        assert {f"batch-{n}" for n in range(10)} <= names
        assert max(sizes) == 4 and sizes.count(4) >= 4
    finally:
        other.store.engine.dispose()


def _noted(store: Store, n: int) -> Any:
    """A write that appends the audit event `{"n": n}`."""
    return lambda conn: store.audit(conn, AuditDraft("local", "noted", details={"n": n}))


def _as_one_group(store: Store, calls: list[Callable[[], None]]) -> None:
    """Run `calls` on threads of their own while this thread holds the writers' lock, so
    that their writes queue and commit as one group; return once they are done."""
    with store.write():
        threads = [threading.Thread(target=call, daemon=True) for call in calls]
        for thread in threads:
            thread.start()
        _until_queued(store, len(calls))
    for thread in threads:
        thread.join(timeout=30)


def _until_queued(store: Store, writes: int) -> None:
    """Wait (up to 10 s) until `writes` writes queue behind the writers' lock (SQLite)."""
    deadline = time.monotonic() + 10
    while store._writer and len(store._writer.queue) < writes and time.monotonic() < deadline:
        time.sleep(0.01)


def _notes(vault: Vault) -> list[int]:
    with vault.store.engine.connect() as conn:
        rows = conn.execute(select(AuditEvent.details).where(AuditEvent.action == "noted"))
        return sorted(json.loads(details)["n"] for details in rows.scalars())


def test_writes_queued_behind_a_write_commit_together_each_standing_alone(
    vault: Vault, database_url: str
) -> None:
    """Group commit: on SQLite, the writes that queue while another holds the writers' lock
    are committed after it in one transaction, in order. One of them that fails after
    writing is rolled back alone and raises in its own caller; the others are stored and the
    audit chain runs on through them. (On PostgreSQL each is a transaction of its own.)"""
    store, sqlite = vault.store, database_url.startswith("sqlite")
    begins: list[str] = []
    outcomes: dict[int, Any] = {}

    def seen(conn: Any) -> None:  # each transaction (SQLite's BEGIN goes to the driver)
        immediate = conn.get_execution_options().get("vault_write", False)
        begins.append("BEGIN IMMEDIATE" if immediate else "BEGIN")

    def caller(n: int) -> None:
        def work(conn: Any) -> int:
            _noted(store, n)(conn)
            if n == 3:
                raise ValueError("refused after writing")
            return n

        try:
            outcomes[n] = store.transact(work)
        except ValueError as exc:
            outcomes[n] = exc

    event.listen(store.engine, "begin", seen)
    try:
        with store.write() as conn:
            threads = [threading.Thread(target=caller, args=(n,), daemon=True) for n in range(6)]
            for thread in threads:
                thread.start()
            if sqlite:
                _until_queued(store, 6)
            _noted(store, 100)(conn)
        for thread in threads:
            thread.join(timeout=30)
    finally:
        event.remove(store.engine, "begin", seen)
    assert {n: outcomes[n] for n in (0, 1, 2, 4, 5)} == {0: 0, 1: 1, 2: 2, 4: 4, 5: 5}
    assert isinstance(outcomes[3], ValueError)
    assert _notes(vault) == [0, 1, 2, 4, 5, 100]
    assert vault.verify_audit().ok
    if sqlite:
        assert begins == ["BEGIN IMMEDIATE"] * 2  # the holder's, then the group's


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_write_that_gave_up_waiting_is_never_written_later(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that waited too long for the writers' lock raises and leaves the queue: the
    group committed after it does not carry it out behind its caller's back."""
    store = vault.store
    monkeypatch.setattr(transactions, "BUSY_TIMEOUT_MS", 200)
    refused: list[BaseException] = []

    def impatient() -> None:
        try:
            store.transact(_noted(store, 1))
        except StoreError as exc:
            refused.append(exc)

    with store.write():
        thread = threading.Thread(target=impatient, daemon=True)
        thread.start()
        thread.join(timeout=10)
    store.transact(_noted(store, 2))
    assert [str(exc) for exc in refused] == ["the database refused the write (busy)"]
    assert _notes(vault) == [2]
    assert vault.verify_audit().ok


class _Abort(BaseException):
    """Not an `Exception`: what a group cannot recover from (as a failed commit)."""


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_group_that_cannot_commit_fails_every_write_in_it(vault: Vault) -> None:
    """When a group's transaction is lost, no write of it is reported stored: the ones
    before the failure raise too, and none of them is in the store."""
    store = vault.store
    outcomes: dict[int, Any] = {}

    def caller(n: int) -> None:
        def work(conn: Any) -> int:
            _noted(store, n)(conn)
            if n == 2:
                raise _Abort
            return n

        try:
            outcomes[n] = store.transact(work)
        except _Abort as exc:
            outcomes[n] = exc

    _as_one_group(store, [partial(caller, n) for n in range(4)])
    assert all(isinstance(outcome, _Abort) for outcome in outcomes.values()), outcomes
    assert len(outcomes) == 4 and _notes(vault) == []
    assert vault.verify_audit().ok


def _settled(write: Write, timeout: float = 10) -> None:
    done = threading.Event()
    write.when_settled(done.set)
    assert done.wait(timeout), "the write was never settled"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_write_left_to_commit_returns_at_once_and_is_live_before_it_is_settled(
    vault: Vault,
) -> None:
    """Inside `deferring`, a write given a `then` is queued and its caller goes on at once
    (a server's worker thread is free while the writer commits it); `then` runs once it is
    committed, before anyone hears it is settled, so its answer never outruns it."""
    store = vault.store
    seen: list[Any] = []
    with store.write():  # nothing commits while this is held
        with deferring() as left:
            assert store.transact(_noted(store, 1), lambda result: seen.append("then")) is None
        assert len(left) == 1 and not left[0].settled and seen == []
        left[0].when_settled(lambda: seen.append(("settled", list(seen))))
    _settled(left[0])
    assert seen == ["then", ("settled", ["then"])]
    assert left[0].error is None and _notes(vault) == [1]
    assert vault.verify_audit().ok


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_write_left_to_commit_that_fails_is_settled_with_its_error_alone(vault: Vault) -> None:
    """A left write that fails is rolled back and settled with its error; its `then` never
    runs; the write queued beside it in the same group is stored all the same."""
    store = vault.store
    ran: list[int] = []

    def refused(conn: Any) -> None:
        _noted(store, 1)(conn)
        raise ValueError("refused after writing")

    with store.write(), deferring() as left:
        store.transact(refused, ran.append)
        store.transact(_noted(store, 2), ran.append)
        _until_queued(store, 2)
    for write in left:
        _settled(write)
    assert isinstance(left[0].error, ValueError) and left[1].error is None
    assert ran == [None] and _notes(vault) == [2]  # `_noted` returns None
    assert vault.verify_audit().ok


def test_a_write_that_lost_a_race_is_tried_again(vault: Vault, database_url: str) -> None:
    """A conflict (here the compare-and-set's own) is tried again from a fresh transaction,
    waited for or left to commit, and only its last try is stored."""
    store = vault.store
    tries: list[int] = []

    def racy(n: int) -> Any:
        def work(conn: Any) -> int:
            tries.append(n)
            _noted(store, n)(conn)
            if tries.count(n) == 1:
                raise transactions._pointer_moved()
            return n

        return work

    assert store.transact(racy(1)) == 1
    with deferring() as left:
        store.transact(racy(2), lambda result: None)
    for write in left:
        _settled(write)
        assert write.error is None and write.result == 2
    assert tries == [1, 1, 2, 2] and _notes(vault) == [1, 2]
    assert vault.verify_audit().ok


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_writer_thread_ends_when_idle_and_starts_with_the_next_left_write(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "IDLE_S", 0.05)
    store = vault.store

    def writers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "toolkit-vault-writer"]

    before = set(writers())  # other stores' (an earlier test's may end meanwhile)
    for n in range(2):
        with deferring() as left:
            store.transact(_noted(store, n), lambda result: None)  # left: the writer writes it
        _settled(left[0])
        deadline = time.monotonic() + 10
        while set(writers()) - before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not set(writers()) - before
    assert _notes(vault) == [0, 1]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_caller_that_finds_no_group_being_written_writes_its_own(vault: Vault) -> None:
    """A sequential writer (a CLI command, stdio) writes on its own thread: no hand-over to
    the writer thread, which a write left to commit starts."""
    store = vault.store
    threads: list[str] = []

    def work(conn: Any) -> None:
        threads.append(threading.current_thread().name)

    store.transact(work)
    with deferring() as left:
        store.transact(work, lambda result: None)
    _settled(left[0])
    assert left[0].error is None
    assert threads == [threading.current_thread().name, "toolkit-vault-writer"]


def test_a_refused_driver_read_is_a_store_error_and_the_next_read_works(vault: Vault) -> None:
    """`Store.fetch` (the list path's query, on the driver directly) maps a driver error to
    the store's own, drops that connection, and reads on; on PostgreSQL the failed
    statement must not leave an aborted transaction behind in the pool."""
    store, session = vault.store, _session(vault)
    store.append_version(session, "t", lambda v, k: draft(), "configure")
    for _ in range(3):
        with pytest.raises(StoreError, match=r"^the database refused the read \(\w+\)$"):
            store.fetch("SELECT nothing FROM no_such_table WHERE a IN (?, ?)", ("s1", "s2"))
        assert store.effective_pointers(session, "principal:x") == {"t": (session, 1)}


def test_the_commit_mark_moves_with_every_commit_and_only_then(
    vault: Vault, database_url: str, tmp_path: Path
) -> None:
    """SQLite: a commit by any other connection (another engine is another process, as far
    as the mark goes) moves it, a read or a rolled-back write does not; the pointers read
    on the same connection are `effective_pointers`. PostgreSQL gives neither, and asking
    never creates a missing SQLite file."""
    store = vault.store
    conn = connect(vault, Principal("local", "agent"))
    conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')
    session = conn.session_id
    assert session is not None
    conn.handle_raw(
        b'{"type":"toolkit/configure/req","toolkit_name":"filesystem","config":{"root_dir":"/tmp"}}'
    )
    pointers = store.effective_pointers(session, "principal:local")
    assert pointers == {"filesystem": (session, 1)}
    if database_url.startswith("postgresql"):
        assert store.commit_mark() is None
        assert store.pointers_at_once(session, "principal:local") is None
        return
    assert store.pointers_at_once(session, "principal:local") == pointers
    other = open_engine(database_url)
    try:
        first = store.commit_mark()
        assert first is not None and store.commit_mark() == first
        with other.connect() as conn:
            conn.execute(select(func.count()).select_from(ConfigVersion)).scalar()
        assert store.commit_mark() == first
        with other.begin() as conn:
            conn.execute(update(VaultKey).values(created_at=VaultKey.created_at + 1))
        second = store.commit_mark()
        assert second is not None and second != first
        with pytest.raises(RuntimeError), other.begin() as conn:
            conn.execute(update(VaultKey).values(created_at=VaultKey.created_at + 1))
            raise RuntimeError("rolled back")
        assert store.commit_mark() == second
    finally:
        other.dispose()
    missing = tmp_path / "gone.db"
    engine = open_engine(f"sqlite:///{missing}")  # creates it, empty
    missing.unlink()
    assert Store(engine).commit_mark() is None
    assert not missing.exists()
    engine.dispose()
