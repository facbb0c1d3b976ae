"""Key rotation, retirement and the decrypt check, on SQLite and PostgreSQL, in real processes."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select, update

from toolkit_vault import crypto
from toolkit_vault.crypto import RecordContext
from toolkit_vault.integrity import POINTERS, VERSIONS
from toolkit_vault.keys import provider_for
from toolkit_vault.models import ConfigVersion, CurrentConfig, MasterKey
from toolkit_vault.records import AuditDraft, VersionDraft
from toolkit_vault.rotation import rotate_keys, write_rewraps
from toolkit_vault.service import Vault
from toolkit_vault.settings import load_settings

CLI = str(Path(sys.executable).parent / "toolkit-vault")
CANARY = "tkv-canary-rotation"


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, env=env, timeout=300, input=""
    )


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
        by_kek = dict(
            conn.execute(
                select(ConfigVersion.kek_id, func.count()).group_by(ConfigVersion.kek_id)
            ).all()
        )
        versions = conn.execute(
            select(ConfigVersion.session_id, ConfigVersion.version, ConfigVersion.dek_id)
        ).all()
        keks = conn.execute(select(MasterKey.kek_id, MasterKey.is_primary)).all()
    return {
        "by_kek": by_kek,
        "versions": sorted(map(tuple, versions)),
        "keks": sorted(map(tuple, keks)),
    }


def json_of(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_rotate_check_status_retire_at_10000_versions(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    fill(vault, 10_000)
    before = state(vault)
    assert "the primary" in run(cli_env, "keys", "retire", "kek-1").stderr
    report = json_of(run(cli_env, "keys", "rotate", "--json", "--batch-size", "1000"))
    assert report == {
        "primary": "kek-2",
        "previous": ["kek-1"],
        "resumed": False,
        "rewrapped": 10_000,
        "internal_rewrapped": 3,
        "failed": [],
    }
    after = state(vault)
    assert after["by_kek"] == {"kek-2": 10_000}
    assert after["versions"] == before["versions"]  # identity kept: same dek ids, no doubles
    checked = json_of(run(cli_env, "check", "--json"))
    assert (checked["versions"], checked["intact"], checked["failed"]) == (10_000, 10_000, 0)
    status = {k["kek_id"]: k for k in json_of(run(cli_env, "keys", "status", "--json"))["keys"]}
    assert status["kek-2"]["primary"] and status["kek-2"]["wrapped_keys"] == 10_003
    assert status["kek-1"]["wrapped_keys"] == 0
    retired = json_of(run(cli_env, "keys", "retire", "kek-1", "--json"))
    assert retired == {"kek_id": "kek-1", "retired": True, "removed_from_provider": True}
    key_doc = json.loads((Path(cli_env["TOOLKIT_VAULT_HOME"]) / "master-keys.json").read_text())
    assert sorted(key_doc["keys"]) == ["kek-2"]
    assert json_of(run(cli_env, "check", "--json"))["intact"] == 10_000
    for done in (run(cli_env, "keys", "status"), run(cli_env, "check")):
        assert CANARY not in done.stdout + done.stderr


def test_rewrap_writes_only_rows_still_holding_the_verified_key(vault: Vault) -> None:
    """The batch `UPDATE` is compare-and-set on (id, old kek, old wrapped key): a row that
    changed since it was read and verified is left alone."""
    fill(vault, 2)
    columns = (ConfigVersion.id, ConfigVersion.kek_id, ConfigVersion.wrapped_dek)
    with vault.store.engine.connect() as conn:
        (a, kek, wrapped), (b, _, _) = conn.execute(select(*columns).order_by(ConfigVersion.id))
    assert kek is not None and wrapped is not None
    updates = [(a, kek, wrapped, kek, b"new-a"), (b, kek, wrapped, kek, b"new-b")]
    vault.store.retrying(partial(write_rewraps, updates=updates))
    with vault.store.engine.connect() as conn:
        stored = dict(conn.execute(select(ConfigVersion.id, ConfigVersion.wrapped_dek)).all())
    assert stored[a] == b"new-a"
    assert stored[b] not in (b"new-b", b"new-a", None)


def test_rotation_never_rewraps_a_row_whose_values_do_not_open(vault: Vault) -> None:
    """The wrapped key of the middle row still unwraps, but one of its values is corrupt:
    rotation must prove every value opens before it writes the row, so it leaves it."""
    fill(vault, 3)
    with vault.store.engine.begin() as conn:
        middle = conn.execute(select(ConfigVersion).where(ConfigVersion.version == 2)).one()
        sealed = json.loads(middle.sealed_secrets)
        envelope = bytearray(base64.b64decode(sealed["/api_key"]))
        envelope[-1] ^= 1
        sealed["/api_key"] = base64.b64encode(bytes(envelope)).decode()
        conn.execute(
            update(ConfigVersion)
            .where(ConfigVersion.id == middle.id)
            .values(sealed_secrets=json.dumps(sealed))
        )
    settings = load_settings()
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    report = rotate_keys(vault.store, provider)
    assert (report.rewrapped, [f["version"] for f in report.failed]) == (2, [2])
    with vault.store.engine.connect() as conn:
        rows = conn.execute(select(ConfigVersion).order_by(ConfigVersion.version)).all()
    assert [r.kek_id for r in rows] == ["kek-2", "kek-1", "kek-2"]
    assert rows[1].wrapped_dek == middle.wrapped_dek


def test_retire_refuses_while_a_row_uses_the_key(vault: Vault, cli_env: dict[str, str]) -> None:
    fill(vault, 20)
    json_of(run(cli_env, "keys", "rotate", "--json"))
    with vault.store.engine.begin() as conn:  # a straggler still wrapped under kek-1
        row = conn.execute(select(ConfigVersion.id)).scalars().first()
        conn.execute(update(ConfigVersion).where(ConfigVersion.id == row).values(kek_id="kek-1"))
    done = run(cli_env, "keys", "retire", "kek-1")
    assert done.returncode == 1
    assert "kek-1 still protects 1 wrapped keys" in done.stderr


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
    rotated = run(cli_env, "keys", "rotate", "--json")  # never writes what it cannot read
    assert rotated.returncode == 1
    assert json.loads(rotated.stdout)["failed"][0]["version"] == 3
    assert state(vault)["by_kek"] == {"kek-2": 4, "kek-1": 1}


def _kill_when(
    env: dict[str, str], ready: Callable[[], bool], timeout: float = 120
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [CLI, "keys", "rotate", "--json", "--batch-size", "100"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + timeout
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc


def test_sigkill_at_several_points_then_rerun(vault: Vault, cli_env: dict[str, str]) -> None:
    fill(vault, 3000)
    before = state(vault)
    key_file = Path(cli_env["TOOLKIT_VAULT_HOME"]) / "master-keys.json"

    def rewrapped_at_least(n: int) -> Callable[[], bool]:
        return lambda: state(vault)["by_kek"].get("kek-2", 0) >= n

    _kill_when(cli_env, lambda: "kek-2" in key_file.read_text())  # key made, store untouched?
    _kill_when(cli_env, rewrapped_at_least(500))
    _kill_when(cli_env, rewrapped_at_least(1800))
    final = json_of(run(cli_env, "keys", "rotate", "--json"))
    assert final["primary"] == "kek-2" and final["failed"] == []
    after = state(vault)
    assert after["by_kek"] == {"kek-2": 3000}
    assert after["versions"] == before["versions"]
    assert after["keks"] == [("kek-1", False), ("kek-2", True)]
    assert sorted(json.loads(key_file.read_text())["keys"]) == ["kek-1", "kek-2"]
    assert json_of(run(cli_env, "check", "--json"))["intact"] == 3000


def test_configures_from_another_process_during_rotation(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    fill(vault, 3000)
    lines = [json.dumps({"type": "handshake/req", "capabilities": ["toolkits"]})]
    for n in range(60):
        config = {"endpoint": "https://x.test", "api_key": f"{CANARY}-live-{n}"}
        lines.append(
            json.dumps(
                {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
            )
        )
    agent = subprocess.Popen(
        [CLI, "stdio"], env=cli_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert agent.stdin is not None and agent.stdout is not None
    agent.stdin.write(lines[0] + "\n")
    agent.stdin.flush()
    assert json.loads(agent.stdout.readline())["type"] == "handshake/resp"  # ring loaded: kek-1
    rotation = subprocess.Popen(
        [CLI, "keys", "rotate", "--json", "--batch-size", "50"],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
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
    after = state(vault)
    assert after["by_kek"] == {"kek-2": 3060}  # none lost, all under the new key
    assert json_of(run(cli_env, "check", "--json"))["intact"] == 3060


@pytest.mark.parametrize("batch", ["0", "abc"])
def test_rotate_rejects_bad_batch_sizes(vault: Vault, cli_env: dict[str, str], batch: str) -> None:
    done = run(cli_env, "keys", "rotate", "--batch-size", batch)
    assert done.returncode == 2 and "batch-size" in done.stderr


def test_rotate_master_key_script(vault: Vault, cli_env: dict[str, str]) -> None:
    script = str(Path(__file__).parents[1] / "scripts" / "rotate-master-key")
    fill(vault, 10)
    usage = subprocess.run([script, "--bogus"], capture_output=True, text=True, env=cli_env)
    assert usage.returncode == 2 and usage.stderr.startswith("usage:")
    dry = subprocess.run([script, "--dry-run"], capture_output=True, text=True, env=cli_env)
    assert dry.returncode == 0 and "kek-1" in dry.stdout
    assert state(vault)["keks"] == [("kek-1", True)]
    done = subprocess.run([script, "--retire-old"], capture_output=True, text=True, env=cli_env)
    assert done.returncode == 0, done.stderr
    assert "retired kek-1" in done.stdout
    assert state(vault)["by_kek"] == {"kek-2": 10}
