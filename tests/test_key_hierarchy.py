"""The key hierarchy with each key provider, in real processes: what start-up asks of the
provider, that nothing else does (an outage after start stops no configure, list or resume),
and that a running server follows rotations made by another process without a false alarm.

The providers are real: the file provider, AWS KMS (moto's server on loopback) and PKCS#11
(SoftHSM2). Tests that take a provider down start their own server or token for it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from provider_support import SOFTHSM_MODULE, TOKEN_LABEL, USER_PIN, MotoServer, make_softhsm_token
from sqlalchemy import select
from websockets.sync.client import connect

from cli_support import run_cli
from test_http import running_server
from toolkit_vault.access.principals import create_token
from toolkit_vault.bootstrap import init_vault, open_provider, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import KeyProviderError
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.models import AuditEvent, ConfigVersion

EACH_PROVIDER = pytest.mark.key_providers("file", "aws-kms", "pkcs11")
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
CANARY = "tkv-canary-hierarchy"
PLUGINS = Path(__file__).parent / "plugins"


def run(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return run_cli(args, env, input=stdin)


def json_of(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def config(n: int) -> dict[str, Any]:
    return {"endpoint": "https://x.test", "api_key": f"{CANARY}-{n}"}


def stdio_session(env: dict[str, str], n: int) -> str:
    """A session configured by a `toolkit-vault stdio` process (so another process, when it
    resumes it, must decrypt it itself)."""
    hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
    ask = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config(n)}
    done = run(env, "stdio", stdin=f"{json.dumps(hello)}\n{json.dumps(ask)}\n")
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert out[1]["status"] == "ok", done.stderr
    session: str = out[0]["session_id"]
    return session


def token(env: dict[str, str], role: str, name: str) -> str:
    created = json_of(run(env, "tokens", "create", "--role", role, "--name", name, "--json"))
    return str(created["token"])


def resume(base: str, agent: str, session: str) -> tuple[list[dict[str, Any]], bool]:
    """Resume a session over the server's WebSocket: its events, and whether `secretive`
    is configured in it."""
    url = base.replace("http://", "ws://") + "/a2e"
    hello = {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session}
    with connect(url, additional_headers={"Authorization": f"Bearer {agent}"}) as ws:
        ws.send(json.dumps(hello))
        answer = json.loads(ws.recv(timeout=30))
        assert answer["type"] == "handshake/resp", answer
        ws.send(json.dumps({"type": "toolkit/list/req"}))
        events = []
        while (message := json.loads(ws.recv(timeout=30)))["type"] != "toolkit/list/resp":
            events.append(message)
    listed = {t["name"]: t["configured"] for t in message["toolkits"]}
    return events, listed["secretive"]


def configure_over_http(base: str, agent: str, n: int) -> str:
    headers = {"Authorization": f"Bearer {agent}"}
    hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
    session = httpx.post(f"{base}/a2e", json=hello, headers=headers, timeout=30).json()
    headers["A2E-Session"] = session["session_id"]
    ask = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config(n)}
    done = httpx.post(f"{base}/a2e", json=ask, headers=headers, timeout=30).json()
    assert done["status"] == "ok", done
    return str(session["session_id"])


def checked(base: str, operator: str, full: bool = False) -> dict[str, Any]:
    answer = httpx.get(
        f"{base}/v1/check",
        params={"full": "true"} if full else {},
        headers={"Authorization": f"Bearer {operator}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


# -- start-up: the one time a process asks the provider ----------------------------------------


def _spoil_master_key(home: VaultSettings, kms: Any, how: str) -> None:
    """Take the vault's master key away (`missing`) or put another in its place (`wrong`)."""
    provider = open_provider(home)
    if provider.name == "file":
        key_file = home.home / "master-keys.json"
        if how == "missing":
            key_file.unlink()
            return
        doc = json.loads(key_file.read_text())
        doc["keys"]["kek-1"] = base64.b64encode(b"\x01" * 32).decode()
        key_file.write_text(json.dumps(doc))
    elif provider.name == "aws-kms":  # moto enforces no key state: point elsewhere instead
        record = json.loads(home.record_path.read_text())
        if how == "missing":
            other = (
                home.key_options["key_id"].rsplit("/", 1)[0]
                + "/"
                + "0" * 8
                + "-0000-0000-0000-"
                + "0" * 12
            )
        else:
            other = kms.create_key(Description="another key")["KeyMetadata"]["Arn"]
        record["key_options"]["key_id"] = other
        home.record_path.write_text(json.dumps(record))
    else:
        import pkcs11
        from pkcs11 import Attribute, ObjectClass

        token = pkcs11.lib(SOFTHSM_MODULE).get_token(token_label=TOKEN_LABEL)
        with token.open(user_pin=USER_PIN, rw=True) as session:
            label = home.key_options["key_label"]
            for key in session.get_objects(
                {Attribute.CLASS: ObjectClass.SECRET_KEY, Attribute.LABEL: label}
            ):
                key.destroy()
            if how == "wrong":
                session.generate_key(pkcs11.KeyType.AES, 256, label=label, id=b"kek-1", store=True)


@pytest.fixture
def kms(home: VaultSettings, request: pytest.FixtureRequest) -> Any:
    """A KMS client on the `home` fixture's moto server (aws-kms only)."""
    if home.key_provider != "aws-kms":
        return None
    import boto3

    return boto3.client("kms", endpoint_url=home.key_options["endpoint_url"])


def _medium(home: VaultSettings, kms: Any) -> Any:
    """What the provider holds, to show a refusal created nothing."""
    provider = open_provider(home)
    if provider.name == "file":
        return sorted(p.name for p in home.home.iterdir())
    if provider.name == "aws-kms":
        return sorted(k["KeyId"] for k in kms.list_keys()["Keys"])
    with contextlib.suppress(KeyProviderError):
        return provider.status().key_ids
    return None


@EACH_PROVIDER
@SQLITE_ONLY
@pytest.mark.parametrize("how", ["missing", "wrong"])
def test_a_missing_or_wrong_master_key_refuses_and_creates_nothing(
    vault: Vault, home: VaultSettings, kms: Any, how: str
) -> None:
    _spoil_master_key(home, kms, how)
    before = _medium(home, kms)
    with pytest.raises(KeyProviderError) as refused:
        open_vault(load_settings())
    message = refused.value.message
    assert f"key provider {home.key_provider}" in message or "vault key vk-1 does not open" in (
        message
    )
    assert _medium(home, kms) == before
    with pytest.raises(KeyProviderError):
        init_vault(load_settings())  # init never makes a replacement either
    assert _medium(home, kms) == before


@EACH_PROVIDER
@SQLITE_ONLY
def test_init_records_where_the_master_key_is_and_no_credential(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    record = json.loads(home.record_path.read_text())
    assert record["key_provider"] == home.key_provider
    if home.key_provider == "aws-kms":  # created by init, recorded for later commands
        assert record["key_options"]["key_id"].startswith("arn:aws:kms:")
    text = home.record_path.read_text()
    for credential in ("testing", USER_PIN):  # the AWS secret key, the PKCS#11 PIN
        assert credential not in text
    with vault.store.engine.connect() as conn:
        first = conn.execute(select(AuditEvent.details).where(AuditEvent.seq == 1)).scalar_one()
    assert json.loads(first)["key_id"] == "vk-1"
    assert json.loads(first)["provider"] == home.key_provider
    status = json_of(run(cli_env, "keys", "status", "--json"))
    assert status["provider"]["name"] == home.key_provider and status["provider"]["reachable"]
    assert [v["key_id"] for v in status["vault_keys"]] == ["vk-1"]
    assert [m["vault_keys"] for m in status["master_keys"] if m["current"]] == [["vk-1"]]
    again = run(cli_env, "init", "--key-option", "nonsense=1")
    assert again.returncode == 1 and "unknown option 'nonsense'" in again.stderr


# -- steady state: no provider calls; an outage stops nothing but rotation ----------------------


Outage = tuple[list[str], dict[str, str], Callable[[], None], Callable[[], None] | None]


def _moved(path: Path) -> tuple[Callable[[], None], Callable[[], None]]:
    gone = path.with_name(path.name + ".gone")
    return (lambda: path.rename(gone)), (lambda: gone.rename(path))


@pytest.fixture(params=["file", "aws-kms", "pkcs11"])
def own_provider(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outage]:
    """A provider medium of this test's own, `init` flags and environment for it, a way to
    take it away (the key file moved, moto's server stopped, the token's store moved) and,
    where the medium survives that, to bring it back."""
    if request.param == "file":
        yield ["--key-provider", "file"], {}, *_moved(tmp_path / "home" / "master-keys.json")
        return
    if request.param == "aws-kms":
        server = MotoServer(tmp_path / "moto.log")
        url = server.start()
        env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        flags = ["--key-provider", "aws-kms", "--endpoint-url", url, "--region", "eu-west-1"]
        try:
            yield flags, env, server.stop, None  # moto keeps its keys in memory only
        finally:
            server.stop()
        return
    conf = make_softhsm_token(tmp_path / "hsm")
    flags = ["--key-provider", "pkcs11", "--pkcs11-module", SOFTHSM_MODULE]
    flags += ["--token-label", TOKEN_LABEL, "--pin-env", "TKV_TEST_HSM_PIN"]
    env = {"SOFTHSM2_CONF": str(conf), "TKV_TEST_HSM_PIN": USER_PIN}
    yield flags, env, *_moved(tmp_path / "hsm" / "tokens")


def _own_home(flags: list[str], extra: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A vault initialized on the provider of `own_provider`; its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLKIT_VAULT_", "AWS_"))}
    env.pop("SOFTHSM2_CONF", None)
    env |= {**extra, "TOOLKIT_VAULT_HOME": str(tmp_path / "home")}
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")])
    init = run(env, "init", *flags)
    assert init.returncode == 0, init.stderr
    return env


def test_an_outage_after_start_stops_no_configure_list_or_resume(
    own_provider: Outage, tmp_path: Path
) -> None:
    flags, extra, take_away, _ = own_provider
    env = _own_home(flags, extra, tmp_path)
    agent = token(env, "agent", "agent")
    operator = token(env, "operator", "operator")
    with running_server(env, tmp_path / "before.log") as base:
        earlier = [configure_over_http(base, agent, n) for n in range(3)]
    with running_server(env, tmp_path / "serve.log") as base:  # a restart: keys loaded once
        take_away()
        refused = run(env, "check")  # a process starting now cannot, and says why
        assert refused.returncode == 1 and "key provider" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
        for session in earlier:  # resumed: decrypted in this process, with its vault key
            assert resume(base, agent, session) == ([], True)
        later = [configure_over_http(base, agent, n) for n in range(3, 6)]
        for session in later:
            assert resume(base, agent, session) == ([], True)
        result = checked(base, operator)
        assert (result["intact"], result["failed"]) == (6, 0)
    assert "key ring not reloaded" not in (tmp_path / "serve.log").read_text()


@pytest.mark.parametrize("own_provider", ["aws-kms", "pkcs11"], indirect=True)
def test_an_outage_after_a_rotation_elsewhere_fails_alone(
    own_provider: Outage, tmp_path: Path
) -> None:
    """The one case an outage reaches a running process: another process made a vault key
    this one has not loaded. New configs stay under its older key, versions under the new key
    fail alone (and `/v1/check` answers 503 naming the provider: no false "failed"); with
    the provider back, a process opens them all and the next rotation moves the stragglers.
    (The file provider keeps its key document in memory: it never gets here.)"""
    flags, extra, take_away, bring_back = own_provider
    env = _own_home(flags, extra, tmp_path)
    agent = token(env, "agent", "agent")
    operator = token(env, "operator", "operator")
    with running_server(env, tmp_path / "before.log") as base:
        earlier = configure_over_http(base, agent, 0)
    with running_server(env, tmp_path / "serve.log") as base:  # loads vk-1 at start
        assert json_of(run(env, "keys", "rotate", "--vault-key", "--json"))["rewrapped"] == 1
        take_away()
        during = configure_over_http(base, agent, 1)  # sealed under vk-1: vk-2 cannot load
        events, configured = resume(base, agent, earlier)  # moved to vk-2: fails alone
        assert configured is False and "integrity" in events[0]["message"]
        answer = httpx.get(
            f"{base}/v1/check", headers={"Authorization": f"Bearer {operator}"}, timeout=60
        )
        assert answer.status_code == 503 and "key provider" in answer.json()["detail"]
    assert "key ring not reloaded" in (tmp_path / "serve.log").read_text()
    if bring_back is None:  # moto keeps its keys in memory: they went with the server
        return
    bring_back()
    with running_server(env, tmp_path / "after.log") as base:
        assert resume(base, agent, earlier) == ([], True)
        assert resume(base, agent, during) == ([], True)
        result = checked(base, operator)
        assert (result["intact"], result["failed"]) == (2, 0)
    done = json_of(run(env, "keys", "rotate", "--vault-key", "--json"))
    assert done["resumed"] is True and done["rewrapped"] == 1  # the straggler, under vk-1


# -- a running server follows rotations made by another process ---------------------------------


@EACH_PROVIDER
@SQLITE_ONLY
def test_a_server_follows_rotations_made_elsewhere_without_a_false_alarm(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Three paths learn of a rotation the same way (`Vault.ring_for`): `/v1/check` on one
    server, a resume and a configure on another that was started before the rotation.
    (Its tokens are made in this process, whose vault is open: `tokens create` is not what
    it is about; the outage tests, whose vaults this process does not open, use the CLI.)"""
    agent = create_token(vault.store, "agent", "agent")[1]
    operator = create_token(vault.store, "operator", "operator")[1]
    with (
        running_server(cli_env, tmp_path / "a.log") as a,
        running_server(cli_env, tmp_path / "b.log") as b,
    ):
        first = [configure_over_http(a, agent, n) for n in range(3)]
        assert checked(a, operator)["intact"] == 3
        rotated = json_of(run(cli_env, "keys", "rotate", "--vault-key", "--json"))
        assert rotated["primary"] == "vk-2" and rotated["rewrapped"] == 3
        result = checked(a, operator)  # every data key is under a key `a` never loaded
        assert (result["intact"], result["failed"], result["ok"]) == (3, 0, True)
        for session in first:  # `b` never saw these: it decrypts them under vk-2
            assert resume(b, agent, session) == ([], True)
        later = configure_over_http(b, agent, 10)
        json_of(run(cli_env, "keys", "rotate", "--json"))  # the master key: nothing to reload
        json_of(run(cli_env, "keys", "retire", "vk-1", "--json"))
        for server in (a, b):  # each opens every version, not only those since a mark
            result = checked(server, operator, full=True)
            assert (result["intact"], result["failed"], result["ok"]) == (4, 0, True)
        assert resume(a, agent, later) == ([], True)
    with vault.store.engine.connect() as conn:
        rows = conn.execute(select(ConfigVersion.kek_id)).scalars().all()
    assert rows == ["vk-2"] * 4
    for log in ("a.log", "b.log"):
        text = (tmp_path / log).read_text()
        assert "key ring not reloaded" not in text and CANARY not in text
