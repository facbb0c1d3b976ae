"""Key rotation on both layers, retirement and the decrypt check: on SQLite and PostgreSQL,
with each key provider (file, AWS KMS on moto's server, PKCS#11 on SoftHSM2), in real
processes, including processes killed with SIGKILL at every step of either rotation."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from provider_support import key_cells
from sqlalchemy import func, insert, select, update

from cli_support import CLI, Forked, run_cli, spawn_cli
from fork_client import script_env
from toolkit_vault import crypto
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import RecordContext
from toolkit_vault.keys.admin import key_status
from toolkit_vault.keys.providers import blob_header
from toolkit_vault.keys.rotation import rotate_vault_key
from toolkit_vault.settings import load_settings
from toolkit_vault.store.data_keys import write_rewraps
from toolkit_vault.store.integrity import POINTERS, VERSIONS
from toolkit_vault.store.models import AuditEvent, ConfigVersion, CurrentConfig, VaultKey
from toolkit_vault.store.records import AuditDraft, VersionDraft

# Where the provider does the work (the master key's rotation), the providers; data-key
# batches do not call it: those tests take the module's provider (conftest.py). A master
# rotation is storage too (the vault keys' rewrap and its commit), so the file provider runs
# it on both databases and each other provider on one (`key_cells`): each provider's own
# rotate, wrap, unwrap and retire are tests/providers/' (the conformance mixin and each
# provider's module). PKCS#11 takes the file provider's branch of a master rotation (a new
# key id; the old one retired from the token): it is killed at any moment of one and then
# finishes it below, and it is the module's provider for every data-key test.
# A kill lands in the provider's work or in the store's commit, which do not depend on each
# other: each provider once and each database once (PKCS#11 on PostgreSQL: the new-key-id
# branch the file provider takes on SQLite, killed during a PostgreSQL commit).
EACH_PROVIDER = key_cells(("file", "sqlite"), ("aws-kms", "sqlite"), ("pkcs11", "postgres"))
BRANCHES = key_cells(("file", "sqlite"), ("file", "postgres"), ("aws-kms", "sqlite"))
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

CANARY = "tkv-canary-rotation"


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env, timeout=300)


def fill(vault: Vault, count: int, session: str = "bulk") -> None:
    """Store `count` sealed versions directly (as configure would), in bulk, fast."""
    vault.store.create_session(session, "local")
    digest = vault.registry.get("secretive").schema.digest
    rows = []
    for version in range(1, count + 1):
        public = {"endpoint": "https://x.test", "auth": {}}
        context = RecordContext(session, "secretive", version, digest, crypto.public_digest(public))
        secrets = {"/api_key": f"{CANARY}-{version}", "/auth/password": "pw"}
        sealed = crypto.seal_config(vault.ring, vault._fingerprint_key, context, secrets)
        draft = VersionDraft.of("ok", None, "local", digest, public, sealed)
        row = draft.columns(session, "secretive", version, time.time())
        rows.append({**row, "mac": vault.store.mac(VERSIONS, row)})
    pointer = {"session_id": session, "toolkit_name": "secretive", "version": count}
    details = {"status": "ok", "changed": ["/api_key", "/auth/password"]}
    events = [
        AuditDraft("local", "configure", session, "secretive", version, details)
        for version in range(1, count + 1)
    ]
    with vault.store.engine.begin() as conn:
        for start in range(0, len(rows), 2000):
            conn.execute(insert(ConfigVersion), rows[start : start + 2000])
        vault.store.audit_many(conn, events)
        conn.execute(
            insert(CurrentConfig).values(
                **pointer, updated_at=0.0, mac=vault.store.mac(POINTERS, pointer)
            )
        )


def state(vault: Vault) -> dict[str, Any]:
    with vault.store.engine.connect() as conn:
        by_key = dict(
            conn.execute(
                select(ConfigVersion.kek_id, func.count()).group_by(ConfigVersion.kek_id)
            ).all()
        )
        versions = conn.execute(
            select(ConfigVersion.session_id, ConfigVersion.version, ConfigVersion.dek_id)
        ).all()
        keys = conn.execute(
            select(VaultKey.key_id, VaultKey.is_active, VaultKey.retired_at.is_not(None))
        ).all()
        wraps = dict(conn.execute(select(VaultKey.key_id, VaultKey.wrapped_key)).all())
        data_keys = dict(conn.execute(select(ConfigVersion.id, ConfigVersion.wrapped_dek)).all())
        events = conn.execute(select(func.count()).select_from(AuditEvent)).scalar_one()
    return {
        "by_key": by_key,
        "versions": sorted(map(tuple, versions)),
        "vault_keys": sorted(map(tuple, keys)),
        "wraps": wraps,
        "data_keys": data_keys,
        "events": events,
    }


def json_of(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def intact(env: dict[str, str], count: int) -> None:
    checked = json_of(run(env, "check", "--full", "--json"))  # every version, not those since
    assert (checked["versions"], checked["intact"], checked["failed"]) == (count, count, 0)


def opens(count: int) -> None:
    """The vault opens afresh (every live vault key unwraps, every record is signed), every
    version opens, and the audit chain verifies: in this process, as a restart would."""
    vault = open_vault(load_settings())
    try:
        checked = vault.check(full=True)
        assert (checked["versions"], checked["intact"], checked["ok"]) == (count, count, True)
    finally:
        vault.store.engine.dispose()


def master_of(wrapped: bytes) -> str:
    return blob_header(wrapped)[1]


# -- the master key: O(vault keys) ---------------------------------------------------------


@BRANCHES
def test_master_rotation_rewraps_the_vault_keys_only(vault: Vault, cli_env: dict[str, str]) -> None:
    fill(vault, 1000)
    before = state(vault)
    provider = open_provider(load_settings())
    first = provider.status().current
    report = json_of(run(cli_env, "keys", "rotate", "--json"))
    assert report["kind"] == "master" and report["rotated_in_provider"] is True
    assert report["vault_keys_rewrapped"] == ["vk-1"]
    after = state(vault)
    assert after["data_keys"] == before["data_keys"]  # not one data key touched
    assert after["wraps"]["vk-1"] != before["wraps"]["vk-1"]
    assert master_of(after["wraps"]["vk-1"]) == report["master_key"]
    assert provider.status().current == report["master_key"]
    status = json_of(run(cli_env, "keys", "status", "--json"))
    current = [m for m in status["master_keys"] if m["current"]]
    assert [(m["key_id"], m["vault_keys"]) for m in current] == [(report["master_key"], ["vk-1"])]
    refused = run(cli_env, "keys", "retire", report["master_key"])  # the current one
    assert refused.returncode == 1 and "key provider" in refused.stderr
    if first != report["master_key"]:  # file, pkcs11: a new key id; the old one retires
        assert report["previous"] == [first]
        retired = json_of(run(cli_env, "keys", "retire", str(first), "--json"))
        assert retired == {
            "kek_id": first,
            "kind": "master",
            "retired": True,
            "removed_from_provider": True,
        }
        assert first not in provider.status().key_ids
    else:  # aws-kms: new key material under the same key id; KMS keeps the old material
        assert report["previous"] == []
        assert int(provider.status().details["rotations"]) == 1
    intact(cli_env, 1000)


@key_cells(("file", "sqlite"), ("aws-kms", "sqlite"))
def test_master_rotation_finishes_a_rotation_the_provider_made(
    vault: Vault, home: Any, cli_env: dict[str, str]
) -> None:
    """The state a kill leaves between the provider's rotation and the store's commit: the
    vault keys still open under the old master key, and a rerun moves them to the new one
    (local and PKCS#11 providers tell the pending key by its id and rotate no further)."""
    fill(vault, 10)
    provider = open_provider(home)
    first = provider.status().current
    made = provider.rotate()
    intact(cli_env, 10)
    held = provider.status()
    refused = run(cli_env, "keys", "retire", str(first))  # it still wraps vk-1 (or is current)
    assert refused.returncode == 1 and provider.status() == held
    if made != first:
        assert f"master key {first} still wraps vault key vk-1" in refused.stderr
    report = json_of(run(cli_env, "keys", "rotate", "--json"))
    assert report["master_key"] == made and master_of(state(vault)["wraps"]["vk-1"]) == made
    if provider.name == "aws-kms":  # same key id: the rerun rotates once more, harmlessly
        assert int(provider.status().details["rotations"]) == 2
    else:
        assert report["rotated_in_provider"] is False
        assert provider.status().key_ids == held.key_ids
    intact(cli_env, 10)


# -- the vault key: data keys rewrapped, no value opened ------------------------------------


def _corrupt_envelope(vault: Vault, version: int) -> None:
    with vault.store.engine.begin() as conn:
        row = conn.execute(select(ConfigVersion).where(ConfigVersion.version == version)).one()
        sealed = json.loads(row.sealed_secrets)
        envelope = bytearray(base64.b64decode(sealed["/api_key"]))
        envelope[-1] ^= 1
        sealed["/api_key"] = base64.b64encode(bytes(envelope)).decode()
        conn.execute(
            update(ConfigVersion)
            .where(ConfigVersion.id == row.id)
            .values(sealed_secrets=json.dumps(sealed))
        )


@key_cells(("file", "sqlite"))  # the provider wraps one key: vk-2 (the module's PKCS#11 below)
def test_vault_key_rotation_moves_data_keys_without_opening_values(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    fill(vault, 1000)
    _corrupt_envelope(vault, 2)  # its data key is intact: a rotation moves it as it is
    before = state(vault)
    assert "the active vault key" in run(cli_env, "keys", "retire", "vk-1").stderr
    report = json_of(run(cli_env, "keys", "rotate", "--vault-key", "--json", "--batch-size", "300"))
    assert report == {
        "kind": "vault-key",
        "primary": "vk-2",
        "previous": ["vk-1"],
        "resumed": False,
        "rewrapped": 1000,
        "internal_rewrapped": 3,
        "failed": [],
    }
    after = state(vault)
    assert after["by_key"] == {"vk-2": 1000}
    assert after["versions"] == before["versions"]  # identity kept: same dek ids, no doubles
    result = vault.check()  # check, not rotation, proves values (vk-2 loaded on the way)
    assert (result["intact"], result["failed"], result["failed_versions"][0]["version"]) == (
        999,
        1,
        2,
    )
    status = {
        k["key_id"]: k
        for k in key_status(vault.store, open_provider(load_settings()))["vault_keys"]
    }
    assert status["vk-2"]["active"] and status["vk-2"]["wrapped_keys"] == 1003
    assert status["vk-1"]["wrapped_keys"] == 0
    retired = json_of(run(cli_env, "keys", "retire", "vk-1", "--json"))
    assert retired == {
        "kek_id": "vk-1",
        "kind": "vault",
        "retired": True,
        "removed_from_provider": False,
    }
    assert state(vault)["wraps"]["vk-1"] is None  # the retired key is destroyed
    assert ("vk-1", False, True) in state(vault)["vault_keys"]
    reopened = open_vault(load_settings())  # opens with vk-2 alone
    assert reopened.ring.ids == ["vk-2"]
    reopened.store.engine.dispose()
    done = run(cli_env, "keys", "status")
    assert done.returncode == 0 and CANARY not in done.stdout + done.stderr


def test_a_data_key_that_does_not_unwrap_is_left_and_named(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    fill(vault, 3)
    with vault.store.engine.begin() as conn:
        middle = conn.execute(select(ConfigVersion).where(ConfigVersion.version == 2)).one()
        wrapped = bytearray(middle.wrapped_dek)
        wrapped[-1] ^= 1
        conn.execute(
            update(ConfigVersion)
            .where(ConfigVersion.id == middle.id)
            .values(wrapped_dek=bytes(wrapped))
        )
    report = rotate_vault_key(vault.store, open_provider(load_settings()), vault.ring)
    assert (report.rewrapped, [f["version"] for f in report.failed]) == (2, [2])
    with vault.store.engine.connect() as conn:
        rows = conn.execute(select(ConfigVersion).order_by(ConfigVersion.version)).all()
    assert [r.kek_id for r in rows] == ["vk-2", "vk-1", "vk-2"]
    assert rows[1].wrapped_dek == bytes(wrapped)
    done = run(cli_env, "keys", "retire", "vk-1")
    assert done.returncode == 1 and "vk-1 still protects 1 wrapped key:" in done.stderr
    again = run(cli_env, "keys", "rotate", "--vault-key", "--json")  # resumes, still refuses
    assert again.returncode == 1 and json.loads(again.stdout)["failed"][0]["version"] == 2
    assert json.loads(again.stdout)["resumed"] is True and state(vault)["by_key"]["vk-2"] == 2


def test_rewrap_writes_only_rows_still_holding_the_verified_key(vault: Vault) -> None:
    """The batch `UPDATE` is compare-and-set on (id, old key, old wrapped key): a row that
    changed since it was read is left alone."""
    fill(vault, 2)
    columns = (ConfigVersion.id, ConfigVersion.kek_id, ConfigVersion.wrapped_dek)
    with vault.store.engine.connect() as conn:
        (a, kek, wrapped), (b, _, _) = conn.execute(select(*columns).order_by(ConfigVersion.id))
    assert kek is not None and wrapped is not None
    updates = [(a, kek, wrapped, kek, b"new-a"), (b, kek, wrapped, kek, b"new-b")]
    vault.store.transact(partial(write_rewraps, updates=updates))
    with vault.store.engine.connect() as conn:
        stored = dict(conn.execute(select(ConfigVersion.id, ConfigVersion.wrapped_dek)).all())
    assert stored[a] == b"new-a"
    assert stored[b] not in (b"new-b", b"new-a", None)


def test_check_reports_a_tampered_version(vault: Vault, cli_env: dict[str, str]) -> None:
    fill(vault, 5)
    with vault.store.engine.begin() as conn:
        conn.execute(
            update(ConfigVersion).where(ConfigVersion.version == 3).values(dek_id="0" * 32)
        )
    done = run(cli_env, "check", "--json")
    assert done.returncode == 1
    result = json.loads(done.stdout)
    assert (result["intact"], result["failed"]) == (4, 1)
    assert result["failed_versions"][0]["version"] == 3


# -- dry runs -------------------------------------------------------------------------------


def test_dry_runs_count_and_estimate_and_change_nothing(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    fill(vault, 1200)
    provider = open_provider(load_settings())
    before, held = state(vault), provider.status()
    master = json_of(run(cli_env, "keys", "rotate", "--dry-run", "--json"))
    assert master["dry_run"] is True and master["kind"] == "master"
    assert master["would_rewrap"] == 1 and master["rotates_in_provider"] is True
    assert master["wrapped_keys"] == {"vk-1": 1203} and master["estimate_seconds"] > 0
    plan = json_of(run(cli_env, "keys", "rotate", "--vault-key", "--dry-run", "--json"))
    assert (plan["kind"], plan["active"], plan["new_vault_key"]) == ("vault-key", "vk-1", True)
    assert plan["would_rewrap"] == 1203
    assert plan["measured"]["rows"] == 500 and plan["measured"]["seconds"] > 0
    measured = plan["measured"]["seconds"] / 500 * 1203
    assert plan["estimate_seconds"] == pytest.approx(measured)
    text = run(cli_env, "keys", "rotate", "--vault-key", "--dry-run", "--batch-size", "100")
    assert text.returncode == 0 and "would make a new vault key, then rewrap 1203" in text.stdout
    assert "measured 100 in" in text.stdout
    assert state(vault) == before and provider.status() == held  # nothing changed anywhere


# -- SIGKILL at any point --------------------------------------------------------------------


def _spawn(env: dict[str, str], *args: str) -> Forked:
    """A command killed when a condition holds: forked (`cli_support`), without start-up."""
    return spawn_cli(args, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """A command killed at a moment timed from its start: a real process, its start-up
    (imports, the provider's client) part of the moments the kills land on."""
    return subprocess.Popen(
        [CLI, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True
    )


def _kill_when(proc: Forked, ready: Callable[[], bool], timeout: float = 120) -> bool:
    """SIGKILL `proc` as soon as `ready()`; whether it was still running then."""
    deadline = time.monotonic() + timeout
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    alive = proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return alive


def _kill_after(proc: subprocess.Popen[str], seconds: float) -> None:
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_sigkill_during_a_vault_key_rotation_then_rerun(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    fill(vault, 2000)
    before = state(vault)
    rotate = ("keys", "rotate", "--vault-key", "--json", "--batch-size", "20")

    def count(query: Any) -> int:
        with vault.store.engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def moved_at_least(n: int) -> Callable[[], bool]:
        moved = select(func.count()).where(ConfigVersion.kek_id == "vk-2")
        return lambda: count(moved) >= n

    def new_key_made() -> bool:
        return count(select(func.count()).select_from(VaultKey)) > 1

    assert _kill_when(_spawn(cli_env, *rotate), new_key_made)
    killed = state(vault)
    assert killed["vault_keys"][1][:2] == ("vk-2", True)  # made active, in one transaction
    assert _kill_when(_spawn(cli_env, *rotate), moved_at_least(300))
    assert 300 <= state(vault)["by_key"]["vk-2"] < 2000  # killed between batches
    assert _kill_when(_spawn(cli_env, *rotate), moved_at_least(1200))
    opens(2000)  # every version opens at every point in between
    final = json_of(run(cli_env, *rotate))
    assert final["primary"] == "vk-2" and final["resumed"] is True and final["failed"] == []
    after = state(vault)
    assert after["by_key"] == {"vk-2": 2000}
    assert after["versions"] == before["versions"]
    assert after["vault_keys"] == [("vk-1", False, False), ("vk-2", True, False)]  # no third
    opens(2000)


@EACH_PROVIDER
def test_sigkill_at_any_moment_of_a_master_rotation(vault: Vault, cli_env: dict[str, str]) -> None:
    """Kills at staggered moments (start-up, the provider's rotation, its unwrap and wrap,
    the commit), each followed by the invariants; then a rerun finishes."""
    fill(vault, 50)
    for delay in (0.6, 1.0, 1.4):
        _kill_after(_start(cli_env, "keys", "rotate"), delay)
        opens(50)
    report = json_of(run(cli_env, "keys", "rotate", "--json"))
    assert master_of(state(vault)["wraps"]["vk-1"]) == report["master_key"]
    opens(50)


def test_sigkill_at_any_moment_of_a_vault_key_rotation(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    fill(vault, 600)
    for delay in (0.6, 1.1, 1.6):
        _kill_after(_start(cli_env, "keys", "rotate", "--vault-key", "--batch-size", "10"), delay)
        opens(600)
    report = json_of(run(cli_env, "keys", "rotate", "--vault-key", "--json"))
    assert report["failed"] == []
    after = state(vault)
    assert list(after["by_key"]) == [report["primary"]]
    assert after["vault_keys"][-1][:2] == (report["primary"], True)
    opens(600)


def test_configures_from_another_process_during_rotation(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    fill(vault, 1500)
    lines = [json.dumps({"type": "handshake/req", "capabilities": ["toolkits"]})]
    for n in range(60):
        config = {"endpoint": "https://x.test", "api_key": f"{CANARY}-live-{n}"}
        lines.append(
            json.dumps(
                {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
            )
        )
    agent = spawn_cli(["stdio"], cli_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert agent.stdin is not None and agent.stdout is not None
    agent.stdin.write(lines[0] + "\n")
    agent.stdin.flush()
    assert json.loads(agent.stdout.readline())["type"] == "handshake/resp"  # ring loaded: vk-1
    rotation = spawn_cli(
        ["keys", "rotate", "--vault-key", "--json", "--batch-size", "20"],
        cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    statuses = []
    for line in lines[1:]:
        agent.stdin.write(line + "\n")
        agent.stdin.flush()
        statuses.append(json.loads(agent.stdout.readline())["status"])
        agent.stdout.readline()  # the status event
        time.sleep(0.03)  # spread the writes over the rotation
    agent.stdin.close()
    agent.wait(timeout=60)
    _, err = rotation.communicate(timeout=300)
    assert rotation.returncode == 0, err
    assert statuses == ["ok"] * 60
    assert state(vault)["by_key"] == {"vk-2": 1560}  # none lost, all under the new key
    opens(1560)


@SQLITE_ONLY  # a usage error: no database is read, no vault needed
@pytest.mark.parametrize("batch", ["0", "abc"])
def test_rotate_rejects_bad_batch_sizes(cli_env: dict[str, str], batch: str) -> None:
    done = run(cli_env, "keys", "rotate", "--batch-size", batch)
    assert done.returncode == 2 and "batch-size" in done.stderr


@SQLITE_ONLY
# The script's own logic (usage, dry run, --vault-key, --retire-old's loop) on the file
# provider, which drops an old master key as PKCS#11 does: each provider's rotation and
# retirement are the EACH_PROVIDER tests above. On this module's PKCS#11 it was the slowest
# test of the suite (36 s: every command the script runs is a new interpreter and login);
# on the file provider still the slowest of the module, so the script's eight commands are
# forked (`fork_client`): the script, its `_venv` and its shell pipeline run as they are.
@pytest.mark.key_providers("file")
def test_rotate_master_key_script(vault: Vault, cli_env: dict[str, str]) -> None:
    script = str(Path(__file__).parents[1] / "scripts" / "rotate-master-key")
    fill(vault, 10)
    usage = subprocess.run([script, "--bogus"], capture_output=True, text=True, env=cli_env)
    assert usage.returncode == 2 and usage.stderr.startswith("usage:")
    before = state(vault)
    forked = script_env(cli_env)
    args = [script, "--dry-run", "--vault-key"]
    dry = subprocess.run(args, capture_output=True, text=True, env=forked)
    assert dry.returncode == 0 and "would rotate the master key, then rewrap 1 vault key;" in (
        dry.stdout
    )
    assert "would make a new vault key, then rewrap 13 wrapped keys" in dry.stdout
    assert state(vault) == before
    args = [script, "--vault-key", "--retire-old"]
    done = subprocess.run(args, capture_output=True, text=True, env=forked)
    assert done.returncode == 0, done.stderr
    assert "retired vault key vk-1" in done.stdout
    after = state(vault)
    assert after["by_key"] == {"vk-2": 10}
    assert ("vk-1", False, True) in after["vault_keys"]
    status = json_of(run(cli_env, "keys", "status", "--json"))
    old_masters = [m for m in status["master_keys"] if not m["current"]]
    if open_provider(load_settings()).name != "aws-kms":
        assert old_masters == []  # the old master key is gone from the provider too
