"""History and purge as auditors and operators use them: real CLI processes, both databases."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from test_cli import run
from test_vault import CANARY, configure, handshake, listed, secret_config
from toolkit_vault.actors import shell_actor
from toolkit_vault.audit.history import history
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import UnknownSession, VaultError
from toolkit_vault.protocol import Message
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent, ConfigVersion

from tkv_test_plugins import SecretiveToolkit

SECRET_PATHS = ["/api_key", "/auth/password", "/headers/X-Api", "/tokens/0", "/tokens/1"]


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a failed command (the test plugins' broken entry point may
    add its warning before it: that is the registry's, not the command's)."""
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [x for x in done.stderr.strip().splitlines() if not x.startswith("WARNING ")]
    assert len(lines) == 1 and lines[0].startswith("toolkit-vault: error: "), done.stderr
    return lines[0]


def _history(cli_env: dict[str, str], *args: str) -> list[dict[str, Any]]:
    done = run(cli_env, "history", "--json", *args)
    assert done.returncode == 0, done.stderr
    versions: list[dict[str, Any]] = json.loads(done.stdout)["versions"]
    return versions


def _rows(vault: Vault, session: str) -> list[Any]:
    with vault.store.engine.connect() as db:
        return list(
            db.execute(
                select(ConfigVersion)
                .where(ConfigVersion.session_id == session)
                .order_by(ConfigVersion.id)
            )
        )


def _encodings(data: bytes) -> list[bytes]:
    return [
        data,
        base64.b64encode(data),
        base64.urlsafe_b64encode(data),
        data.hex().encode(),
        data.hex().upper().encode(),
    ]


def test_history_shows_which_secret_changed_and_never_a_value(
    vault: Vault, cli_env: dict[str, str]
) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    changed = secret_config()
    changed["auth"]["password"] = CANARY + "-rotated"
    configure(conn, "secretive", changed)

    first, second = _history(cli_env)
    assert [(v["session_id"], v["version"], v["current"]) for v in (first, second)] == [
        (session, 1, False),
        (session, 2, True),
    ]
    for entry in (first, second):
        assert entry["status"] == "ok" and entry["actor"] == "local"
        assert entry["toolkit_name"] == "secretive"
        assert entry["schema_digest"].startswith("sha256:")
        assert entry["time"].endswith("Z") and isinstance(entry["ts"], float)
        assert entry["public_config"]["auth"] == {"user": "alice"}
        assert sorted(entry["secret_fingerprints"]) == SECRET_PATHS
    before, after = first["secret_fingerprints"], second["secret_fingerprints"]
    assert before["/auth/password"] != after["/auth/password"]
    for path in set(SECRET_PATHS) - {"/auth/password"}:
        assert before[path] == after[path], path

    outputs = [
        run(cli_env, *args)
        for args in (
            ["history"],
            ["history", "--json", "--session", session, "--toolkit", "secretive"],
            ["audit", "verify"],
            ["audit", "verify", "--json"],
            ["tokens", "list", "--json"],
            ["toolkits", "list", "--json"],
            ["check", "--json"],
        )
    ]
    assert all(done.returncode == 0 for done in outputs[:6]), [o.stderr for o in outputs]
    assert "secretive" in outputs[0].stdout
    for done in outputs:
        assert CANARY not in done.stdout + done.stderr


def test_history_filters(vault: Vault, cli_env: dict[str, str]) -> None:
    conn_a, _ = handshake(vault)
    conn_b, session_b = handshake(vault)
    configure(conn_a, "filesystem", {"root_dir": "/tmp"})
    configure(conn_b, "secretive", secret_config())
    configure(conn_b, "filesystem", {"root_dir": "/srv"})
    assert [v["toolkit_name"] for v in _history(cli_env, "--session", session_b)] == [
        "secretive",
        "filesystem",
    ]
    only = _history(cli_env, "--session", session_b, "--toolkit", "filesystem")
    assert [(v["session_id"], v["public_config"]) for v in only] == [
        (session_b, {"root_dir": "/srv"})
    ]
    assert len(_history(cli_env, "--since", "2000-01-01")) == 3
    assert _history(cli_env, "--since", "2999-01-01T00:00:00Z") == []
    unknown = run(cli_env, "history", "--session", "no-such-session")
    assert "unknown session 'no-such-session'" in error_line(unknown)
    assert "cannot read 'yesterday' as a time" in error_line(
        run(cli_env, "history", "--since", "yesterday")
    )


def test_a_filter_holding_nul_matches_nothing(vault: Vault) -> None:
    """PostgreSQL text cannot hold NUL, and an HTTP query can carry one (schemathesis sent
    `session=%00` to `/v1/history`): such a filter matches no row instead of failing in the
    driver."""
    conn, session = handshake(vault)
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    assert history(vault.store, session="\x00") == []
    assert history(vault.store, session=session, toolkit="filesystem\x00") == []
    with pytest.raises(VaultError, match="no principal"):
        history(vault.store, principal="agent\x00")
    assert len(history(vault.store, session=session, toolkit="filesystem")) == 1


def test_purge_shreds_a_session(vault: Vault, home: VaultSettings, cli_env: dict[str, str]) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    configure(conn, "secretive", {**secret_config(), "mode": "partial"})
    configure(conn, "secretive", {**secret_config(), "mode": "fail"})
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    other_conn, other = handshake(vault)
    configure(other_conn, "secretive", secret_config("another-session-secret"))
    assert listed(conn) == {"filesystem": True, "secretive": True}
    old: list[bytes] = []
    for row in _rows(vault, session):
        if row.wrapped_dek is not None:
            old.append(bytes(row.wrapped_dek))
            for envelope in json.loads(row.sealed_secrets).values():
                old += [envelope.encode(), base64.b64decode(envelope)]
    assert len(old) == 3 + 2 * 2 * len(SECRET_PATHS)  # filesystem: a DEK, no envelope

    refused = run(cli_env, "purge", "--session", session)
    assert "--yes" in error_line(refused)
    assert "unknown session" in error_line(run(cli_env, "purge", "--session", "nope", "--yes"))
    done = run(cli_env, "purge", "--session", session, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    sqlite = home.database_url.startswith("sqlite")
    assert report == {
        "session_id": session,
        "scope": "session",
        "principal_id": "local",
        "toolkit_name": None,
        "versions": 4,
        "toolkits": ["filesystem", "secretive"],
        "unconfigured": ["filesystem", "secretive"],
        "files_scrubbed": True if sqlite else None,
    }

    for row in _rows(vault, session):
        assert row.status == "purged"
        assert (row.sealed_secrets, row.wrapped_dek, row.dek_id, row.kek_id) == (None,) * 4
        fingerprints = json.loads(row.secret_fingerprints)
        assert fingerprints == dict.fromkeys(fingerprints) and fingerprints.keys() <= set(
            SECRET_PATHS
        )
    assert all(row.status == "ok" and row.wrapped_dek for row in _rows(vault, other))
    assert listed(conn) == {"filesystem": False, "secretive": False}
    assert listed(other_conn)["secretive"] is True
    assert {v["status"] for v in _history(cli_env, "--session", session)} == {"purged"}
    with vault.store.engine.connect() as db:
        event = db.execute(select(AuditEvent).where(AuditEvent.action == "purge")).one()
    assert (event.actor, event.session_id, event.toolkit_name) == (shell_actor(), session, None)
    assert json.loads(event.details)["versions"] == 4
    verified = run(cli_env, "audit", "verify", "--json")
    assert verified.returncode == 0 and json.loads(verified.stdout)["ok"] is True
    again = run(cli_env, "purge", "--session", session, "--yes", "--json")
    assert json.loads(again.stdout)["versions"] == 0  # idempotent, and audited again

    SecretiveToolkit.received.clear()
    restarted = open_vault(home)
    resumed, _ = handshake(restarted, session)
    assert SecretiveToolkit.received == []  # nothing to re-initialize
    assert listed(resumed) == {"filesystem": False, "secretive": False}
    restarted.store.engine.dispose()
    vault.store.engine.dispose()
    if sqlite:
        files = [p for p in Path(home.home).rglob("*") if p.is_file()]
        assert any(p.name == "vault.db" for p in files)
        for path in files:
            data = path.read_bytes()
            for needle in _encodings(CANARY.encode()) + old:
                assert needle not in data, f"old secret material left in {path.name}"


def test_purge_of_one_toolkit_keeps_the_others(vault: Vault, cli_env: dict[str, str]) -> None:
    conn, session = handshake(vault)
    configure(conn, "secretive", secret_config())
    configure(conn, "filesystem", {"root_dir": "/tmp"})
    done = run(cli_env, "purge", "--session", session, "--toolkit", "secretive", "--yes")
    assert done.returncode == 0, done.stderr
    assert f"purged 1 version of session {session}, toolkit secretive" in done.stdout
    assert listed(conn) == {"filesystem": True, "secretive": False}
    statuses = {v["toolkit_name"]: v["status"] for v in _history(cli_env)}
    assert statuses == {"secretive": "purged", "filesystem": "ok"}


def test_vault_purge_forgets_live_instances_and_tells_the_session(vault: Vault) -> None:
    pushed: list[Message] = []
    conn, session = handshake(vault)
    watcher = connect(vault, conn.principal, pushed.append)
    watcher.handle_raw(
        json.dumps({"type": "handshake/req", "capabilities": ["toolkits"], "session_id": session})
    )
    configure(conn, "secretive", secret_config())
    pushed.clear()
    report = vault.purge("operator", session)
    assert report.unconfigured == ["secretive"]
    assert not any(key[0] == session for key in vault._active)
    assert [(e.type, getattr(e, "configured", None)) for e in pushed] == [
        ("toolkit/status/event", False)
    ]
    with pytest.raises(UnknownSession):
        vault.purge("operator", "no-such-session")
    out = configure(conn, "secretive", secret_config())  # the session carries on
    assert out[0]["status"] == "ok" and listed(conn)["secretive"] is True
    assert [v.version for v in _rows(vault, session)] == [1, 2]


@pytest.mark.parametrize("script", ["export-history", "verify-vault"])
def test_scripts_have_a_usage_line_and_exit_codes(script: str) -> None:
    path = Path(__file__).parents[1] / "scripts" / script
    shown = subprocess.run([path, "-h"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and shown.stdout.startswith(f"usage: scripts/{script}")
    wrong = subprocess.run([path, "--bogus"], capture_output=True, text=True, timeout=30)
    assert wrong.returncode == 2 and "unknown argument: --bogus" in wrong.stderr
