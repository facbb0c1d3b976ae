"""The network path's memory, in process: who a token is, and which sessions are bound.

`PrincipalCache` must never let a revoked token through for longer than its promise (at
once in its own process, within `max_age` elsewhere) and must never remember a refusal;
`SessionBindings` checks ownership and resumes once per session and process, attaches no
plugin for a push that HTTP cannot deliver, and stays bounded. A list on a bound session
is at most one database transaction (none while nothing is committed, on SQLite), a list
answered from memory sees every commit made anywhere, and a pooled PostgreSQL connection
dropped while idle is replaced without failing a request.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, event, text, update
from starlette.testclient import TestClient

from test_vault import quiet
from toolkit_vault.access.principals import Principal, authenticate, create_token, revoke
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import ToolkitListRequest, ToolkitStatusEvent
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.database import IDLE_PING_S, open_engine
from toolkit_vault.store.models import CurrentConfig
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.transports.http_access import PrincipalCache, SessionBindings, SharedMarks
from toolkit_vault.transports.http_api import Limits, create_app

HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
LIST = {"type": "toolkit/list/req"}
FAST = Limits(requests_per_second=1e6, burst=10**6, connections_per_principal=64)


def configure(root: str = "/tmp") -> dict[str, Any]:
    return {
        "type": "toolkit/configure/req",
        "toolkit_name": "filesystem",
        "config": {"root_dir": root},
    }


@pytest.fixture
def replica(home: VaultSettings) -> Iterator[Vault]:
    """A second vault on the same home and database: another process, as far as caches go."""
    other = open_vault(home)
    yield other
    other.store.engine.dispose()


def client_for(vault: Vault, home: VaultSettings, limits: Limits = FAST) -> TestClient:
    provider = open_provider(home)
    return TestClient(create_app(vault, provider, limits))


def test_a_revocation_in_this_process_is_learned_at_once(vault: Vault) -> None:
    cache = PrincipalCache(vault.store, max_age=3600)
    principal_id, token = create_token(vault.store, "agent", "soon-gone")
    assert cache.authenticate(token) == Principal(principal_id, "agent")
    assert cache.recall(token) == Principal(principal_id, "agent")  # remembered for an hour
    revoke(vault.store, "soon-gone")
    assert cache.recall(token) is None
    assert cache.authenticate(token) is None


def test_a_revocation_elsewhere_is_learned_within_max_age(vault: Vault, replica: Vault) -> None:
    cache = PrincipalCache(vault.store, max_age=0.5)
    _, token = create_token(vault.store, "agent", "elsewhere")
    assert cache.authenticate(token) is not None
    revoke(replica.store, "elsewhere")  # another engine: nothing tells this process
    started = time.monotonic()
    while cache.authenticate(token) is not None:
        assert time.monotonic() - started < 0.5, "a revoked token outlived max_age"
        time.sleep(0.02)


def test_refusals_are_never_remembered_and_writes_elsewhere_keep_the_cache(
    vault: Vault,
) -> None:
    cache = PrincipalCache(vault.store, max_age=3600, size=2)
    assert cache.authenticate("tkv_" + "A" * 43) is None  # well formed, unknown
    assert cache.authenticate("not a token") is None
    tokens = [create_token(vault.store, "agent", f"agent-{n}")[1] for n in range(3)]
    for token in tokens:
        assert cache.authenticate(token) is not None
    assert cache.recall(tokens[0]) is None and cache.recall(tokens[2]) is not None  # size 2
    connect(vault, Principal("local", "agent")).handle_raw(
        b'{"type":"handshake/req","capabilities":["toolkits"]}'
    )  # a write that is not about principals
    assert cache.recall(tokens[2]) is not None


def test_http_handshakes_and_resumes_leave_no_plugin_attached(
    vault: Vault, home: VaultSettings
) -> None:
    token = create_token(vault.store, "agent", "busy")[1]
    auth = {"Authorization": f"Bearer {token}"}
    with client_for(vault, home) as client:
        session = client.post("/a2e", json=HELLO, headers=auth).json()["session_id"]
        assert client.post("/a2e", json=configure(), headers=auth | {"A2E-Session": session})
        for _ in range(100):
            resumed = client.post("/a2e", json=HELLO | {"session_id": session}, headers=auth)
            assert resumed.json()["session_id"] == session
            assert client.post("/a2e", json=HELLO, headers=auth).json()["type"] == "handshake/resp"
        assert vault._plugins == {}  # nothing attached, not even an empty set per session
        bindings: SessionBindings = client.app.state.bindings  # type: ignore[attr-defined]
        assert len(bindings) == 101  # one per session, resumes included


def test_session_bindings_are_bounded(vault: Vault) -> None:
    bindings = SessionBindings(vault, size=3)
    agent = Principal("local", "agent")
    for _ in range(5):
        connection = connect(vault, agent)
        connection.handle_raw(b'{"type":"handshake/req","capabilities":["toolkits"]}')
        bindings.remember(connection)
    assert len(bindings) == 3 and vault._plugins == {}


def test_a_list_on_a_bound_session_is_at_most_one_transaction(
    vault: Vault, home: VaultSettings, database_url: str
) -> None:
    """PostgreSQL: one per list. SQLite: none, not even after the configure's commit (the
    session's pointers are read once on the watching connection, outside the pool, then
    nothing is read while the store's commit mark stays put)."""
    token = create_token(vault.store, "agent", "lister")[1]
    auth = {"Authorization": f"Bearer {token}"}
    transactions, token_checks = [0], [0]

    def checkout(*_: Any) -> None:
        transactions[0] += 1

    def statement(_conn: Any, _cursor: Any, text: str, *_: Any) -> None:
        token_checks[0] += "FROM principals" in text  # the cache's refresh, once a second

    with client_for(vault, home) as client:
        session = client.post("/a2e", json=HELLO, headers=auth).json()["session_id"]
        headers = auth | {"A2E-Session": session}
        assert client.post("/a2e", json=configure(), headers=headers).json()["status"] == "ok"
        quiet(vault, 0.3)  # its configure's last commit made (the CI of cdfeb28 counted one)
        event.listen(vault.store.engine, "checkout", checkout)
        event.listen(vault.store.engine, "before_cursor_execute", statement)
        try:
            for _ in range(10):
                listed = client.post("/a2e", json=LIST, headers=headers).json()
                assert {t["name"]: t["configured"] for t in listed["toolkits"]}["filesystem"]
        finally:
            event.remove(vault.store.engine, "checkout", checkout)
            event.remove(vault.store.engine, "before_cursor_execute", statement)
    assert transactions[0] - token_checks[0] == (10 if database_url.startswith("postgres") else 0)


def names_configured(answer: dict[str, Any]) -> dict[str, bool]:
    return {t["name"]: t["configured"] for t in answer["toolkits"]}


def test_a_list_from_memory_sees_every_commit_elsewhere_at_once(
    vault: Vault, replica: Vault, home: VaultSettings, database_url: str
) -> None:
    """A list answered on the event loop stays exact: a commit elsewhere that leaves the
    session's pointers alone is answered from memory, but a purge by another process and a
    pointer rolled back in the database each show in the very next list, over HTTP (answered
    on the event loop) and through the service API alike."""
    token = create_token(vault.store, "agent", "watcher")[1]
    auth = {"Authorization": f"Bearer {token}"}
    with client_for(vault, home) as client:
        session = client.post("/a2e", json=HELLO, headers=auth).json()["session_id"]
        headers = auth | {"A2E-Session": session}

        def http_list() -> dict[str, bool]:
            return names_configured(client.post("/a2e", json=LIST, headers=headers).json())

        assert client.post("/a2e", json=configure(), headers=headers).json()["status"] == "ok"
        assert http_list()["filesystem"] and http_list()["filesystem"]
        bindings: SessionBindings = client.app.state.bindings  # type: ignore[attr-defined]
        principal = authenticate(vault.store, token)
        bound = bindings.bound(principal, session) if principal else None
        assert bound is not None
        in_memory = bound.answer_without_blocking(ToolkitListRequest())
        if database_url.startswith("postgres"):
            assert in_memory is None  # no commit mark: every list reads
        else:
            assert in_memory is not None
            assert names_configured(json.loads(in_memory))["filesystem"] is True

        create_token(replica.store, "agent", "bystander")  # a commit elsewhere, not ours
        after = bound.answer_without_blocking(ToolkitListRequest())
        if not database_url.startswith("postgres"):  # its pointers, read at once, unchanged
            assert after is not None and names_configured(json.loads(after))["filesystem"]

        replica.purge("operator", session, "filesystem")  # another process
        assert bound.answer_without_blocking(ToolkitListRequest()) is None
        assert http_list()["filesystem"] is False
        assert client.post("/a2e", json=configure(), headers=headers).json()["status"] == "ok"
        assert http_list()["filesystem"] is True

        assert client.post("/a2e", json=configure("/srv"), headers=headers).json()["status"] == "ok"
        assert http_list()["filesystem"] is True
        with replica.store.engine.begin() as db:  # a database writer rolls the pointer back
            db.execute(
                update(CurrentConfig)
                .where(CurrentConfig.session_id == session)
                .values(version=CurrentConfig.version - 1)
            )
        assert http_list()["filesystem"] is False


def test_lists_waiting_together_share_one_mark_read_after_the_last_arrived() -> None:
    """A mark read before a list arrived could miss a commit acknowledged before it was
    sent: the shared read begins after every caller it serves, and a caller arriving while
    it is on its way (PostgreSQL's head read) waits for a read of its own."""
    log: list[str] = []

    async def main() -> tuple[list[int | None], int | None]:
        release = asyncio.Event()

        async def read() -> int:
            log.append("read")
            await release.wait()
            return log.count("read")

        marks = SharedMarks(read)

        async def arrive() -> int | None:
            log.append("arrived")
            return await marks.read()

        together = [asyncio.ensure_future(arrive()) for _ in range(5)]
        while "read" not in log:
            await asyncio.sleep(0)
        late = asyncio.ensure_future(arrive())
        while log.count("arrived") < 6:
            await asyncio.sleep(0)
        release.set()
        return list(await asyncio.gather(*together)), await late

    together, late = asyncio.run(main())
    assert together == [1] * 5 and late == 2
    assert log == ["arrived"] * 5 + ["read", "arrived", "read"]


def test_a_caller_that_left_or_a_failed_read_keeps_the_others_answered() -> None:
    async def seven() -> int:
        return 7

    async def fails() -> int:
        raise RuntimeError("the watching connection is gone")

    async def main(marks: SharedMarks[int]) -> int | None:
        leaving = asyncio.ensure_future(marks.read())
        staying = asyncio.ensure_future(marks.read())
        await asyncio.sleep(0)  # both wait for the same read
        leaving.cancel()
        return await asyncio.wait_for(staying, 5)

    assert asyncio.run(main(SharedMarks(seven))) == 7
    assert asyncio.run(main(SharedMarks(fails))) is None  # None: read the store


def test_what_this_process_drops_is_read_again(vault: Vault) -> None:
    """A principal's config changed (here told by an event, as the PostgreSQL relay tells
    it, with no commit of this process's to move the mark): an HTTP session using it drops
    its instance, and its next list reads the store again instead of believing memory."""
    agent = Principal("local", "agent")
    configurer, http = connect(vault, agent, lambda _: None), connect(vault, agent)
    for conn in (configurer, http):
        conn.handle_raw(json.dumps(HELLO))
    answer = json.loads(configurer.handle_raw(json.dumps(configure() | {"scope": "principal"}))[0])
    assert answer["status"] == "ok"

    def listed() -> dict[str, bool]:
        return names_configured(json.loads(http.handle_raw(json.dumps(LIST))[0]))

    assert listed()["filesystem"] is True and listed()["filesystem"] is True
    vault.deliver(
        ToolkitStatusEvent(session_id="principal:local", toolkit_name="filesystem", configured=True)
    )
    assert listed()["filesystem"] is True


def test_a_replica_that_never_saw_the_handshake_binds_and_resumes_the_session(
    vault: Vault, replica: Vault, home: VaultSettings
) -> None:
    alice = create_token(vault.store, "agent", "alice")[1]
    mallory = create_token(vault.store, "agent", "mallory")[1]
    with client_for(vault, home) as a, client_for(replica, home) as b:
        auth = {"Authorization": f"Bearer {alice}"}
        session = a.post("/a2e", json=HELLO, headers=auth).json()["session_id"]
        headers = auth | {"A2E-Session": session}
        assert a.post("/a2e", json=configure(), headers=headers).json()["status"] == "ok"
        listed = b.post("/a2e", json=LIST, headers=headers).json()
        assert {t["name"]: t["configured"] for t in listed["toolkits"]}["filesystem"] is True
        stolen = b.post(
            "/a2e",
            json=LIST,
            headers={"Authorization": f"Bearer {mallory}", "A2E-Session": session},
        ).json()
        assert (stolen["code"], stolen["message"]) == ("RUNTIME_ERROR", "unknown session")


@pytest.mark.postgres
def test_a_pooled_connection_dropped_while_idle_is_replaced(fresh_postgres_url: str) -> None:
    """No ping per checkout any more: one after an idle second, so a dropped connection is
    replaced instead of failing the request that drew it."""
    engine = open_engine(fresh_postgres_url)
    admin = create_engine(fresh_postgres_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            pid = conn.exec_driver_sql("select pg_backend_pid()").scalar()
        with admin.connect() as conn:
            conn.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})
        time.sleep(IDLE_PING_S + 0.1)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("select 1").scalar() == 1
    finally:
        engine.dispose()
        admin.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sqlite_writers_of_one_process_queue_in_turn_not_in_sqlites_busy_loop(
    vault: Vault,
) -> None:
    """While one writer holds the write transaction, another of the same process waits on
    the store's queue: it sends no BEGIN IMMEDIATE (whose busy handler would poll with
    sleeps of up to 100 ms) until the first has committed."""
    begins: list[float] = []

    def began(conn: Any) -> None:  # SQLite's BEGIN goes to the driver: the begin event sees it
        if conn.get_execution_options().get("vault_write", False):
            begins.append(time.monotonic())

    event.listen(vault.store.engine, "begin", began)
    released = []
    try:
        with vault.store.write():
            waiter = threading.Thread(target=lambda: vault.store.record_attempt(_draft()))
            waiter.start()
            time.sleep(0.3)
            assert len(begins) == 1  # only ours: the other writer waits in the queue
            released.append(time.monotonic())
        waiter.join(timeout=10)
    finally:
        event.remove(vault.store.engine, "begin", began)
    assert len(begins) == 2 and begins[1] >= released[0]


def _draft() -> AuditDraft:
    return AuditDraft("local", "configure_refused", details={"reason": "test"})
