"""The toolkits capability end to end through the service API, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from toolkit_vault.access.principals import Principal
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import A2EConnection, Reply, connect, read_request
from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import Message
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store import transactions
from toolkit_vault.store.models import AuditEvent, ConfigVersion, CurrentConfig

from tkv_test_plugins import SecretiveToolkit

AGENT = Principal("local", "agent")
pytestmark = pytest.mark.key_providers("file", "aws-kms", "pkcs11")  # conftest.py
CANARY = "tkv-canary-7f3a9c1e5b2d"


def request(conn: A2EConnection, message: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in conn.handle_raw(json.dumps(message))]


def handshake(vault: Vault, session_id: str | None = None) -> tuple[A2EConnection, str]:
    conn = connect(vault, AGENT)
    msg: dict[str, Any] = {"type": "handshake/req", "capabilities": ["toolkits"]}
    if session_id:
        msg["session_id"] = session_id
    response = request(conn, msg)[0]
    assert response["type"] == "handshake/resp", response
    return conn, response["session_id"]


def configure(conn: A2EConnection, toolkit: str, config: dict[str, Any]) -> list[dict[str, Any]]:
    return request(
        conn, {"type": "toolkit/configure/req", "toolkit_name": toolkit, "config": config}
    )


def listed(conn: A2EConnection) -> dict[str, bool]:
    response = request(conn, {"type": "toolkit/list/req"})[0]
    return {t["name"]: t["configured"] for t in response["toolkits"]}


def secret_config(api_key: str = CANARY) -> dict[str, Any]:
    return {
        "endpoint": "https://api.example.test",
        "api_key": api_key,
        "auth": {"user": "alice", "password": api_key + "-pw"},
        "tokens": ["public-looking", api_key + "-tok"],
        "headers": {"X-Api": api_key + "-hdr"},
    }


def versions(vault: Vault) -> list[Any]:
    with vault.store.engine.connect() as db:
        return list(db.execute(select(ConfigVersion).order_by(ConfigVersion.id)))


def test_configure_and_list(vault: Vault) -> None:
    conn, _ = handshake(vault)
    assert listed(conn) == {"filesystem": False, "secretive": False}
    out = configure(conn, "filesystem", {"root_dir": "/tmp"})
    assert out[0]["type"] == "toolkit/configure/resp"
    assert out[0]["status"] == "ok"
    assert out[1]["type"] == "toolkit/status/event" and out[1]["configured"] is True
    assert listed(conn) == {"filesystem": True, "secretive": False}


def test_broken_entry_point_is_left_out(vault: Vault) -> None:
    assert "broken" not in vault.registry and "secretive" in vault.registry


def test_filters(vault: Vault) -> None:
    conn, _ = handshake(vault)
    by_kind = request(conn, {"type": "toolkit/list/req", "filter_kind": "io"})[0]
    assert [t["name"] for t in by_kind["toolkits"]] == ["filesystem"]
    by_tags = request(conn, {"type": "toolkit/list/req", "filter_tags": ["test", "secrets"]})[0]
    assert [t["name"] for t in by_tags["toolkits"]] == ["secretive"]
    none = request(conn, {"type": "toolkit/list/req", "filter_tags": ["test", "fs"]})[0]
    assert none["toolkits"] == []


def test_plugin_receives_exactly_the_submitted_config(vault: Vault) -> None:
    SecretiveToolkit.received.clear()
    conn, _ = handshake(vault)
    out = configure(conn, "secretive", secret_config())
    assert out[0]["status"] == "ok"
    assert SecretiveToolkit.received == [secret_config()]
    assert CANARY not in json.dumps(out)


def test_secrets_are_split_and_encrypted(vault: Vault) -> None:
    conn, _ = handshake(vault)
    configure(conn, "secretive", secret_config())
    (row,) = versions(vault)
    public = json.loads(row.public_config)
    assert public == {
        "endpoint": "https://api.example.test",
        "auth": {"user": "alice"},
        "tokens": [None, None],
        "headers": {},
    }
    sealed = json.loads(row.sealed_secrets)
    assert sorted(sealed) == [
        "/api_key",
        "/auth/password",
        "/headers/X-Api",
        "/tokens/0",
        "/tokens/1",
    ]
    assert sorted(json.loads(row.secret_fingerprints)) == sorted(sealed)
    assert row.kek_id == "vk-1" and row.wrapped_dek


def _encodings(value: str) -> list[bytes]:
    raw = value.encode()
    return [
        raw,
        base64.b64encode(raw),
        base64.urlsafe_b64encode(raw),
        raw.hex().encode(),
        raw.hex().upper().encode(),
    ]


def test_no_canary_in_any_file_under_the_home(vault: Vault, home: VaultSettings) -> None:
    conn, _ = handshake(vault)
    configure(conn, "secretive", secret_config())
    configure(conn, "secretive", {**secret_config(), "mode": "fail"})
    configure(conn, "secretive", {**secret_config(), "mode": "partial"})
    configure(conn, "secretive", {"endpoint": 5, "api_key": CANARY})
    vault.store.engine.dispose()
    files = [p for p in Path(home.home).rglob("*") if p.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        for encoded in _encodings(CANARY):
            assert encoded not in data, f"canary found in {path.name}"


def test_partial_and_error_statuses(vault: Vault) -> None:
    conn, _ = handshake(vault)
    assert configure(conn, "secretive", secret_config())[0]["status"] == "ok"
    partial = configure(conn, "secretive", {**secret_config(), "mode": "partial"})[0]
    assert partial["status"] == "partial" and partial["message"] == "tools unavailable: upload"
    failed = configure(conn, "secretive", {**secret_config(), "mode": "fail"})
    assert failed[0]["status"] == "error"
    assert failed[0]["message"] == "toolkit initialization failed (RuntimeError)"
    assert CANARY not in json.dumps(failed)
    assert listed(conn)["secretive"] is True  # the previous version stays current
    rows = versions(vault)
    assert [r.status for r in rows] == ["ok", "partial", "error"]
    assert rows[2].sealed_secrets is None and rows[2].wrapped_dek is None
    with vault.store.engine.connect() as db:
        current = db.execute(select(CurrentConfig.version)).scalar_one()
        actions = db.execute(select(AuditEvent.action).order_by(AuditEvent.seq)).scalars().all()
    assert current == 2
    assert actions.count("configure") == 3


def test_first_configure_failing_leaves_toolkit_unconfigured(vault: Vault) -> None:
    conn, _ = handshake(vault)
    out = configure(conn, "secretive", {**secret_config(), "mode": "fail"})
    assert out[0]["status"] == "error" and out[1]["configured"] is False
    assert listed(conn)["secretive"] is False


@pytest.mark.parametrize(
    ("toolkit", "config", "details"),
    [
        ("nope", {"root_dir": "/tmp"}, []),
        ("filesystem", {}, [{"pointer": "/root_dir", "keyword": "required"}]),
        (
            "secretive",
            {"endpoint": "x", "api_key": 42},
            [{"pointer": "/api_key", "keyword": "type"}],
        ),
    ],
)
def test_refused_configure_stores_nothing(
    vault: Vault, toolkit: str, config: dict[str, Any], details: list[dict[str, str]]
) -> None:
    conn, _ = handshake(vault)
    (error,) = configure(conn, toolkit, config)
    assert error["type"] == "error" and error["code"] == "RUNTIME_ERROR"
    assert error["details"] == details
    assert versions(vault) == []
    assert listed(conn) == {"filesystem": False, "secretive": False}


def test_invalid_config_error_never_echoes_the_value(vault: Vault) -> None:
    conn, _ = handshake(vault)
    (error,) = configure(conn, "secretive", {"endpoint": "x", "api_key": CANARY, "extra": CANARY})
    assert error["code"] == "RUNTIME_ERROR"
    assert CANARY not in json.dumps(error)


def test_capability_gating_and_sessions(vault: Vault) -> None:
    conn = connect(vault, AGENT)
    (early,) = request(conn, {"type": "toolkit/list/req", "id": "r1"})
    assert (early["code"], early["req_id"]) == ("CAPABILITY_NOT_NEGOTIATED", "r1")
    (none,) = request(conn, {"type": "handshake/req", "capabilities": ["mcp"]})
    assert none["code"] == "CAPABILITY_NOT_NEGOTIATED"
    (unknown,) = request(
        conn, {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": "s1"}
    )
    assert unknown["code"] == "RUNTIME_ERROR" and unknown["message"] == "unknown session"
    _, session = handshake(vault)
    other = connect(vault, Principal("someone-else", "agent"))
    (foreign,) = request(
        other, {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session}
    )
    assert foreign == {**foreign, "code": "RUNTIME_ERROR", "message": "unknown session"}
    conn2, _ = handshake(vault)
    (wrong,) = request(
        conn2,
        {
            "type": "toolkit/configure/req",
            "session_id": session,
            "toolkit_name": "filesystem",
            "config": {"root_dir": "/tmp"},
        },
    )
    assert wrong["code"] == "RUNTIME_ERROR" and wrong["message"] == "unknown session"


def test_resume_reinitializes_from_the_store(vault: Vault, home: VaultSettings) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    SecretiveToolkit.received.clear()
    restarted = open_vault(home)  # a new process would do exactly this
    fresh, _ = handshake(restarted)
    assert listed(fresh)["secretive"] is False  # another session
    resumed, same = handshake(restarted, session)
    assert same == session
    assert SecretiveToolkit.received == [secret_config()]
    assert listed(resumed)["secretive"] is True
    restarted.store.engine.dispose()


def test_resume_with_undecryptable_config_still_opens(vault: Vault, home: VaultSettings) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    with vault.store.engine.begin() as db:
        row = db.execute(
            select(ConfigVersion).where(ConfigVersion.toolkit_name == "secretive")
        ).one()
        tampered = bytearray(row.wrapped_dek)
        tampered[-1] ^= 1
        db.execute(
            update(ConfigVersion)
            .where(ConfigVersion.id == row.id)
            .values(wrapped_dek=bytes(tampered))
        )
    restarted = open_vault(home)
    resumed = connect(restarted, AGENT)
    out = request(
        resumed, {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session}
    )
    assert out[0]["type"] == "handshake/resp"
    assert out[1]["type"] == "toolkit/status/event"
    assert (out[1]["toolkit_name"], out[1]["configured"]) == ("secretive", False)
    assert out[1]["message"] == "stored config failed its integrity check"
    assert listed(resumed) == {"filesystem": True, "secretive": False}
    restarted.store.engine.dispose()


def _swap(
    vault: Vault,
    column: str,
    source_id: int,
    target_id: int,
    pointer_map: dict[str, str] | None = None,
) -> None:
    with vault.store.engine.begin() as db:
        source = db.execute(select(ConfigVersion).where(ConfigVersion.id == source_id)).one()
        value = getattr(source, column)
        if pointer_map:
            sealed = json.loads(value)
            target = json.loads(
                db.execute(
                    select(ConfigVersion.sealed_secrets).where(ConfigVersion.id == target_id)
                ).scalar_one()
            )
            for src, dst in pointer_map.items():
                target[dst] = sealed[src]
            value = json.dumps(target)
        db.execute(
            update(ConfigVersion).where(ConfigVersion.id == target_id).values({column: value})
        )


def _resume_status(home: VaultSettings, session: str) -> dict[str, bool]:
    restarted = open_vault(home)
    try:
        conn, _ = handshake(restarted, session)
        return listed(conn)
    finally:
        restarted.store.engine.dispose()


@pytest.mark.parametrize("move", ["session", "version", "field", "wrapped_dek"])
def test_moved_ciphertext_never_decrypts(vault: Vault, home: VaultSettings, move: str) -> None:
    SecretiveToolkit.received.clear()
    conn_a, session_a = handshake(vault)
    conn_b, session_b = handshake(vault)
    configure(conn_a, "secretive", secret_config("victim-secret"))
    configure(conn_b, "secretive", secret_config("attacker-secret"))
    configure(conn_b, "secretive", secret_config("attacker-secret-2"))
    rows = {(r.session_id, r.version): r.id for r in versions(vault)}
    victim, attacker, attacker_v2 = rows[(session_a, 1)], rows[(session_b, 1)], rows[(session_b, 2)]
    if move == "session":
        _swap(vault, "sealed_secrets", victim, attacker_v2)
        _swap(vault, "wrapped_dek", victim, attacker_v2)
        _swap(vault, "dek_id", victim, attacker_v2)
    elif move == "version":
        _swap(vault, "sealed_secrets", attacker, attacker_v2)
        _swap(vault, "wrapped_dek", attacker, attacker_v2)
        _swap(vault, "dek_id", attacker, attacker_v2)
    elif move == "field":
        _swap(vault, "sealed_secrets", attacker_v2, attacker_v2, {"/auth/password": "/api_key"})
    else:
        _swap(vault, "wrapped_dek", attacker, attacker_v2)
    SecretiveToolkit.received.clear()
    status = _resume_status(home, session_b)
    assert status["secretive"] is False
    assert SecretiveToolkit.received == []  # never initialized with anyone's value


def test_status_event_reaches_other_connections_of_the_session(vault: Vault) -> None:
    pushed: list[Message] = []
    conn, session = handshake(vault)
    watcher = connect(vault, AGENT, pushed.append)
    request(watcher, {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session})
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    assert [(e.type, getattr(e, "configured", None)) for e in pushed] == [
        ("toolkit/status/event", True)
    ]
    watcher.close()
    configure(conn, "filesystem", {"root_dir": "/srv"})
    assert len(pushed) == 1


def _settle(reply: Reply) -> list[dict[str, Any]]:
    for write in reply.writes:
        done = threading.Event()
        write.when_settled(done.set)
        assert done.wait(10), "the write was never settled"
    return [json.loads(line) for line in reply.lines()]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_configure_left_committing_is_answered_once_it_is_stored_and_live(
    vault: Vault,
) -> None:
    """`A2EConnection.start` (a server's transports, in a worker thread) returns while the
    configure's write still waits for SQLite's writer; the toolkit is live, and its answer
    and status event said, only once it is stored."""
    conn, session = handshake(vault)
    other, _ = handshake(vault, session)  # a connection answers one message at a time
    message = {"type": "toolkit/configure/req", "toolkit_name": "filesystem"}
    with vault.store.write():  # nothing commits while this is held
        reply = conn.start(read_request(json.dumps(message | {"config": {"root_dir": "/tmp"}})))
        assert [w.settled for w in reply.writes] == [False]
        assert listed(other)["filesystem"] is False and versions(vault) == []
    answer, event = _settle(reply)
    assert answer["status"] == "ok" and event["configured"] is True
    assert listed(other)["filesystem"] is True and len(versions(vault)) == 1


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_configure_whose_write_fails_after_it_left_is_answered_with_the_error(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write of a configure left committing is refused (the database stays locked past
    the busy timeout): the answer is that error, no event says configured, nothing is live
    and nothing is stored."""
    monkeypatch.setattr(transactions, "BUSY_TIMEOUT_MS", 200)
    conn, _ = handshake(vault)
    message = {"type": "toolkit/configure/req", "toolkit_name": "filesystem"}
    with vault.store.write():  # past the busy timeout
        reply = conn.start(read_request(json.dumps(message | {"config": {"root_dir": "/tmp"}})))
        answer = _settle(reply)
    assert [(m["type"], m.get("code")) for m in answer] == [("error", "RUNTIME_ERROR")]
    assert answer[0]["message"] == "the database refused the write (busy)"
    assert listed(conn)["filesystem"] is False and versions(vault) == []


def quiet(vault: Vault, still: float = 0.5) -> None:
    """Until this process commits nothing for `still` seconds: a configure's answer may come
    before the last of its commits (an instance's), whose witness head would otherwise be
    written after a test deleted the witness, or counted among what the test measures."""
    assert vault.store.witness is not None
    last = vault.store.witness.newest
    while True:
        time.sleep(still)
        head = vault.store.witness.newest
        if head == last:
            return
        last = head
