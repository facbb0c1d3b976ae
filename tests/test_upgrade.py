"""Upgrading vaults that older releases made: nothing lost, nothing forged believed.

Each legacy vault is made by that release's own code (`git archive` of its commit, run from
a temp directory with this venv's packages): sessions and configures over its stdio, tokens
(one revoked), an import, a purge and a master key rotation. Two releases: the last before
authenticated state (no row MACs, no state key) and the last before the key hierarchy (its
master keys wrap every data key). This release's `init` migrates both: the row MAC backfill
(`upgrade`) where needed, and the move of every data key to a vault key (`keyupgrade`),
which a SIGKILL at any point does not spoil.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, func, select, update
from sqlalchemy.exc import DBAPIError

from cli_support import CLI, run_cli, spawn_cli
from test_vault import AGENT, CANARY, configure, listed, request, secret_config
from toolkit_vault.access.principals import authenticate
from toolkit_vault.audit import upgrade
from toolkit_vault.bootstrap import init_vault, open_vault
from toolkit_vault.cli import main
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import INTEGRITY_FAILED, Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import load_settings
from toolkit_vault.store.models import AuditEvent, ConfigVersion, PrincipalRow, VaultKey

from tkv_test_plugins import SecretiveToolkit

RELEASES = {
    "before-macs": "62c3b4daef6943a22c89b30d1d899162ea87c620",  # the last without row MACs
    "before-hierarchy": "75e8337efbae579ada8c9f53a503a3d48b4b7db6",  # KEKs wrap data keys
}
ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "tests" / "vectors" / "package" / "server-remote-secret-header.json"

pytestmark = pytest.mark.key_providers("file")  # the providers those releases had


def _source(tmp_path_factory: pytest.TempPathFactory, commit: str) -> Path:
    where = tmp_path_factory.mktemp("legacy")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "service", "migrations"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive.stdout, check=True)
    return where / "service"


@pytest.fixture(scope="session")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {name: _source(tmp_path_factory, commit) for name, commit in RELEASES.items()}


@pytest.fixture(params=sorted(RELEASES))
def release(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def legacy_source(release: str, sources: dict[str, Path]) -> Path:
    return sources[release]


Legacy = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def legacy(
    legacy_source: Path,
    empty_database_url: str,
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> Legacy:
    """Run the previous release's command line on this test's home and (empty) database."""
    env = {**cli_env, "PYTHONPATH": os.pathsep.join([str(legacy_source), cli_env["PYTHONPATH"]])}
    for name in ("TOOLKIT_VAULT_HOME", "TOOLKIT_VAULT_DATABASE_URL"):
        monkeypatch.setenv(name, env[name])

    def run(*args: str, stdin: str = "", code: str = "") -> subprocess.CompletedProcess[str]:
        if not code:  # that release's CLI, forked from a server that imported it
            done = run_cli(args, env, input=stdin)
        else:
            done = subprocess.run(
                [sys.executable, "-c", code, *args],
                capture_output=True,
                text=True,
                env=env,
                input=stdin,
                timeout=120,
            )
        assert done.returncode == 0, done.stderr
        return done

    return run


def _stdio(legacy: Legacy, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    lines = "\n".join(json.dumps(m) for m in messages) + "\n"
    return [json.loads(out) for out in legacy("stdio", stdin=lines).stdout.splitlines()]


def _session(legacy: Legacy, *configs: tuple[str, dict[str, Any]]) -> str:
    hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
    asks = [
        {"type": "toolkit/configure/req", "toolkit_name": name, "config": config}
        for name, config in configs
    ]
    out = _stdio(legacy, hello, *asks)
    assert [m["status"] for m in out if m["type"] == "toolkit/configure/resp"] == ["ok"] * len(
        configs
    ), out
    session: str = out[0]["session_id"]
    return session


def _legacy_vault(legacy: Legacy) -> dict[str, Any]:
    legacy("init", "--key-provider", "file")
    kept = _session(
        legacy,
        ("secretive", secret_config()),
        ("secretive", secret_config()),
        ("filesystem", {"root_dir": "/tmp"}),
    )
    other = _session(legacy, ("secretive", secret_config()))
    purged = _session(legacy, ("secretive", {**secret_config(), "endpoint": "https://gone.test"}))
    tokens, ids = {}, {}
    for name in ("kept-agent", "revoked-agent"):
        created = json.loads(
            legacy("tokens", "create", "--role", "agent", "--name", name, "--json").stdout
        )
        tokens[name], ids[name] = created["token"], created["principal_id"]
    legacy("tokens", "revoke", "revoked-agent")
    legacy("toolkits", "import", str(PACKAGE))
    legacy("purge", "--session", purged, "--yes")
    legacy("keys", "rotate")
    return {"kept": kept, "other": other, "purged": purged, "tokens": tokens, "ids": ids}


def _resume(vault: Vault, session: str) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    conn = connect(vault, AGENT)
    hello = {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session}
    response, *events = request(conn, hello)
    assert response["type"] == "handshake/resp", response
    return events, listed(conn)


def _json(*args: str) -> dict[str, Any]:
    done = CliRunner().invoke(main, [*args, "--json"])
    assert done.exit_code == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_legacy_vault_upgrades_with_nothing_lost(legacy: Legacy, release: str) -> None:
    made = _legacy_vault(legacy)
    with pytest.raises(VaultError, match="run `toolkit-vault init`"):
        open_vault(load_settings())  # this release refuses a vault it has not upgraded
    report = init_vault(load_settings())
    if release == "before-macs":
        assert report.upgraded is not None and report.upgraded["unsigned_count"] == 0
        assert report.upgraded["signed"]["config_versions"] == 5
        assert report.upgraded["signed"]["principals"] == 3  # local and the two agents
    else:
        assert report.upgraded is None  # its rows were signed already
    assert report.hierarchy == {"vault_key": "vk-1", "rewrapped": 4, "failed": []}
    again = init_vault(load_settings())
    assert again.upgraded is None and again.hierarchy is None  # done once, never again

    checked = _json("check")
    assert (checked["ok"], checked["intact"], checked["failed"]) == (True, 4, 0)
    assert _json("audit", "verify")["ok"] is True
    vault = open_vault(load_settings())
    try:
        assert vault.ring.ids == ["vk-1"]  # no master key wraps a data key any more
        SecretiveToolkit.received.clear()
        events, configured = _resume(vault, made["kept"])
        assert events == [] and configured["secretive"] and configured["filesystem"]
        assert SecretiveToolkit.received == [secret_config()]
        assert authenticate(vault.store, made["tokens"]["kept-agent"]) is not None
        assert authenticate(vault.store, made["tokens"]["revoked-agent"]) is None
        kept = {p["name"]: p for p in _json("tokens", "list")["principals"]}["kept-agent"]
        assert (kept["expires_at"], kept["expired"]) == (None, False)  # made before expiries
        imported = json.loads(PACKAGE.read_text())["name"]
        assert imported in vault.registry
        conn = connect(vault, AGENT)
        request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})
        assert configure(conn, "secretive", secret_config())[0]["status"] == "ok"
    finally:
        vault.store.engine.dispose()

    history = _json("history")["versions"]
    prints = {
        (v["session_id"], v["version"]): v["secret_fingerprints"].get("/api_key")
        for v in history
        if v["toolkit_name"] == "secretive"
    }
    assert prints[(made["kept"], 1)] == prints[(made["kept"], 2)] != prints[(made["other"], 1)]
    (purged,) = [v for v in history if v["session_id"] == made["purged"]]
    assert purged["public_config"] == {} and purged["secret_fingerprints"] == {}
    assert CANARY not in json.dumps(history)

    status = _json("keys", "status")  # both layers: the old master keys, the new vault key
    masters = {m["key_id"]: m for m in status["master_keys"]}
    assert masters["kek-2"]["current"] and masters["kek-2"]["vault_keys"] == ["vk-1"]
    assert masters["kek-1"]["vault_keys"] == [] and masters["kek-1"]["in_provider"]
    (vault_key,) = status["vault_keys"]
    assert (vault_key["key_id"], vault_key["active"], vault_key["wrapped_keys"]) == (
        "vk-1",
        True,
        8,
    )
    assert _json("keys", "retire", "kek-1")["removed_from_provider"] is True
    assert _json("keys", "rotate", "--vault-key")["rewrapped"] == 5
    assert _json("keys", "rotate")["vault_keys_rewrapped"] == ["vk-1", "vk-2"]
    assert _json("check")["intact"] == 5


@pytest.mark.parametrize("release", ["before-macs"])
def test_the_upgrade_resumes_and_signs_nothing_it_cannot_vouch_for(
    legacy: Legacy, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _legacy_vault(legacy)
    from sqlalchemy import create_engine

    engine = create_engine(os.environ["TOOLKIT_VAULT_DATABASE_URL"])
    with engine.begin() as db:  # a writer without the key, before the upgrade: a downgrade
        db.execute(
            update(ConfigVersion)
            .where(ConfigVersion.session_id == made["other"])
            .values(wrapped_dek=None, sealed_secrets=None)
        )  # and a promotion, in a row that opens fine but that the chain contradicts
        db.execute(
            update(PrincipalRow).where(PrincipalRow.name == "kept-agent").values(role="operator")
        )
    engine.dispose()
    monkeypatch.setattr(upgrade, "BATCH_SIZE", 1)
    real_write, calls = upgrade._write, []

    def crash_on_the_third_batch(*args: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("killed")
        real_write(*args)

    monkeypatch.setattr(upgrade, "_write", crash_on_the_third_batch)
    with pytest.raises(RuntimeError, match="killed"):
        init_vault(load_settings())
    monkeypatch.setattr(upgrade, "_write", real_write)
    report = init_vault(load_settings())
    assert report.upgraded is not None
    assert report.upgraded["unsigned_count"] == 2
    assert sorted(report.upgraded["left_unsigned"]) == sorted(
        [
            f"config_versions {made['other']}/secretive v1: it does not open",
            f"principals kept-agent ({_principal_id(made)}): its name or role differs from its "
            "token_created event",
        ]
    )
    assert report.hierarchy is not None  # the downgraded row has no data key: named, left
    assert report.hierarchy["rewrapped"] == 3
    assert report.hierarchy["failed"] == [f"{made['other']}/secretive v1"]
    vault = open_vault(load_settings())
    try:
        assert authenticate(vault.store, made["tokens"]["kept-agent"]) is None
        events, configured = _resume(vault, made["other"])
        assert configured["secretive"] is False and events[0]["message"] == INTEGRITY_FAILED
        _, configured = _resume(vault, made["kept"])
        assert configured["secretive"] is True
    finally:
        vault.store.engine.dispose()
    done = CliRunner().invoke(main, ["check", "--json"])
    assert done.exit_code == 1
    assert json.loads(done.stdout)["state_problems"][0]["problem"] == "unauthenticated"


def _principal_id(made: dict[str, Any]) -> str:
    return str(made["ids"]["kept-agent"])


@pytest.mark.parametrize("release", ["before-macs"])
def test_a_broken_chain_stops_the_upgrade(legacy: Legacy) -> None:
    # A chain and unsigned versions are all it takes, not `_legacy_vault`'s tokens, import,
    # purge and rotation (a dozen more commands of that release's).
    legacy("init", "--key-provider", "file")
    _session(legacy, ("secretive", secret_config()), ("filesystem", {"root_dir": "/tmp"}))
    from sqlalchemy import create_engine

    engine = create_engine(os.environ["TOOLKIT_VAULT_DATABASE_URL"])
    with engine.begin() as db:
        db.execute(update(AuditEvent).where(AuditEvent.seq == 3).values(actor="someone"))
    done = CliRunner().invoke(main, ["init"])
    assert done.exit_code == 1
    assert "cannot upgrade: the audit chain does not verify" in done.stderr
    with engine.connect() as db:
        macs = db.execute(select(ConfigVersion.mac)).scalars().all()
    engine.dispose()
    assert macs == [None, None]  # both versions there, neither signed


# -- SIGKILL during the key hierarchy upgrade ----------------------------------------------

FILL = """  # runs on the old release's source: its flat module paths
import sys, time
from sqlalchemy import insert
from toolkit_vault import crypto
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.crypto import RecordContext
from toolkit_vault.integrity import POINTERS, VERSIONS
from toolkit_vault.models import ConfigVersion, CurrentConfig
from toolkit_vault.records import AuditDraft, VersionDraft
from toolkit_vault.settings import load_settings

count = int(sys.argv[1])
vault = open_vault(load_settings())
vault.store.create_session("bulk", "local")
digest = vault.registry.get("secretive").schema.digest
public = {"endpoint": "https://x.test", "auth": {}}
rows, events = [], []
for version in range(1, count + 1):
    context = RecordContext("bulk", "secretive", version, digest, crypto.public_digest(public))
    secrets = {"/api_key": f"tkv-canary-upgrade-{version}"}
    sealed = crypto.seal_config(vault.ring, vault._fingerprint_key, context, secrets)
    row = VersionDraft.of("ok", None, "local", digest, public, sealed).columns(
        "bulk", "secretive", version, time.time()
    )
    rows.append({**row, "mac": vault.store.mac(VERSIONS, row)})
    details = {"status": "ok", "changed": ["/api_key"]}
    events.append(AuditDraft("local", "configure", "bulk", "secretive", version, details))
pointer = {"session_id": "bulk", "toolkit_name": "secretive", "version": count}
with vault.store.engine.begin() as conn:
    conn.execute(insert(ConfigVersion), rows)
    vault.store.audit_many(conn, events)
    mac = vault.store.mac(POINTERS, pointer)
    conn.execute(insert(CurrentConfig).values(**pointer, updated_at=0.0, mac=mac))
"""


@pytest.mark.parametrize("release", ["before-hierarchy"])
def test_sigkill_during_the_upgrade_loses_nothing(legacy: Legacy, cli_env: dict[str, str]) -> None:
    legacy("init", "--key-provider", "file")
    legacy("keys", "rotate")  # data keys under kek-2, the vault-wide keys too
    legacy("2000", code=FILL)
    engine = create_engine(os.environ["TOOLKIT_VAULT_DATABASE_URL"])

    def count(query: Any) -> int:
        try:
            with engine.connect() as conn:
                return int(conn.execute(query).scalar_one())
        except DBAPIError:  # not migrated yet
            return 0

    moved = select(func.count()).where(ConfigVersion.kek_id == "vk-1")
    vault_keys = select(func.count()).select_from(VaultKey)

    def init_killed_when(ready: Callable[[], bool]) -> bool:
        proc = spawn_cli(["init"], cli_env, stderr=subprocess.DEVNULL)  # forked: no start-up
        while not ready() and proc.poll() is None:
            time.sleep(0.002)
        alive = proc.poll() is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return alive

    assert init_killed_when(lambda: count(vault_keys) > 0)  # the vault key is made
    assert count(vault_keys) == 1
    assert init_killed_when(lambda: count(moved) >= 500)  # between batches
    assert 500 <= count(moved) < 2000
    for delay in (0.5, 1.0, 1.5):  # and at moments nobody chose
        proc = subprocess.Popen([CLI, "init"], env=cli_env, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    report = init_vault(load_settings())
    assert report.hierarchy is None or report.hierarchy["failed"] == []
    assert count(select(func.count()).where(ConfigVersion.kek_id != "vk-1")) == 0
    assert count(vault_keys) == 1  # one vault key, however often init was killed
    engine.dispose()
    checked = _json("check")
    assert (checked["ok"], checked["versions"], checked["intact"]) == (True, 2000, 2000)
