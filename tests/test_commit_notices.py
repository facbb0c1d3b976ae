"""PostgreSQL's commit mark (`store.notices`): a list is answered from memory only while the
mark proves that nothing was committed since its read (issue 42).

Two vaults on one database stand for two replicas. The mark moves when the other one
commits (its transaction NOTIFYs), is not believed while the LISTEN connection is down or
its head was not checked lately, and moves again on a reconnection (what was committed
meanwhile was not heard). The chain's followers never go by it: a token created by the other
replica is believed here before its notice arrives, and neither does a list: the mark it
goes by (`Store.commit_mark`) also reads the chain head. SQLite has its own exact mark
(`PRAGMA data_version`): these tests are PostgreSQL's.

Each notice carries its process's token, so the foreign mark moves only on the other
replica's commits (or a head no notice explains): while it stands still, this process's own
commits keep its ledger current, and a list after a configure here is answered from memory.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from toolkit_vault.access.principals import Principal, authenticate, create_token
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Mark, Vault
from toolkit_vault.protocol import ToolkitListRequest
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store import notices as notices_module
from toolkit_vault.store.notices import CommitNotices

pytestmark = pytest.mark.postgres
PROBE = "toolkit_vault_test_probe"


@pytest.fixture
def replica(home: VaultSettings) -> Iterator[Vault]:
    """A second vault on the same database: another process, as far as marks go."""
    if not home.database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's commit mark (SQLite's is `data_version`)")
    other = open_vault(home)
    yield other
    other.store.engine.dispose()


@pytest.fixture
def listening(vault: Vault, replica: Vault) -> Iterator[CommitNotices]:
    """The first vault's notices, started; its head check far apart, so only a notice (or
    a reconnection) moves its mark during a test."""
    notices = vault.store.listen()
    notices.check_s = 30.0
    notices.subscribe(PROBE, lambda payload: BLOCKS.get(payload, threading.Event()).wait(10))
    notices.start()
    assert notices.listening.wait(10)
    yield notices
    notices.stop()


BLOCKS: dict[str, threading.Event] = {}


def _until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _sql(vault: Vault, statement: str) -> None:
    url = vault.store.engine.url.set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(statement)


def test_a_commit_in_another_process_moves_the_mark_by_its_notice(
    vault: Vault, replica: Vault, listening: CommitNotices
) -> None:
    mark = listening.mark()
    assert mark is not None
    assert listening.mark() == mark  # nothing committed: lists from memory
    create_token(replica.store, "agent", "elsewhere")
    assert _until(lambda: listening.mark() not in (mark, None), 2.0)


def test_a_commit_here_moves_the_mark_at_once(vault: Vault, listening: CommitNotices) -> None:
    blocked = BLOCKS.setdefault("hold", threading.Event())
    try:
        _sql(vault, f"NOTIFY {PROBE}, 'hold'")  # the notices thread waits: no notice is heard
        time.sleep(0.2)
        mark = listening.mark()
        create_token(vault.store, "agent", "here")
        assert listening.mark() != mark
    finally:
        blocked.set()


def test_the_chain_is_followed_without_waiting_for_the_notice(
    vault: Vault, replica: Vault, listening: CommitNotices
) -> None:
    blocked = BLOCKS.setdefault("wait", threading.Event())
    try:
        _sql(vault, f"NOTIFY {PROBE}, 'wait'")
        time.sleep(0.2)
        mark = listening.mark()
        vault.store.chain_state()  # followed here at this mark
        token = create_token(replica.store, "agent", "new-elsewhere")[1]
        assert listening.mark() == mark  # its notice is not heard yet
        principal = authenticate(vault.store, token)
        assert principal is not None and principal.role == "agent"
    finally:
        blocked.set()


def test_a_lost_connection_is_not_believed_and_a_new_one_moves_the_mark(
    vault: Vault, replica: Vault, listening: CommitNotices
) -> None:
    mark = listening.mark()
    assert mark is not None
    _sql(  # the listening connection: the last statement it ran is its head check
        vault,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
        "current_database() AND query = 'SELECT seq FROM audit_head WHERE id = 1'",
    )
    assert _until(lambda: listening.mark() is None, 0.9)
    create_token(replica.store, "agent", "while-down")  # its notice is lost
    assert _until(lambda: listening.mark() is not None, 5.0)
    assert listening.mark() != mark


def test_a_mark_not_checked_lately_is_not_believed(
    vault: Vault, listening: CommitNotices, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert listening.mark() is not None
    monkeypatch.setattr(notices_module, "STALE_S", 0.3)
    time.sleep(0.4)
    assert listening.mark() is None


def test_commits_here_keep_the_ledger_current_without_a_read(
    vault: Vault, listening: CommitNotices
) -> None:
    vault.store.chain_state()  # followed once
    foreign = listening.foreign()
    assert foreign is not None and vault.store.chain_state_at_once() is not None
    principal_id = create_token(vault.store, "agent", "made-here")[0]
    time.sleep(0.3)  # its own notice is back, and told apart by its token
    assert listening.foreign() == foreign
    state = vault.store.chain_state_at_once()
    assert state is not None and principal_id in state.principals


def test_a_commit_elsewhere_is_read_before_a_list_is_answered_from_memory(
    vault: Vault, replica: Vault, listening: CommitNotices
) -> None:
    """A list after a configure here needs no read; once the other replica purged the
    session (its notice heard), the list reads and says so."""
    agent = Principal("local", "agent")
    conn = connect(vault, agent)
    conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')
    session = conn.session_id
    assert session is not None
    vault.list_toolkits(agent, session, ToolkitListRequest())  # the session's first read
    conn.handle_raw(
        b'{"type":"toolkit/configure/req","toolkit_name":"filesystem","config":{"root_dir":"/tmp"}}'
    )
    quick = vault.answer_without_blocking(agent, session, ToolkitListRequest())
    assert quick is not None and _configured(quick)["filesystem"] is True
    foreign = listening.foreign()
    replica.purge("operator", session)
    assert _until(lambda: listening.foreign() not in (foreign, None), 2.0)
    assert vault.answer_without_blocking(agent, session, ToolkitListRequest()) is None
    listed = vault.list_toolkits(agent, session, ToolkitListRequest())
    assert {t.name: t.configured for t in listed.toolkits}["filesystem"] is False


@pytest.mark.parametrize("where", ["thread", "event loop"])
def test_a_commit_elsewhere_shows_in_the_next_list_before_its_notice(
    vault: Vault, replica: Vault, listening: CommitNotices, where: str
) -> None:
    """An agent's next request may reach this replica before the other one's notice does
    (issue 42's replica soak saw it under load): the list's mark reads the chain head, so
    a purge acknowledged there is never answered from memory here; in a worker thread
    (`Vault.mark`) or on the server's event loop (`Vault.mark_on_loop`, which the HTTP and
    WebSocket lists go by)."""

    loop = asyncio.new_event_loop()  # one, as a server's (a new one reads its head anew)

    def mark() -> Mark | None:
        return vault.mark() if where == "thread" else loop.run_until_complete(vault.mark_on_loop())

    agent = Principal("local", "agent")
    conn = connect(vault, agent)
    conn.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')
    session = conn.session_id
    assert session is not None
    conn.handle_raw(
        b'{"type":"toolkit/configure/req","toolkit_name":"filesystem","config":{"root_dir":"/tmp"}}'
    )
    vault.list_toolkits(agent, session, ToolkitListRequest())
    quick = vault.answer_without_blocking(agent, session, ToolkitListRequest(), mark())
    assert quick is not None and _configured(quick)["filesystem"] is True
    blocked = BLOCKS[f"purge {where}"] = threading.Event()  # one a test: it is set after
    try:
        _sql(vault, f"NOTIFY {PROBE}, 'purge {where}'")  # the notices thread waits: none heard
        time.sleep(0.2)
        notice_mark = listening.mark()
        replica.purge("operator", session)
        assert vault.answer_without_blocking(agent, session, ToolkitListRequest(), mark()) is None
        listed = vault.list_toolkits(agent, session, ToolkitListRequest())
        assert {t.name: t.configured for t in listed.toolkits}["filesystem"] is False
        assert listening.mark() != notice_mark  # moved by the head, not by the notice
    finally:
        blocked.set()
        loop.close()


def test_a_commit_elsewhere_without_its_notice_is_caught_by_the_head_check(
    vault: Vault, replica: Vault
) -> None:
    """A writer whose notice says it is this process (or that sends none) moves the head
    beyond what the ledger holds: the next head check moves the foreign mark."""
    notices = vault.store.listen()
    notices.check_s = 0.1
    notices.start()
    try:
        assert notices.listening.wait(10)
        vault.store.chain_state()
        foreign = notices.foreign()
        replica.store._pg_begin_write = vault.store._pg_begin_write  # passes for this process
        create_token(replica.store, "agent", "unheard")
        assert _until(lambda: notices.foreign() not in (foreign, None), 2.0)
        assert vault.store.chain_state_at_once() is None
    finally:
        notices.stop()


def test_a_write_that_fails_is_doubted(vault: Vault, listening: CommitNotices) -> None:
    """A write that raised may have committed all the same (a connection lost in its
    commit), and its notice passes for this process's own: it moves the foreign mark."""
    foreign = listening.foreign()
    assert foreign is not None
    with pytest.raises(RuntimeError), vault.store.write():
        raise RuntimeError("lost in the commit")
    assert listening.foreign() != foreign


def _configured(answer: str) -> dict[str, bool]:
    return {t["name"]: t["configured"] for t in json.loads(answer)["toolkits"]}


def test_a_head_read_that_hangs_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A database gone silent (a partition: no reset, no answer) would hold the lists
    waiting on the event loop's head read for as long as TCP takes to notice; after
    `HEAD_READ_S` the read is given up (None: the lists read the store)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts, never answers
    try:
        port = silent.getsockname()[1]
        notices = CommitNotices(f"host=127.0.0.1 port={port} dbname=x user=x", "t", lambda: 0)
        monkeypatch.setattr(notices_module, "HEAD_READ_S", 0.3)
        monkeypatch.setattr(notices, "mark", lambda: 1)  # as if its LISTEN were believed
        started = time.monotonic()
        assert asyncio.run(asyncio.wait_for(notices.exact_mark_on_loop(), 5)) is None
        assert time.monotonic() - started < 2.0
    finally:
        silent.close()
