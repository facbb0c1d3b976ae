"""Moving the master key (`keys move`, issue 54): file to AWS KMS (moto's server), one KMS
key to another, file to PKCS#11 (SoftHSM2); a target that is missing, disabled or
unreachable refused with nothing changed; a move killed at each of its steps leaves a
vault that opens and is finished by a rerun; a running `serve` keeps answering through the
move and follows it; and `keys recovery unseal` onto a new KMS key once the old one is
disabled and scheduled for deletion."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from sqlalchemy import select

from cli_support import CLI, run_cli
from test_http import running_server
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.bootstrap import home_providers, init_vault, open_provider, open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes, new_key
from toolkit_vault.errors import KeyProviderError, VaultError
from toolkit_vault.keys import move
from toolkit_vault.keys.providers import ProviderSettings, blob_header
from toolkit_vault.keys.providers.file import FileProvider
from toolkit_vault.keys.rotation import rotate_vault_key
from toolkit_vault.settings import load_settings, target_settings, write_record
from toolkit_vault.store.models import AuditEvent, ConfigVersion, VaultKey

AGENT = Principal("local", "agent")
CANARY = "tkv-canary-key-move-5e2a"
FILE_HOME = pytest.mark.key_providers("file")
KMS_HOME = pytest.mark.key_providers("aws-kms")
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


# -- helpers ---------------------------------------------------------------------------------


def configure(vault: Vault, count: int, tag: str = "") -> None:
    conn = connect(vault, AGENT)
    conn.handle_raw(json.dumps({"type": "handshake/req", "capabilities": ["toolkits"]}))
    for n in range(count):
        config = {"endpoint": "https://x.test", "api_key": f"{CANARY}-{tag}{n}"}
        message = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
        reply = [json.loads(line) for line in conn.handle_raw(json.dumps(message))]
        assert reply[0]["status"] == "ok", reply


def run(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env, input=stdin, timeout=300)


def json_of(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def intact(env: dict[str, str], count: int) -> None:
    checked = json_of(run(env, "check", "--full", "--json"))
    assert (checked["versions"], checked["intact"], checked["failed"]) == (count, count, 0)


def wraps(vault: Vault) -> dict[str, bytes]:
    with vault.store.engine.connect() as conn:
        return {k: bytes(w) for k, w in conn.execute(select(VaultKey.key_id, VaultKey.wrapped_key))}


def events(vault: Vault) -> list[tuple[str, dict[str, Any]]]:
    with vault.store.engine.connect() as conn:
        rows = conn.execute(select(AuditEvent.action, AuditEvent.details).order_by(AuditEvent.seq))
        return [(action, json.loads(details) if details else {}) for action, details in rows]


def record(home: Path) -> dict[str, Any]:
    return dict(json.loads((home / "vault.json").read_text()))


def bare(arn: str) -> str:
    """A KMS key's id from its ARN (moto's DisableKey takes no ARN)."""
    return arn.rsplit("/", 1)[1]


def with_aws(env: dict[str, str]) -> dict[str, str]:
    """`cli_env` with this process's AWS configuration (the `aws_env` fixture's)."""
    return {**env, **{k: v for k, v in os.environ.items() if k.startswith("AWS_")}}


@pytest.fixture
def kms(moto_endpoint: str, aws_env: None) -> Any:
    """A boto3 KMS client on the moto server, for making, disabling and deleting keys."""
    return boto3.client("kms", endpoint_url=moto_endpoint)


@pytest.fixture
def kms_env(cli_env: dict[str, str], moto_endpoint: str, aws_env: None) -> dict[str, str]:
    return with_aws(cli_env)


# -- moves that work -------------------------------------------------------------------------


@FILE_HOME
def test_file_to_aws_kms(
    vault: Vault, home: Any, kms_env: dict[str, str], moto_endpoint: str
) -> None:
    configure(vault, 3)
    before = wraps(vault)
    moved = json_of(
        run(
            kms_env,
            "keys",
            "move",
            "--key-provider",
            "aws-kms",
            "--endpoint-url",
            moto_endpoint,
            "--json",
        )
    )
    arn = moved["to"]["master_key"]
    assert moved == {
        "from": {"provider": "file", "master_keys": ["kek-1"]},
        "to": {"provider": "aws-kms", "master_key": arn},
        "vault_keys_moved": ["vk-1"],
        "created_master_key": True,
    }
    assert arn.startswith("arn:aws:kms:")
    pinned = record(home.home)
    assert pinned["key_provider"] == "aws-kms" and "key_move" not in pinned
    assert pinned["key_options"] == {"endpoint_url": moto_endpoint, "key_id": arn}
    after = wraps(vault)
    assert after.keys() == before.keys() and blob_header(after["vk-1"]) == ("aws-kms", arn)
    action, details = events(vault)[-1]
    assert action == "master_key_moved"
    assert details == {
        "from_provider": "file",
        "from_master_keys": ["kek-1"],
        "to_provider": "aws-kms",
        "to_master_key": arn,
        "vault_keys": ["vk-1"],
    }
    # The old master key is no longer needed: its file goes, and the vault still opens.
    (home.home / "master-keys.json").unlink()
    intact(kms_env, 3)
    assert run(kms_env, "audit", "verify").returncode == 0
    said = run(kms_env, "audit", "list")
    assert said.returncode == 0 and "master key moved from file (kek-1) to aws-kms" in said.stdout
    status = json_of(run(kms_env, "keys", "status", "--json"))
    assert status["provider"]["name"] == "aws-kms"
    assert [m["key_id"] for m in status["master_keys"] if m["current"]] == [arn]
    assert CANARY not in said.stdout + json.dumps(moved)


@KMS_HOME
@SQLITE_ONLY
def test_one_kms_key_to_another(vault: Vault, home: Any, cli_env: dict[str, str], kms: Any) -> None:
    env = with_aws(cli_env)
    configure(vault, 2)
    old = record(home.home)["key_options"]["key_id"]
    new = kms.create_key(Description="tkv key B")["KeyMetadata"]["Arn"]
    moved = json_of(
        run(env, "keys", "move", "--key-provider", "aws-kms", "--key-id", new, "--json")
    )
    assert moved["from"] == {"provider": "aws-kms", "master_keys": [old]}
    assert moved["to"]["master_key"] == new and moved["created_master_key"] is False
    assert record(home.home)["key_options"]["key_id"] == new  # the endpoint kept, the key changed
    assert blob_header(wraps(vault)["vk-1"]) == ("aws-kms", new)
    intact(env, 2)  # the provider decrypts only under the configured key: B opens them all
    again = json_of(
        run(env, "keys", "move", "--key-provider", "aws-kms", "--key-id", new, "--json")
    )
    assert again["vault_keys_moved"] == [] and events(vault)[-1][0] == "master_key_moved"
    assert sum(a == "master_key_moved" for a, _ in events(vault)) == 1  # a rerun moves nothing


@FILE_HOME
@SQLITE_ONLY
def test_file_to_pkcs11(
    vault: Vault, home: Any, cli_env: dict[str, str], softhsm_token: Path, tmp_path: Path
) -> None:
    from provider_support import SOFTHSM_MODULE, TOKEN_LABEL, USER_PIN

    configure(vault, 2)
    pin = tmp_path / "pin"
    pin.write_text(USER_PIN + "\n")
    pin.chmod(0o600)
    env = {**cli_env, "SOFTHSM2_CONF": str(softhsm_token)}
    flags = ("--pkcs11-module", SOFTHSM_MODULE, "--token-label", TOKEN_LABEL)
    flags += ("--key-label", "tkv-move", "--pin-file", str(pin))
    moved = json_of(run(env, "keys", "move", "--key-provider", "pkcs11", *flags, "--json"))
    assert moved["to"]["provider"] == "pkcs11" and moved["created_master_key"] is True
    assert blob_header(wraps(vault)["vk-1"])[0] == "pkcs11"
    assert record(home.home)["key_provider"] == "pkcs11"
    (home.home / "master-keys.json").unlink()
    intact(env, 2)


# -- refused targets: nothing changed --------------------------------------------------------


def _unchanged(vault: Vault, home: Path) -> tuple[Any, ...]:
    return (wraps(vault), len(events(vault)), (home / "vault.json").read_bytes())


@KMS_HOME
@SQLITE_ONLY
def test_a_missing_or_unreachable_target_is_refused_and_nothing_changes(
    vault: Vault, home: Any, cli_env: dict[str, str], kms: Any
) -> None:
    """(moto's KMS encrypts under a disabled key or one pending deletion, so what KMS
    itself refuses is a key that is not there, and an endpoint that does not answer.)"""
    env = with_aws(cli_env)
    configure(vault, 1)
    before = _unchanged(vault, home.home)
    real = kms.create_key(Description="tkv real")["KeyMetadata"]["Arn"]
    missing = real.rsplit("/", 1)[0] + "/00000000-0000-4000-8000-000000000000"
    for flags in (
        ("--key-id", missing),
        ("--key-id", "alias/no-such-alias"),
        ("--key-id", real, "--endpoint-url", "http://127.0.0.1:9"),  # nothing listens there
    ):
        refused = run(env, "keys", "move", "--key-provider", "aws-kms", *flags)
        assert refused.returncode == 1, refused.stdout
        assert "key provider aws-kms" in refused.stderr
        assert _unchanged(vault, home.home) == before
    intact(env, 1)


class _GivesBackAnother(FileProvider):
    """A provider that wraps, but unwraps to another key (a misbehaving plug-in)."""

    def unwrap(self, blob: bytes, context: Any) -> SecretBytes:
        super().unwrap(blob, context)
        return new_key()


class _CannotUnwrap(FileProvider):
    """A provider that may wrap but not unwrap (a KMS policy without kms:Decrypt)."""

    def unwrap(self, blob: bytes, context: Any) -> SecretBytes:
        raise self.error("refused decrypt: AccessDeniedException")


@FILE_HOME
@SQLITE_ONLY
def test_a_target_that_does_not_give_the_key_back_is_refused(
    vault: Vault, home: Any, tmp_path: Path
) -> None:
    configure(vault, 1)
    before = _unchanged(vault, home.home)
    for kind in (_GivesBackAnother, _CannotUnwrap):
        options = {"path": str(tmp_path / f"{kind.__name__}.json")}
        target = kind(ProviderSettings(home.home, home.vault_id, options))
        with pytest.raises(KeyProviderError):
            move.move_master_key(
                vault.store,
                home_providers(home),
                target,
                intent=lambda: pytest.fail("recorded a move to a target that was not proved"),
                pin=lambda: pytest.fail("pinned a target that was not proved"),
            )
        assert _unchanged(vault, home.home) == before


# -- killed mid-move -------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for SIGKILL at one exact step (a BaseException: nothing catches it)."""


def _move_in_process(home: Any, vault: Vault, target_flags: dict[str, str], *, crash: str) -> None:
    """The steps of `keys move` (cli/keys.py `_move`), killed at `crash`."""
    settings = load_settings()
    target = target_settings(settings, "aws-kms", target_flags)
    provider = open_provider(target)

    def intent() -> None:
        write_record(
            dataclasses.replace(settings, key_move=("aws-kms", provider.recorded_options()))
        )

    def pin() -> None:
        raise Killed

    if crash == "commit":
        real = move.rewrap_vault_keys

        def rewrap(*args: Any) -> None:
            raise Killed

        move.rewrap_vault_keys = rewrap  # type: ignore[assignment]
    try:
        with pytest.raises(Killed):
            move.move_master_key(
                vault.store, home_providers(settings), provider, intent=intent, pin=pin
            )
    finally:
        if crash == "commit":
            move.rewrap_vault_keys = real  # type: ignore[assignment]


@FILE_HOME
@SQLITE_ONLY
@pytest.mark.parametrize("crash", ["commit", "pin"])
def test_killed_before_the_commit_or_before_the_pin_the_vault_opens_and_a_rerun_finishes(
    vault: Vault, home: Any, kms_env: dict[str, str], moto_endpoint: str, crash: str
) -> None:
    configure(vault, 3)
    before = wraps(vault)
    _move_in_process(home, vault, {"endpoint_url": moto_endpoint}, crash=crash)
    recorded = record(home.home)
    assert recorded["key_provider"] == "file"  # the pin is not moved before the store
    assert recorded["key_move"]["key_provider"] == "aws-kms"  # the intent is recorded first
    committed = crash == "pin"
    assert (wraps(vault) != before) is committed
    assert blob_header(wraps(vault)["vk-1"])[0] == ("aws-kms" if committed else "local")
    intact(kms_env, 3)  # a new process opens it: through the pin, or the recorded target
    status = json_of(run(kms_env, "keys", "status", "--json"))
    assert status["move_under_way"] == {"provider": "aws-kms"}
    reopened = open_vault(load_settings())
    reopened.store.engine.dispose()
    if committed:  # the vault keys are under the recorded target: no third master key yet
        other = ("--key-provider", "file", "--key-file", str(home.home / "other-keys.json"))
        refused = run(kms_env, "keys", "move", *other)
        assert refused.returncode == 1 and "a move under way" in refused.stderr
        assert record(home.home) == recorded
    finished = json_of(run(kms_env, "keys", "move", "--json"))  # alone: the recorded move
    assert finished["vault_keys_moved"] == ([] if committed else ["vk-1"])
    assert finished["to"]["master_key"] == recorded["key_move"]["key_options"]["key_id"]
    pinned = record(home.home)
    assert pinned["key_provider"] == "aws-kms" and "key_move" not in pinned
    assert [a for a, _ in events(vault)].count("master_key_moved") == 1
    (home.home / "master-keys.json").unlink()
    intact(kms_env, 3)


@FILE_HOME
@SQLITE_ONLY
def test_a_vault_key_added_under_the_old_master_key_during_the_move_holds_back_the_pin(
    vault: Vault, home: Any, kms_env: dict[str, str], moto_endpoint: str
) -> None:
    """A `keys rotate --vault-key` that began before the move wraps its new vault key under
    the old master key after the move's commit: the home is not pinned to a target that
    does not hold every vault key; the vault opens, and a rerun moves the straggler."""
    configure(vault, 2)
    settings = load_settings()
    target = open_provider(target_settings(settings, "aws-kms", {"endpoint_url": moto_endpoint}))
    real = move.rewrap_vault_keys

    def rewrap_then_a_rotation_elsewhere(*args: Any) -> None:
        real(*args)
        rotate_vault_key(vault.store, open_provider(settings), vault.ring)

    def intent() -> None:
        write_record(dataclasses.replace(settings, key_move=("aws-kms", target.recorded_options())))

    move.rewrap_vault_keys = rewrap_then_a_rotation_elsewhere  # type: ignore[assignment]
    try:
        with pytest.raises(VaultError, match="vault key vk-2 was added under the old master"):
            move.move_master_key(
                vault.store,
                home_providers(settings),
                target,
                intent=intent,
                pin=lambda: pytest.fail("pinned a target that does not hold vk-2"),
            )
    finally:
        move.rewrap_vault_keys = real  # type: ignore[assignment]
    assert record(home.home)["key_provider"] == "file"
    assert blob_header(wraps(vault)["vk-2"])[0] == "local"
    intact(kms_env, 2)  # vk-1 through the recorded target, vk-2 through the pin
    finished = json_of(run(kms_env, "keys", "move", "--json"))
    assert finished["vault_keys_moved"] == ["vk-2"]
    assert {blob_header(w)[0] for w in wraps(vault).values()} == {"aws-kms"}
    assert record(home.home)["key_provider"] == "aws-kms"
    (home.home / "master-keys.json").unlink()
    intact(kms_env, 2)


@FILE_HOME
@SQLITE_ONLY
def test_sigkill_at_any_moment_of_a_move(
    vault: Vault, home: Any, kms_env: dict[str, str], moto_endpoint: str
) -> None:
    configure(vault, 5)
    target = ("--key-provider", "aws-kms", "--endpoint-url", moto_endpoint)
    for delay in (0.5, 0.9, 1.3, 1.7):
        proc = subprocess.Popen(
            [CLI, "keys", "move", *target],
            env=kms_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        intact(kms_env, 5)  # at every point the vault opens
        if record(home.home)["key_provider"] == "aws-kms":
            break
    if record(home.home)["key_provider"] == "file":  # not finished: rerun (alone if recorded)
        rerun = () if "key_move" in record(home.home) else target
        json_of(run(kms_env, "keys", "move", *rerun, "--json"))
    assert record(home.home)["key_provider"] == "aws-kms" and "key_move" not in record(home.home)
    assert blob_header(wraps(vault)["vk-1"])[0] == "aws-kms"
    assert [a for a, _ in events(vault)].count("master_key_moved") == 1
    intact(kms_env, 5)


# -- a running server ------------------------------------------------------------------------


@FILE_HOME
@SQLITE_ONLY
def test_a_running_server_keeps_answering_and_follows_the_move(
    vault: Vault, home: Any, kms_env: dict[str, str], moto_endpoint: str, tmp_path: Path
) -> None:
    token = create_token(vault.store, "agent", "mover")[1]
    headers = {"Authorization": f"Bearer {token}"}
    answers: list[int] = []
    stop = threading.Event()
    with running_server(kms_env, tmp_path / "serve.log") as base:

        def post(message: dict[str, Any], session: str | None = None) -> dict[str, Any]:
            extra = {"A2E-Session": session} if session else {}
            sent = httpx.post(base + "/a2e", json=message, headers={**headers, **extra}, timeout=30)
            answers.append(sent.status_code)
            return dict(sent.json())

        session = post({"type": "handshake/req", "capabilities": ["toolkits"]})["session_id"]

        def configure_over_http(tag: str) -> str:
            config = {"endpoint": "https://x.test", "api_key": f"{CANARY}-{tag}"}
            done = post(
                {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config},
                session,
            )
            return str(done.get("status"))

        def keep_asking() -> None:
            n = 0
            while not stop.is_set():
                assert configure_over_http(f"during-{n}") == "ok"
                post({"type": "toolkit/list/req"}, session)
                n += 1

        assert configure_over_http("before") == "ok"
        asker = threading.Thread(target=keep_asking)
        asker.start()
        try:
            moved = run(
                kms_env,
                "keys",
                "move",
                "--key-provider",
                "aws-kms",
                "--endpoint-url",
                moto_endpoint,
            )
            assert moved.returncode == 0, moved.stderr
            asked = len(answers)  # two more rounds (configure, list) answered after the move
            deadline = time.monotonic() + 30
            while len(answers) < asked + 4 and asker.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            stop.set()
            asker.join(timeout=60)
        (home.home / "master-keys.json").unlink()  # the server has no other way to the old key
        # A vault key made after the move is wrapped by KMS: the server follows the home.
        assert run(kms_env, "keys", "rotate", "--vault-key").returncode == 0
        assert configure_over_http("after") == "ok"
        with vault.store.engine.connect() as conn:
            last = conn.execute(
                select(ConfigVersion.kek_id).order_by(ConfigVersion.id.desc()).limit(1)
            ).scalar_one()
        assert last == "vk-2"
    assert answers and set(answers) == {200}
    assert "key ring not reloaded" not in (tmp_path / "serve.log").read_text()
    count = json_of(run(kms_env, "check", "--full", "--json"))
    assert count["failed"] == 0 and count["intact"] == count["versions"] >= 3


# -- recovery unseal onto a new KMS key ------------------------------------------------------


@pytest.fixture
def own_kms(aws_env: None, tmp_path: Path) -> Iterator[str]:
    """A moto KMS of this test's own: the drill makes its key gone for good (a reset)."""
    from provider_support import MotoServer

    server = MotoServer(tmp_path / "moto.log")
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


@SQLITE_ONLY
def test_recovery_unseal_onto_a_new_kms_key_when_the_old_one_is_gone(
    own_kms: str,
    tmp_path: Path,
    database_url: str,
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", database_url)
    monkeypatch.delenv("TOOLKIT_VAULT_KEY_PROVIDER", raising=False)
    init_vault(load_settings("aws-kms", {"endpoint_url": own_kms}))
    vault = open_vault(load_settings())
    env = with_aws(cli_env)
    try:
        configure(vault, 2)
        init = ("keys", "recovery", "init", "--shares", "3", "--threshold", "2", "--json")
        shares = json_of(run(env, *init))["shares"]
        home = tmp_path / "home"
        old = record(home)["key_options"]["key_id"]
        client = boto3.client("kms", endpoint_url=own_kms)
        client.disable_key(KeyId=bare(old))
        client.schedule_key_deletion(KeyId=bare(old), PendingWindowInDays=7)
        reset = urllib.request.Request(f"{own_kms}/moto-api/reset", method="POST")  # noqa: S310
        with urllib.request.urlopen(reset, timeout=10):  # noqa: S310 (the test's own moto)
            pass  # the deletion's window has passed: the key is gone
        with pytest.raises(VaultError):
            open_vault(load_settings()).store.engine.dispose()  # sealed
        new = client.create_key(Description="tkv key after the disaster")["KeyMetadata"]["Arn"]
        unseal = ("keys", "recovery", "unseal", "--key-provider", "aws-kms", "--key-id", new)
        done = json_of(run(env, *unseal, "--json", stdin="\n".join(shares[1:]) + "\n"))
        assert done["master_key"] == new and done["provider"] == "aws-kms"
        pinned = record(home)
        assert pinned["key_options"] == {"endpoint_url": own_kms, "key_id": new}
        assert blob_header(wraps(vault)["vk-1"]) == ("aws-kms", new)
        intact(env, 2)
        assert run(env, "audit", "verify").returncode == 0
        for share in shares:
            assert share not in json.dumps(events(vault))
    finally:
        vault.store.engine.dispose()


@pytest.fixture(autouse=True)
def _no_canary_in_homes(tmp_path: Path) -> Iterator[None]:
    yield
    for path in tmp_path.rglob("vault.json"):
        assert CANARY not in path.read_text()
