"""Recovery shares (issue 40), on SQLite and PostgreSQL: the drill (an AWS KMS master key
scheduled for deletion and gone; 3 of 5 shares re-establish the vault under a new master
key in the file provider; every secret opens, `check` and `audit verify` pass), and what
fewer or wrong shares get (nothing, the wrong share named)."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from provider_support import MotoServer
from sqlalchemy import create_engine, delete, insert, select

from cli_support import run_cli
from toolkit_vault.access.principals import Principal
from toolkit_vault.bootstrap import init_vault, open_vault
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.keys.recovery import RecoveryError, combine_shares, open_with_shares
from toolkit_vault.settings import load_settings
from toolkit_vault.store.models import AuditEvent, InternalKey, RecoveryKey, VaultKey

AGENT = Principal("local", "agent")
CANARY = "tkv-canary-recovery-91c4"
PLUGINS = Path(__file__).parent / "plugins"
INIT_5_OF_3 = ("keys", "recovery", "init", "--shares", "5", "--threshold", "3", "--json")


def request(conn: A2EConnection, message: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in conn.handle_raw(json.dumps(message))]


@pytest.fixture(scope="module")
def _module_kms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto server for this module's tests alone (not the session's `moto_endpoint`, whose
    keys other modules' tests hold): started once, not once a test."""
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def kms(aws_env: None, _module_kms: str) -> str:
    """A moto KMS of this test's own: the drill deletes its keys for good (a reset, which
    takes every key of the server), so each test begins on an empty one."""
    _reset(_module_kms)
    return _module_kms


def _reset(kms: str) -> None:
    reset = urllib.request.Request(f"{kms}/moto-api/reset", method="POST")  # noqa: S310
    with urllib.request.urlopen(reset, timeout=10):  # noqa: S310 (this module's own moto)
        pass


@pytest.fixture
def kms_vault(
    kms: str, tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """A vault whose master key is in AWS KMS (moto), with three configs; yields the
    environment of its operator's commands."""
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", database_url)
    monkeypatch.delenv("TOOLKIT_VAULT_KEY_PROVIDER", raising=False)
    init_vault(load_settings("aws-kms", {"endpoint_url": kms}))
    vault = open_vault(load_settings())
    try:
        for n in range(3):
            conn = connect(vault, AGENT)
            request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
            config = {
                "endpoint": "https://api.example.test",
                "api_key": f"{CANARY}-{n}",
                "auth": {"user": "alice", "password": f"{CANARY}-pw"},
            }
            reply = request(
                conn,
                {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config},
            )
            assert reply[0]["status"] == "ok", reply
    finally:
        vault.store.engine.dispose()
    env = {k: v for k, v in os.environ.items()}
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")])
    yield env


def lose_the_master_key(kms: str) -> None:
    """Schedule the KMS key's deletion (the operator's mistake), then let it be gone."""
    client = boto3.client("kms", endpoint_url=kms)
    for key in client.list_keys()["Keys"]:
        client.schedule_key_deletion(KeyId=key["KeyId"], PendingWindowInDays=7)
    _reset(kms)
    assert client.list_keys()["Keys"] == []


def wraps(url: str) -> dict[str, bytes]:
    engine = create_engine(url)
    try:
        with engine.connect() as db:
            return {
                k: bytes(w) for k, w in db.execute(select(VaultKey.key_id, VaultKey.wrapped_key))
            }
    finally:
        engine.dispose()


def events(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as db:
            return [a for (a,) in db.execute(select(AuditEvent.action).order_by(AuditEvent.seq))]
    finally:
        engine.dispose()


def echoes(share: str, text: str) -> bool:
    """Whether `text` holds any three words of `share` in a row. (One word alone proves
    nothing: SLIP-39's are common English words an error message may use too.)"""
    words, said = share.split(), " ".join(text.split())
    return any(" ".join(words[i : i + 3]) in said for i in range(len(words) - 2))


def test_the_drill_kms_key_gone_three_of_five_shares_restore_everything(
    kms: str, kms_vault: dict[str, str], database_url: str
) -> None:
    env = kms_vault
    made = run_cli(INIT_5_OF_3, env)
    assert made.returncode == 0, made.stderr
    shares = json.loads(made.stdout)["shares"]
    assert len(shares) == 5 and all(len(s.split()) == 33 for s in shares)
    assert events(database_url)[-1] == "recovery_initialized"
    assert not any(s in events(database_url)[-1] for s in shares)

    lose_the_master_key(kms)
    with pytest.raises(VaultError):
        open_vault(load_settings())  # the vault is sealed: its master key is gone
    before = wraps(database_url)

    two = run_cli(
        ("keys", "recovery", "unseal", "--key-provider", "file"),
        env,
        input="\n".join(shares[:2]) + "\n",
    )
    assert two.returncode == 1
    assert "nothing was recovered" in two.stderr
    assert not echoes(shares[0], two.stderr)
    assert wraps(database_url) == before  # 2 of 5 changed nothing
    assert events(database_url)[-1] == "recovery_initialized"

    done = run_cli(
        ("keys", "recovery", "unseal", "--key-provider", "file", "--json"),
        env,
        input="\n".join([shares[0], shares[2], shares[4]]) + "\n",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["provider"] == "file" and result["created_master_key"] is True
    assert events(database_url)[-1] == "recovery_unsealed"
    assert load_settings().key_provider == "file"

    checked = run_cli(("check", "--json"), env)
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert (report["versions"], report["intact"], report["failed"]) == (3, 3, 0)
    assert run_cli(("audit", "verify"), env).returncode == 0
    vault: Vault = open_vault(load_settings())
    try:
        assert vault.check()["ok"]
    finally:
        vault.store.engine.dispose()
    for output in (made.stderr, two.stdout, done.stdout, done.stderr, checked.stdout):
        assert CANARY not in output


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_wrong_share_is_named_and_fewer_than_k_recover_nothing(
    kms_vault: dict[str, str],
) -> None:
    made = run_cli(
        ("keys", "recovery", "init", "--shares", "5", "--threshold", "3", "--json"), kms_vault
    )
    shares = json.loads(made.stdout)["shares"]
    words = shares[1].split()
    words[10] = "academic" if words[10] != "academic" else "acid"
    mistyped = " ".join(words)
    with pytest.raises(RecoveryError, match="share 2 is not a valid share") as caught:
        combine_shares([shares[0], mistyped, shares[2]])
    assert mistyped not in str(caught.value) and words[10] not in str(caught.value).split()
    with pytest.raises(RecoveryError, match="needs 3: nothing was recovered"):
        combine_shares(shares[:2])
    with pytest.raises(RecoveryError, match="share 3 is share 1 again"):
        combine_shares([shares[0], shares[1], shares[0]])
    other = run_cli(
        ("keys", "recovery", "init", "--shares", "3", "--threshold", "2", "--json"), kms_vault
    )
    foreign = json.loads(other.stdout)["shares"]
    with pytest.raises(RecoveryError, match="share 2 belongs to another share set"):
        combine_shares([shares[0], foreign[0], shares[2]])
    # The first set was replaced: its shares combine, but no longer open the vault.
    refused = run_cli(
        ("keys", "recovery", "unseal", "--key-provider", "file"),
        kms_vault,
        input="\n".join(shares[:3]) + "\n",
    )
    assert refused.returncode == 1 and "do not open this vault" in refused.stderr
    status = run_cli(("keys", "recovery", "status", "--json"), kms_vault)
    assert json.loads(status.stdout)["covered"] == ["vk-1"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_shares_keep_covering_the_vault_across_vault_key_rotations(
    kms_vault: dict[str, str], kms: str
) -> None:
    shares = json.loads(run_cli(INIT_5_OF_3, kms_vault).stdout)["shares"]
    rotated = run_cli(("keys", "rotate", "--vault-key", "--json"), kms_vault)
    assert rotated.returncode == 0, rotated.stderr
    retired = run_cli(("keys", "retire", "vk-1"), kms_vault)
    assert retired.returncode == 0, retired.stderr
    status = json.loads(run_cli(("keys", "recovery", "status", "--json"), kms_vault).stdout)
    assert (status["covered"], status["uncovered"]) == (["vk-2"], [])  # vk-1's wrap is gone
    lose_the_master_key(kms)
    done = run_cli(
        ("keys", "recovery", "unseal", "--key-provider", "file", "--json"),
        kms_vault,
        input="\n".join(shares[2:]) + "\n",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["vault_keys"] == ["vk-2"]
    checked = json.loads(run_cli(("check", "--json"), kms_vault).stdout)
    assert (checked["versions"], checked["intact"], checked["ok"]) == (3, 3, True)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_backup_restores_with_shares_when_the_master_key_and_the_database_are_gone(
    kms_vault: dict[str, str], kms: str, tmp_path: Path
) -> None:
    shares = json.loads(run_cli(INIT_5_OF_3, kms_vault).stdout)["shares"]
    backup = tmp_path / "vault.tkvb"
    assert run_cli(("backup", "create", str(backup)), kms_vault).returncode == 0
    lose_the_master_key(kms)
    new = {
        **kms_vault,
        "TOOLKIT_VAULT_HOME": str(tmp_path / "new-home"),
        "TOOLKIT_VAULT_DATABASE_URL": f"sqlite:///{tmp_path / 'new-home' / 'vault.db'}",
    }
    two = "\n".join(shares[1:3]) + "\n"
    refused = run_cli(("backup", "verify", str(backup), "--with-shares"), new, input=two)
    assert refused.returncode == 1 and "nothing was recovered" in refused.stderr
    three = "\n".join(shares[1:4]) + "\n"
    verified = run_cli(
        ("backup", "verify", str(backup), "--with-shares", "--json"), new, input=three
    )
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["versions"]["intact"] == 3
    done = run_cli(
        ("restore", str(backup), "--yes", "--with-shares", "--key-provider", "file", "--json"),
        new,
        input=three,
    )
    assert done.returncode == 0, done.stderr
    checked = json.loads(run_cli(("check", "--json"), new).stdout)
    assert (checked["versions"], checked["intact"], checked["ok"]) == (3, 3, True)
    trail = run_cli(("audit", "verify", "--json"), new)
    assert trail.returncode == 0, trail.stderr
    assert events(f"sqlite:///{tmp_path / 'new-home' / 'vault.db'}")[-2:] == [
        "recovery_unsealed",
        "backup_restored",
    ]


# -- issue 48: recovery wraps are state like any other: authenticated (the wrap opens under
# the recovery key), current per the chain, checked by `check`, `audit verify` and `status` --


def _recovery_rows(vault: Vault) -> list[dict[str, Any]]:
    with vault.store.engine.connect() as db:
        return [dict(r._mapping) for r in db.execute(select(RecoveryKey))]


def _held_recovery_key(vault: Vault) -> dict[str, Any]:
    with vault.store.engine.connect() as db:
        row = db.execute(select(InternalKey).where(InternalKey.name == "recovery")).one()
    return dict(row._mapping)


def _put_rows(vault: Vault, rows: list[dict[str, Any]], held: dict[str, Any] | None = None) -> None:
    with vault.store.engine.begin() as db:
        db.execute(delete(RecoveryKey))
        if rows:
            db.execute(insert(RecoveryKey), rows)
        if held is not None:
            db.execute(delete(InternalKey).where(InternalKey.name == "recovery"))
            db.execute(insert(InternalKey).values(**held))


def _reported(vault: Vault, env: dict[str, str], problem: str) -> dict[str, Any]:
    """`check`, `audit verify` and `keys recovery status` all name the recovery row."""
    checked = vault.check()
    assert not checked["ok"]
    assert any(
        p["table"] == "recovery_keys" and p["problem"] == problem for p in checked["state_problems"]
    ), checked["state_problems"]
    assert not vault.verify_audit().ok
    assert run_cli(("check",), env).returncode == 1
    audited = run_cli(("audit", "verify"), env)
    assert audited.returncode == 1 and "recovery_keys" in audited.stdout + audited.stderr
    status = run_cli(("keys", "recovery", "status", "--json"), env)
    assert status.returncode == 1, status.stdout
    found = json.loads(status.stdout)
    assert any(p["problem"] == problem for p in found["problems"]), found
    return found


@pytest.mark.key_providers("file")
def test_a_flipped_byte_in_a_recovery_wrap_is_reported_before_a_disaster(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    made = run_cli(INIT_5_OF_3, cli_env)
    assert made.returncode == 0, made.stderr
    shares = json.loads(made.stdout)["shares"]
    clean = run_cli(("keys", "recovery", "status", "--json"), cli_env)
    assert clean.returncode == 0 and json.loads(clean.stdout)["problems"] == []
    assert vault.check()["ok"]  # opened before the shares were made: it reads them fresh
    (row,) = _recovery_rows(vault)
    wrapped = bytearray(row["wrapped_key"])
    wrapped[len(wrapped) // 2] ^= 1
    _put_rows(vault, [{**row, "wrapped_key": bytes(wrapped)}])
    _reported(vault, cli_env, "unauthenticated")
    with pytest.raises(RecoveryError):
        open_with_shares(vault.store, shares[:3])


@pytest.mark.key_providers("file")
def test_a_deleted_recovery_wrap_is_reported_and_status_warns_of_the_uncovered_key(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    assert run_cli(INIT_5_OF_3, cli_env).returncode == 0
    _put_rows(vault, [])
    found = _reported(vault, cli_env, "deleted")
    assert found["uncovered"] == ["vk-1"]
    text = run_cli(("keys", "recovery", "status"), cli_env)
    assert "warning" in text.stderr and "vk-1" in text.stderr, text.stderr


@pytest.mark.key_providers("file")
def test_a_replaced_share_sets_rows_put_back_are_refused_and_its_shares_do_not_unseal(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    old = json.loads(run_cli(INIT_5_OF_3, cli_env).stdout)["shares"]
    old_rows, old_held = _recovery_rows(vault), _held_recovery_key(vault)
    new = run_cli(INIT_5_OF_3, cli_env)
    assert new.returncode == 0, new.stderr
    _put_rows(vault, old_rows, old_held)  # the old set's rows, and its key, put back
    _reported(vault, cli_env, "replayed")
    with pytest.raises(RecoveryError, match="share set"):
        open_with_shares(vault.store, old[:3])
    refused = run_cli(
        ("keys", "recovery", "unseal", "--key-provider", "file"),
        cli_env,
        input="\n".join(old[2:]) + "\n",
    )
    assert refused.returncode == 1 and "share set" in refused.stderr, refused.stderr
    assert not echoes(old[2], refused.stderr)
