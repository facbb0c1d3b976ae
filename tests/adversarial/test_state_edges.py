"""Issue 48, item 7 (the vault's own state): the witness file refuses a symlink and says a
damaged slot aloud; a configure whose token ends while it runs stores nothing; a config
cannot carry the vault's own reserved keys; key-less commands say when the database is
behind its witness. On SQLite and PostgreSQL where a database is involved."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import delete, select, update
from starlette.testclient import TestClient
from test_authenticated_state import cli, reopen, row_of
from test_replays import settle

from test_vault import AGENT, CANARY, configure, handshake, request
from toolkit_vault.access.principals import authenticate, create_token, revoke
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.core.connection import connect
from toolkit_vault.core.expiry import EXPIRES_KEY
from toolkit_vault.core.intake import Intake
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import ConfigInvalid, StoreError, VaultError
from toolkit_vault.keys.providers.file import KEY_FILE_NAME
from toolkit_vault.oauth.tokens import TOKEN_SET_KEY
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent, AuditHead, ConfigVersion, PrincipalRow
from toolkit_vault.store.witness import WITNESS_NAME, Witness
from toolkit_vault.toolkits.registry import SourceKind, ToolkitSource
from toolkit_vault.transports.http_api import create_app

pytestmark = pytest.mark.key_providers("file")
SOURCE = ToolkitSource(SourceKind.ENTRY_POINT, "state-edges-test")
HEAD = (7, b"m" * 32, b"h" * 32)
KEY = {"type": "string", "x-secret": True}


# -- (a) the witness is a private regular file, never followed through a symlink --------------


def test_a_symlinked_witness_is_refused_and_never_written_through(
    vault: Vault, fresh: list[Vault], home: VaultSettings
) -> None:
    """The witness pointed at the key file: no process believes it, and the suggested
    `accept-restore` refuses too instead of writing the witness over the key file."""
    handshake(vault)
    settle(vault)
    witness, keys = home.home / WITNESS_NAME, home.home / KEY_FILE_NAME
    before = keys.read_bytes()
    witness.unlink()
    witness.symlink_to(keys)
    with pytest.raises(VaultError, match="is a symlink"):
        reopen(fresh)
    code, _, err = cli("audit", "accept-restore", "--yes")
    assert code != 0 and "is a symlink" in err
    assert keys.read_bytes() == before


@pytest.mark.parametrize(
    "how", ["symlink", "dangling symlink", "mode 0644", "directory", "another owner"]
)
def test_a_witness_that_is_not_a_private_file_is_neither_read_nor_written(
    tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, target = tmp_path / WITNESS_NAME, tmp_path / "elsewhere"
    Witness(target).put(HEAD)
    taken = target.read_bytes()
    if how == "symlink":
        path.symlink_to(target)
    elif how == "dangling symlink":
        target.unlink()
        path.symlink_to(target)
    elif how == "mode 0644":
        Witness(path).put(HEAD)
        path.chmod(0o644)
    elif how == "another owner":  # as this process sees it: chown needs root
        Witness(path).put(HEAD)
        monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 1)
    else:
        path.mkdir()
    why = {"symlink": "is a symlink", "dangling symlink": "is a symlink"}
    why |= {"directory": "is not a regular file", "another owner": "not owned by the current user"}
    with pytest.raises(StoreError, match=why.get(how, "0600")):
        Witness(path).read()
    with pytest.raises(StoreError, match=why.get(how, "0600")):
        Witness(path).put((8, b"n" * 32, b"i" * 32))
    if how == "symlink":
        assert target.read_bytes() == taken
    if how == "dangling symlink":
        assert not target.exists()


# -- (b) one damaged slot is said aloud ---------------------------------------------------------


@pytest.mark.parametrize("damage", ["mac", "torn"])
def test_a_damaged_witness_slot_is_said_aloud(
    vault: Vault,
    fresh: list[Vault],
    home: VaultSettings,
    damage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With its newer slot damaged the witness falls back to the older one, so a database
    one step behind would pass: the log, `audit verify` and the health route say so."""
    handshake(vault)
    handshake(vault)
    settle(vault)
    code, verified, _ = cli("audit", "verify")
    assert code == 0 and verified["witness_warning"] is None
    path = home.home / WITNESS_NAME
    data = bytearray(path.read_bytes())
    slot = 0 if int(data[:16], 16) > int(data[160:176], 16) else 160  # the newer slot
    if damage == "mac":
        last = slot + 145  # the head MAC's last hex digit
        data[last : last + 1] = b"0" if data[last : last + 1] != b"0" else b"1"
    else:
        data[slot + 40 : slot + 160] = b"\0" * 120
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        opened = reopen(fresh)  # believed: the chain is past the older head
    said = [r for r in caplog.records if r.levelno == logging.WARNING and "slot" in r.message]
    assert said, caplog.text
    code, verified, err = cli("audit", "verify")
    assert code == 0, err
    assert "damaged slot" in verified["witness_warning"]
    assert "damaged slot" in err
    with TestClient(create_app(opened, open_provider(home))) as client:
        health = client.get("/healthz").json()
    assert health["status"] == "degraded" and health["warnings"] == ["witness_damaged"]


def test_a_sound_witness_leaves_health_ok(vault: Vault, home: VaultSettings) -> None:
    handshake(vault)
    settle(vault)
    with TestClient(create_app(vault, open_provider(home))) as client:
        health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["warnings"] == []


# -- (c) a configure re-checks its principal in the write ---------------------------------------


class Blocking:
    """Initializes only when the test lets it: meanwhile the test ends the token."""

    started: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()
    definition: ClassVar[dict[str, Any]] = {
        "name": "blocking",
        "description": "initializes when released",
        "schema": {
            "type": "object",
            "properties": {"api_key": {"type": "string", "x-secret": True}},
        },
        "tools": ["call"],
    }

    def initialize(self, config: dict[str, Any]) -> None:
        Blocking.started.set()
        assert Blocking.release.wait(10)


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_a_configure_whose_token_ends_meanwhile_stores_nothing(vault: Vault, how: str) -> None:
    vault.registry.register(Blocking, SOURCE)
    Blocking.started.clear()
    Blocking.release.clear()
    _, token = create_token(vault.store, "agent", "bob", ttl=None if how == "revoked" else 2)
    principal = authenticate(vault.store, token)
    assert principal is not None
    conn = connect(vault, principal)
    assert request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})[0]["session_id"]
    answers: list[list[dict[str, Any]]] = []
    asking = threading.Thread(
        target=lambda: answers.append(configure(conn, "blocking", {"api_key": CANARY}))
    )
    asking.start()
    try:
        assert Blocking.started.wait(10)
        if how == "revoked":
            revoke(vault.store, "bob")
        else:
            assert principal.expires_at is not None
            time.sleep(max(0.0, principal.expires_at - time.time()) + 0.1)
    finally:
        Blocking.release.set()
        asking.join(10)
    (answer, *_) = answers[0]
    assert answer["type"] == "error" and answer["code"] == "UNAUTHORIZED", answer
    assert CANARY not in json.dumps(answers)
    with vault.store.engine.connect() as db:
        stored = db.execute(select(ConfigVersion).where(ConfigVersion.toolkit_name == "blocking"))
        assert stored.all() == []
        refused = db.execute(
            select(AuditEvent).where(
                AuditEvent.action == "configure_refused", AuditEvent.toolkit_name == "blocking"
            )
        ).all()
    assert len(refused) == 1 and json.loads(refused[0].details)["token"] == how


def test_a_revoked_principal_s_configures_in_a_group_store_nothing(vault: Vault) -> None:
    """Configures of a revoked principal and of another, at once: grouped in one transaction
    (on PostgreSQL pipelined), each refusal writes its event there, the others are stored,
    and the chain still verifies."""
    _, token = create_token(vault.store, "agent", "eve")
    eve = authenticate(vault.store, token)
    assert eve is not None
    conns = []
    for n in range(8):
        conn = connect(vault, eve if n % 2 else AGENT)
        request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
        conns.append((n % 2 == 1, conn))
    revoke(vault.store, "eve")
    answers: list[tuple[bool, dict[str, Any]]] = []

    def configures(revoked: bool, conn: Any) -> None:
        for _ in range(3):
            answers.append((revoked, configure(conn, "filesystem", {"root_dir": "/tmp"})[0]))

    threads = [threading.Thread(target=configures, args=pair) for pair in conns]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 24
    for revoked, answer in answers:
        assert answer.get("code" if revoked else "status") == (
            "UNAUTHORIZED" if revoked else "ok"
        ), answer
    assert vault.verify_audit().ok


# -- (d) the vault's own keys are never taken from a submitted config ----------------------------


class Open:
    """A schema that admits any other property (secret, as every undeclared one)."""

    definition: ClassVar[dict[str, Any]] = {
        "name": "open",
        "description": "admits undeclared properties",
        "schema": {
            "type": "object",
            "properties": {"api_key": {"type": "string", "x-secret": True}},
        },
        "tools": ["call"],
    }

    def initialize(self, config: dict[str, Any]) -> None:
        return None


@pytest.mark.parametrize("key", [EXPIRES_KEY, TOKEN_SET_KEY])
def test_a_config_carrying_a_reserved_key_is_refused(vault: Vault, key: str) -> None:
    vault.registry.register(Open, SOURCE)
    conn, _ = handshake(vault)
    (answer,) = configure(conn, "open", {"api_key": CANARY, key: 1})
    assert answer["type"] == "error" and answer["code"] == "RUNTIME_ERROR", answer
    assert {"pointer": "/" + key, "keyword": "x-reserved"} in [
        {k: d.get(k) for k in ("pointer", "keyword")} for d in answer["details"]
    ]
    assert CANARY not in json.dumps(answer)
    with vault.store.engine.connect() as db:
        assert db.execute(select(ConfigVersion)).all() == []
    assert configure(conn, "open", {"api_key": CANARY, "x-other": 1})[0]["status"] == "ok"


def test_an_intake_form_carrying_a_reserved_key_is_refused(vault: Vault) -> None:
    """A person's form is a config too: the link stays good, nothing is stored."""
    vault.registry.register(Open, SOURCE)
    vault.intake = Intake(vault, SecretBytes(b"k" * 32), lambda link: f"https://vault.test/{link}")
    conn, _ = handshake(vault)
    ask = {"type": "toolkit/configure/req", "toolkit_name": "open", "config": {}, "intake": True}
    link = request(conn, ask)[0]["intake_url"].removeprefix("https://vault.test/")
    with pytest.raises(ConfigInvalid) as refused:
        vault.intake.complete(link, {"api_key": CANARY, EXPIRES_KEY: 1})
    assert refused.value.details == [{"pointer": "/" + EXPIRES_KEY, "keyword": "x-reserved"}]
    assert vault.intake.complete(link, {"api_key": CANARY}).status == "ok"


# -- (e) key-less commands say when the database is behind its witness --------------------------


def test_key_less_commands_say_the_database_is_behind_its_witness(vault: Vault) -> None:
    """A revocation undone with three rows: `tokens list` and `history` cannot verify the
    chain without the key, but they can see the database end before the witness."""
    conn, _ = handshake(vault)
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    create_token(vault.store, "agent", "mallory")
    for command in (("tokens", "list"), ("history",)):
        code, shown, err = cli(*command)
        assert code == 0 and shown["witness_warning"] is None and "witness" not in err
    principal = row_of(vault, PrincipalRow, PrincipalRow.name == "mallory")
    head = row_of(vault, AuditHead, AuditHead.id == 1)
    revoke(vault.store, "mallory")
    settle(vault)
    with vault.store.engine.begin() as db:
        db.execute(delete(AuditEvent).where(AuditEvent.action == "token_revoked"))
        db.execute(update(AuditHead).values(seq=head.seq, mac=head.mac, head_mac=head.head_mac))
        db.execute(
            update(PrincipalRow)
            .where(PrincipalRow.name == "mallory")
            .values(revoked_at=None, mac=principal.mac)
        )
    for command in (("tokens", "list"), ("history",)):
        code, shown, err = cli(*command)
        assert code == 0, err
        assert "behind its witness" in shown["witness_warning"], shown
        assert "behind its witness" in err
    done = cli("tokens", "list")[1]
    assert [p for p in done["principals"] if p["name"] == "mallory"]  # still listed, but said


def test_key_less_commands_say_another_event_at_the_witnessed_head(vault: Vault) -> None:
    """Not behind, but not the chain the home saw either (another database, or an older copy
    written over since): the stored link at the witnessed seq differs."""
    handshake(vault)
    settle(vault)
    head = row_of(vault, AuditHead, AuditHead.id == 1)
    with vault.store.engine.begin() as db:
        db.execute(update(AuditEvent).where(AuditEvent.seq == head.seq).values(mac=b"x" * 32))
    code, shown, err = cli("history")
    assert code == 0 and "another audit event" in shown["witness_warning"], shown
    assert "another audit event" in err
