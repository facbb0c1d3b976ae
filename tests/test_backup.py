"""Backups and restores (issue 40), on SQLite and PostgreSQL: a backup taken while writers
write restores every accepted configure once, verifies, opens; a tampered, truncated or
half-written backup is refused; a restore crosses SQLite and PostgreSQL both ways; a
restore over a newer witness needs the operator's explicit step and is audited."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, delete, insert, select, text, update

from cli_support import CLI, run_cli
from test_rotation import fill
from toolkit_vault.access.principals import Principal
from toolkit_vault.backup import (
    BackupError,
    create_backup,
    resolve_settings,
    restore_backup,
    verify_backup,
)
from toolkit_vault.backup.archive import Reader
from toolkit_vault.backup.check import load_rows
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.models import AuditEvent, ConfigVersion, CurrentConfig
from toolkit_vault.store.snapshots import TABLES, binary_columns, scratch_store
from toolkit_vault.store.transactions import _MAX_ATTEMPTS

pytestmark = pytest.mark.key_providers("file")
AGENT = Principal("local", "agent")
CANARY = "tkv-canary-backup-5e1d"


def request(conn: A2EConnection, message: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in conn.handle_raw(json.dumps(message))]


def session(vault: Vault) -> tuple[A2EConnection, str]:
    conn = connect(vault, AGENT)
    response = request(conn, {"type": "handshake/req", "capabilities": ["toolkits"]})[0]
    return conn, response["session_id"]


def configure(conn: A2EConnection, n: int) -> str:
    config = {
        "endpoint": "https://api.example.test",
        "api_key": f"{CANARY}-{n}",
        "auth": {"user": "alice", "password": f"{CANARY}-pw-{n}"},
    }
    reply = request(
        conn, {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
    )
    return str(reply[0].get("status"))


def header_of(path: Path) -> Any:
    with path.open("rb") as handle:
        return Reader(handle).header


def other_database(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """An empty database of the other kind: PostgreSQL for a SQLite vault, and back."""
    if database_url.startswith("sqlite"):
        url: str = request.getfixturevalue("postgres_url")
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
        engine.dispose()
        return url
    return f"sqlite:///{tmp_path / 'restored' / 'vault.db'}"


def restored_home(
    home: VaultSettings, tmp_path: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A new, empty home holding only a copy of the master key file (the operator's step)."""
    new = tmp_path / "restored"
    new.mkdir(mode=0o700, exist_ok=True)
    shutil.copy2(home.home / "master-keys.json", new / "master-keys.json")
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(new))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", target)
    return new


def test_a_backup_during_a_soak_restores_every_accepted_configure_once_across_databases(
    vault: Vault,
    home: VaultSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    accepted: list[tuple[str, int, float, float]] = []  # (session, n, started, answered)
    stop = threading.Event()
    lock = threading.Lock()

    def writer() -> None:
        conn, sid = session(vault)
        n = 0
        while not stop.is_set():
            n += 1
            started = time.monotonic()
            if configure(conn, n) == "ok":
                with lock:
                    accepted.append((sid, n, started, time.monotonic()))

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    # More rows than a write's tries (`_MAX_ATTEMPTS`) before the backup: serials a restore
    # left behind them then fail the write at the end, not only delay it until a try passes.
    deadline = time.monotonic() + 30
    while len(accepted) < 2 * _MAX_ATTEMPTS and time.monotonic() < deadline:
        time.sleep(0.05)
    file = tmp_path / "vault.tkvb"
    before = time.monotonic()
    report = create_backup(home, file)
    after = time.monotonic()
    time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join()
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert CANARY.encode() not in file.read_bytes()  # ciphertext stays ciphertext

    verified = verify_backup(file, resolve_settings(header_of(file)))
    assert verified.ok, verified.audit
    assert verified.versions["failed"] == 0

    target = other_database(home.database_url, tmp_path, request)
    restored_home(home, tmp_path, target, monkeypatch)
    assert "--key-provider file" in _refused(lambda: resolve_settings(header_of(file)))
    done = restore_backup(file, resolve_settings(header_of(file), "file"))
    assert done.restored and done.backup.header.source != target.split(":")[0].split("+")[0]

    again = open_vault(load_settings())
    try:
        with again.store.engine.connect() as db:
            rows = db.execute(
                select(ConfigVersion.session_id, ConfigVersion.version).where(
                    ConfigVersion.toolkit_name == "secretive"
                )
            ).all()
            last = db.execute(select(AuditEvent.action).order_by(AuditEvent.seq.desc())).first()
        present = {(s, v) for s, v in rows}
        assert len(present) == len(rows)  # each once
        per_session: dict[str, int] = {}
        for sid, _n, _started, answered in accepted:
            if answered < before:  # accepted before the snapshot began: must be there
                per_session[sid] = per_session.get(sid, 0) + 1
        assert per_session  # the writers were writing before and during the snapshot
        for sid, count in per_session.items():
            assert {(sid, v) for v in range(1, count + 1)} <= present
        late = [a for a in accepted if a[2] > after]  # begun after the backup ended: absent
        assert all(a[0:2] not in present for a in late)
        assert len(present) <= len(accepted)
        assert report.rows["config_versions"] == len(rows)
        checked = again.check()
        assert checked["ok"], checked
        assert checked["failed"] == 0 and checked["intact"] == len(rows)
        assert again.verify_audit().ok
        assert last is not None and last.action == "backup_restored"
        fresh, _ = session(again)  # the restored vault takes writes (PostgreSQL's serials moved on)
        assert configure(fresh, 1) == "ok"
    finally:
        again.store.engine.dispose()


def _refused(work: Any) -> str:
    with pytest.raises(BackupError) as caught:
        work()
    return str(caught.value)


def not_base64(line: bytes) -> bytes:
    """A row line whose first binary column holds a character base64 has not."""
    row = json.loads(line)
    column = binary_columns(row["t"]).index(True)
    row["r"][column] = "!" + row["r"][column]
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"


def tampered_copies(file: Path, tmp_path: Path) -> dict[str, Path]:
    data = file.read_bytes()
    lines = data.splitlines(keepends=True)
    copies = {
        "truncated": data[: len(data) // 2],
        "no trailer": b"".join(lines[:-1]),
        "row dropped": b"".join(lines[:3] + lines[4:]),
        "flipped byte": data[:200] + bytes([data[200] ^ 1]) + data[201:],
        "rows swapped": b"".join([lines[0], lines[2], lines[1], *lines[3:]]),
        "trailer forged": b"".join(lines[:-1])
        + json.dumps({"rows": json.loads(lines[-1])["rows"], "mac": "00" * 32}).encode()
        + b"\n",
        "extra row": b"".join([*lines[:-1], lines[-2], lines[-1]]),
        "bytes not base64": b"".join([lines[0], not_base64(lines[1]), *lines[2:]]),
    }
    paths = {}
    for name, content in copies.items():
        path = tmp_path / f"{name.replace(' ', '-')}.tkvb"
        path.write_bytes(content)
        paths[name] = path
    return paths


def test_a_tampered_or_truncated_backup_is_refused_by_verify_and_restore(
    vault: Vault,
    home: VaultSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cli_env: dict[str, str],
) -> None:
    file, settings = three_configures_backed_up(vault, home, tmp_path)
    assert verify_backup(file, settings).ok
    copies = tampered_copies(file, tmp_path)
    for path in copies.values():
        with pytest.raises(BackupError):
            verify_backup(path, settings)
    for name in ("truncated", "trailer forged"):  # the command says so in one line
        done = run_cli(("backup", "verify", str(copies[name])), cli_env)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, name
        assert CANARY not in done.stderr + done.stdout
    target = f"sqlite:///{tmp_path / 'restored' / 'vault.db'}"
    restored_home(home, tmp_path, target, monkeypatch)
    for name in ("truncated", "flipped byte", "trailer forged", "extra row"):
        with pytest.raises(BackupError):
            restore_backup(copies[name], resolve_settings(header_of(file), "file"))
        engine = create_engine(target)
        with engine.connect() as db:  # nothing was written
            tables = db.execute(text("select name from sqlite_master where type='table'")).all()
            if tables:
                assert db.execute(select(ConfigVersion)).first() is None, name
        engine.dispose()


def test_a_row_the_scratch_copy_refuses_refuses_the_backup_and_its_indexes_stay(
    vault: Vault, home: VaultSettings, tmp_path: Path
) -> None:
    conn, _ = session(vault)
    assert configure(conn, 1) == "ok"
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    lines = file.read_bytes().splitlines(keepends=True)
    at = {json.loads(line).get("t"): n for n, line in enumerate(lines[1:-1], 1)}
    dangling = json.loads(lines[at["config_versions"]])
    dangling["r"][TABLES["config_versions"].index("session_id")] = "no-such-session"
    refused_copies = (
        lines[: at["sessions"] + 1] + lines[at["sessions"] :],  # a duplicate key
        [  # a foreign key naming no row
            *lines[: at["config_versions"]],
            json.dumps(dangling, separators=(",", ":")).encode() + b"\n",
            *lines[at["config_versions"] + 1 :],
        ],
    )
    indexes = "select name from sqlite_master where type = 'index' order by name"
    with scratch_store() as store:
        with store.engine.connect() as db:
            before = db.execute(text(indexes)).scalars().all()
        for content in refused_copies:
            path = tmp_path / "refused.tkvb"
            path.write_bytes(b"".join(content))
            with path.open("rb") as handle, pytest.raises(BackupError, match="IntegrityError"):
                load_rows(Reader(handle), store)
        with file.open("rb") as handle:  # nothing stayed of the refused loads
            load_rows(Reader(handle), store)
        with store.engine.connect() as db:
            assert db.execute(text(indexes)).scalars().all() == before
    assert any(name.startswith("ix_") for name in before)


def test_a_backup_of_another_vault_does_not_verify(
    vault: Vault, home: VaultSettings, tmp_path: Path
) -> None:
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    lines = file.read_bytes().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["vault_id"] = "someone-else"
    forged = tmp_path / "forged.tkvb"
    first = json.dumps(header, separators=(",", ":")).encode() + b"\n"
    forged.write_bytes(first + b"".join(lines[1:]))
    with pytest.raises(BackupError, match="MAC"):
        verify_backup(forged, resolve_settings(header_of(file)))


def test_restore_over_a_newer_witness_needs_the_explicit_step_and_is_audited(
    vault: Vault, home: VaultSettings, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    conn, _ = session(vault)
    assert configure(conn, 1) == "ok"
    file = tmp_path / "old.tkvb"
    create_backup(home, file)
    for n in range(2, 5):
        assert configure(conn, n) == "ok"
    vault.store.witness.flush()  # type: ignore[union-attr]
    vault.store.engine.dispose()
    # The database is lost; the home (its witness) is not.
    _empty(home.database_url)

    dry = run_cli(("restore", str(file), "--dry-run", "--json"), cli_env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["restored"] is False and plan["needs_over_newer_witness"] is True
    assert plan["lost_event_count"] >= 3  # the three configures since the backup
    refused = run_cli(("restore", str(file), "--yes"), cli_env)
    assert refused.returncode == 1 and "--over-newer-witness" in refused.stderr
    done = run_cli(("restore", str(file), "--yes", "--over-newer-witness", "--json"), cli_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["restored"] is True

    again = open_vault(load_settings())
    try:
        assert again.verify_audit().ok
        with again.store.engine.connect() as db:
            event = db.execute(select(AuditEvent).order_by(AuditEvent.seq.desc())).first()
        assert event is not None and event.action == "backup_restored"
        details = json.loads(event.details)
        assert details["over_newer_witness"] is True
        assert details["witness_seq"] > details["backup_seq"]
    finally:
        again.store.engine.dispose()
    # A second restore into the (now full) database is refused.
    full = run_cli(("restore", str(file), "--yes", "--over-newer-witness"), cli_env)
    assert full.returncode == 1 and "not empty" in full.stderr


def _empty(url: str) -> None:
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sigkill_during_create_leaves_no_file_that_verifies(
    vault: Vault, home: VaultSettings, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    fill(vault, 3000)  # a backup of a few megabytes: long enough to be killed while written
    settings = resolve_settings(header_of(_one_backup(home, tmp_path)))
    out = tmp_path / "out"
    out.mkdir()
    for attempt in range(3):
        process = subprocess.Popen(  # a real process: a signal needs one
            [CLI, "backup", "create", str(out / f"killed-{attempt}.tkvb")],
            env=cli_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if any(_size(path) for path in out.iterdir()):  # bytes are being written: now
                break
            time.sleep(0.001)
        process.send_signal(signal.SIGKILL)
        process.wait()
    left = sorted(out.iterdir())
    assert len(left) < 3  # killed mid-write at least once: that attempt left nothing at all
    for path in left:  # an attempt killed after its file was named: the whole file
        assert not path.name.startswith(".")
        assert verify_backup(path, settings).ok


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def three_configures_backed_up(
    vault: Vault, home: VaultSettings, tmp_path: Path
) -> tuple[Path, VaultSettings]:
    """A backup (good.tkvb) of one session's three configures, and the settings that read it."""
    conn, _ = session(vault)
    for n in range(3):
        assert configure(conn, n) == "ok"
    file = tmp_path / "good.tkvb"
    create_backup(home, file)
    return file, resolve_settings(header_of(file))


def _one_backup(home: VaultSettings, tmp_path: Path) -> Path:
    file = tmp_path / "reference.tkvb"
    create_backup(home, file)
    return file


def test_verify_names_the_master_key_it_needs(
    vault: Vault, home: VaultSettings, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    file = tmp_path / "vault.tkvb"
    done = run_cli(("backup", "create", str(file), "--json"), cli_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"]["vault_keys"] == 1
    nowhere = run_cli(("backup", "create", str(tmp_path / "no" / "such" / "dir.tkvb")), cli_env)
    assert nowhere.returncode == 1 and "cannot write a backup in" in nowhere.stderr
    (home.home / "master-keys.json").rename(tmp_path / "elsewhere.json")
    missing = run_cli(("backup", "verify", str(file)), cli_env)
    assert missing.returncode == 1
    assert "kek-1" in missing.stderr, missing.stderr
    os.rename(tmp_path / "elsewhere.json", home.home / "master-keys.json")
    ok = run_cli(("backup", "verify", str(file), "--json"), cli_env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True


def test_a_backup_refuses_a_vault_that_is_not_believed(
    vault: Vault, home: VaultSettings, tmp_path: Path
) -> None:
    with vault.store.engine.begin() as db:
        db.execute(text("UPDATE audit_events SET actor = 'mallory' WHERE seq = 1"))
    with pytest.raises(VaultError, match="not believed"):
        create_backup(home, tmp_path / "vault.tkvb")
    assert not (tmp_path / "vault.tkvb").exists()


# -- issue 48: a restore proves the backup is this vault's, and its chain passes through the
# witnessed head --


def _home_with_key(home: VaultSettings, path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new home at `path` holding a copy of `home`'s master key file (one KMS key serving
    several vaults); the environment points at it. Returns its database URL."""
    path.mkdir(mode=0o700)
    shutil.copy2(home.home / "master-keys.json", path / "master-keys.json")
    url = f"sqlite:///{path / 'vault.db'}"
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(path))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", url)
    return url


def _back_home(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKIT_VAULT_HOME", str(home.home))
    monkeypatch.setenv("TOOLKIT_VAULT_DATABASE_URL", home.database_url)


def test_a_backup_of_another_vault_with_the_same_master_key_is_refused(
    vault: Vault, home: VaultSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit_vault.bootstrap import init_vault

    conn, _ = session(vault)
    assert configure(conn, 1) == "ok"
    vault.store.witness.flush()  # type: ignore[union-attr]
    vault.store.engine.dispose()
    _home_with_key(home, tmp_path / "other", monkeypatch)
    init_vault(load_settings("file"))  # another vault, the same master key
    other = open_vault(load_settings())
    try:
        other_conn, _ = session(other)
        for n in range(6):  # its chain is longer than the production witness
            assert configure(other_conn, n) == "ok"
    finally:
        other.store.engine.dispose()
    file = tmp_path / "other.tkvb"
    create_backup(load_settings(), file)
    _back_home(home, monkeypatch)
    _empty(home.database_url)  # production's database is lost; its home is not
    recorded = json.loads(home.record_path.read_text())["vault_id"]
    assert header_of(file).vault_id != recorded
    with pytest.raises(VaultError, match="another vault") as caught:
        restore_backup(file, resolve_settings(header_of(file)), over_newer_witness=True)
    assert recorded in str(caught.value)
    plan = restore_backup(file, resolve_settings(header_of(file)), dry_run=True).as_json()
    assert plan["other_vault"] is True and plan["fork"] is True
    said = run_cli(("restore", str(file), "--yes", "--over-newer-witness"), _env(home))
    assert said.returncode == 1 and said.stderr.count("\n") == 1 and "another vault" in said.stderr
    assert json.loads(home.record_path.read_text())["vault_id"] == recorded


def test_a_fork_is_refused_and_only_restored_on_purpose_named_as_a_fork(
    vault: Vault, home: VaultSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit_vault.access.principals import authenticate, create_token

    _, token = create_token(vault.store, "agent", "drill-sees")
    conn, sid = session(vault)
    assert configure(conn, 1) == "ok"
    start = tmp_path / "start.tkvb"
    create_backup(home, start)
    # A drill copy restored elsewhere keeps writing, far beyond production.
    _home_with_key(home, tmp_path / "drill", monkeypatch)
    restore_backup(start, resolve_settings(header_of(start), "file"))
    drill = open_vault(load_settings())
    try:
        drill_conn, _ = session(drill)
        for n in range(8):
            assert configure(drill_conn, n) == "ok"
    finally:
        drill.store.engine.dispose()
    forked = tmp_path / "drill.tkvb"
    create_backup(load_settings(), forked)
    _back_home(home, monkeypatch)
    # Production moves on: a revocation and a purge; then its database is lost.
    revoked = run_cli(("tokens", "revoke", "drill-sees"), _env(home))
    assert revoked.returncode == 0, revoked.stderr
    vault.purge("operator", sid)
    vault.store.witness.flush()  # type: ignore[union-attr]
    latest = tmp_path / "latest.tkvb"
    create_backup(home, latest)
    vault.store.engine.dispose()
    witnessed = Reader(latest.open("rb")).header.head
    assert witnessed is not None and header_of(forked).head[0] > witnessed[0]  # type: ignore[index]
    _empty(home.database_url)

    with pytest.raises(VaultError, match="fork"):
        restore_backup(forked, resolve_settings(header_of(forked)))
    plan = restore_backup(forked, resolve_settings(header_of(forked)), dry_run=True).as_json()
    assert plan["fork"] is True and plan["needs_over_newer_witness"] is True
    assert plan["other_vault"] is False and plan["lost_event_count"] is None
    dry = run_cli(("restore", str(forked), "--dry-run"), _env(home))
    assert dry.returncode == 0 and "the backup is a fork" in dry.stdout, dry.stdout + dry.stderr

    done = restore_backup(latest, resolve_settings(header_of(latest)))  # its own: restores
    assert done.restored and not done.as_json()["fork"]
    again = open_vault(load_settings())
    try:
        assert authenticate(again.store, token) is None  # the revoked token stays revoked
        with again.store.engine.connect() as db:
            rows = db.execute(
                select(ConfigVersion.status, ConfigVersion.wrapped_dek).where(
                    ConfigVersion.session_id == sid
                )
            ).all()
        assert rows and all(s == "purged" and w is None for s, w in rows)  # never unsealed
    finally:
        again.store.engine.dispose()

    _empty(home.database_url)
    done = restore_backup(forked, resolve_settings(header_of(forked)), over_newer_witness=True)
    assert done.restored and done.as_json()["fork"] is True
    again = open_vault(load_settings())
    try:
        assert again.verify_audit().ok
        with again.store.engine.connect() as db:
            event = db.execute(select(AuditEvent).order_by(AuditEvent.seq.desc())).first()
        assert event is not None and event.action == "backup_restored"
        assert json.loads(event.details)["fork"] is True
    finally:
        again.store.engine.dispose()


def _env(home: VaultSettings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env["TOOLKIT_VAULT_HOME"] = str(home.home)
    env["TOOLKIT_VAULT_DATABASE_URL"] = home.database_url
    return env


def test_restore_into_a_home_without_a_witness_says_so(
    vault: Vault, home: VaultSettings, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    vault.store.engine.dispose()
    new = tmp_path / "new-home"
    new.mkdir(mode=0o700)
    shutil.copy2(home.home / "master-keys.json", new / "master-keys.json")
    env = {
        **cli_env,
        "TOOLKIT_VAULT_HOME": str(new),
        "TOOLKIT_VAULT_DATABASE_URL": f"sqlite:///{new / 'vault.db'}",
    }
    done = run_cli(("restore", str(file), "--yes", "--key-provider", "file"), env)
    assert done.returncode == 0, done.stderr
    assert "None" not in done.stdout and "had no witness" in done.stdout, done.stdout


def test_a_dry_run_into_a_new_home_creates_nothing(
    vault: Vault, home: VaultSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run only looks: a target SQLite database that is not there yet stays not there
    (opening its URL used to create the empty file), and the home gains no file."""
    conn, _ = session(vault)
    assert configure(conn, 1) == "ok"
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    url = _home_with_key(home, tmp_path / "new", monkeypatch)
    before = sorted(p.name for p in (tmp_path / "new").iterdir())
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    env.update(TOOLKIT_VAULT_HOME=str(tmp_path / "new"), TOOLKIT_VAULT_DATABASE_URL=url)
    dry = run_cli(("restore", str(file), "--dry-run", "--json", "--key-provider", "file"), env)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["restored"] is False and plan["database_empty"] is True, plan
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == before
    assert not Path(url.removeprefix("sqlite:///")).exists()


# -- issue 53: `backup verify` opens each version as its audit verification reads it --


def put_back_edit_and_swap(
    vault: Vault, session_id: str, purged_id: str
) -> dict[int, dict[str, Any]]:
    """Three bad rows, as a database writer makes them: `purged_id`'s versions and pointer
    purged and put back as they were; `session_id`'s version 1 edited in a column its MAC
    covers; its version 2's first value replaced by version 3's and re-MACed with the state
    key. `session_id`'s rows as they were, by version."""
    store = vault.store
    with store.engine.connect() as db:
        copied = [dict(r._mapping) for r in db.execute(select(ConfigVersion))]
        pointers = [dict(r._mapping) for r in db.execute(select(CurrentConfig))]
    vault.purge("operator", purged_id)
    ours = {r["version"]: r for r in copied if r["session_id"] == session_id}
    with store.engine.begin() as db:
        db.execute(delete(CurrentConfig).where(CurrentConfig.session_id == purged_id))
        db.execute(delete(ConfigVersion).where(ConfigVersion.session_id == purged_id))
        db.execute(insert(ConfigVersion), [r for r in copied if r["session_id"] == purged_id])
        db.execute(insert(CurrentConfig), [r for r in pointers if r["session_id"] == purged_id])
        db.execute(
            update(ConfigVersion).where(ConfigVersion.id == ours[1]["id"]).values(message="edited")
        )
        forged = dict(ours[2])
        sealed = json.loads(forged["sealed_secrets"])
        first = next(iter(sealed))
        sealed[first] = json.loads(ours[3]["sealed_secrets"])[first]  # another version's
        forged["sealed_secrets"] = json.dumps(sealed)
        forged["mac"] = store.mac("config_versions", forged)
        db.execute(
            update(ConfigVersion)
            .where(ConfigVersion.id == forged["id"])
            .values(sealed_secrets=forged["sealed_secrets"], mac=forged["mac"])
        )
    return ours


def test_backup_verify_names_each_version_that_fails_its_mac_decryption_or_the_chain(
    vault: Vault, home: VaultSettings, tmp_path: Path
) -> None:
    """Rows a database writer changed before the backup was taken: one edited in a column
    its MAC covers (not opened: it fails its MAC), one whose ciphertext was replaced and
    re-MACed with the state key (its MAC holds, it does not decrypt), one the chain purged
    and put back as it was. Each is named once, with its reason, and the intact one counts
    as intact: every version is checked, once. A full `check` (each version opened as its
    audit part reads it) names them as the check that reads them apart does."""
    conn, session_id = session(vault)
    for n in range(3):
        assert configure(conn, n) == "ok"
    other, purged_id = session(vault)
    assert configure(other, 9) == "ok"
    put_back_edit_and_swap(vault, session_id, purged_id)
    expected = {
        (session_id, 1): "fails its integrity check",
        (session_id, 2): "does not decrypt",
        (purged_id, 1): "was purged (the audit chain says so); its row was put back",
    }
    counts = {"versions": 4, "intact": 1, "failed": 3, "no_ciphertext": 0}
    for checked in (vault.check(full=True), vault.check()):  # one pass; read apart
        assert not checked["ok"] and {k: checked[k] for k in counts} == counts
        assert {
            (v["session_id"], v["version"]): v["reason"] for v in checked["failed_versions"]
        } == expected
    file = tmp_path / "vault.tkvb"
    create_backup(home, file)
    verified = verify_backup(file, resolve_settings(header_of(file)))
    assert not verified.ok
    assert verified.versions == counts
    reasons = {(v["session_id"], v["version"]): v["reason"] for v in verified.failed_versions}
    assert reasons == expected
    assert CANARY not in json.dumps(verified.as_json())
