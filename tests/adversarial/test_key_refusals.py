"""Key provider refusals end to end: each one clear line, exit 1, and no key generated.

tests/providers/ checks each refusal of the providers in memory, and tests/test_cli.py
the fail and null keyrings at `init`, a missing key file, a 0644 key file at `stdio` and a
mismatched env key. This adds, through the command line: the plaintext keyring at `init`;
the fail, null and plaintext keyrings on a home a secure keyring initialized; and a key file
that is group- or world-readable, a symlink, of the wrong length, not base64, or another
key, each for the service (`stdio`) and for the commands that write keys (`keys rotate`,
`init`). Nothing may change: key file, keyring entries, home, vault keys in the store.
Refusals do not depend on the database, so these run on SQLite only.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from adversarial_support import CLI, HERE
from click.testing import CliRunner, Result
from sqlalchemy import create_engine, select

from toolkit_vault.cli import main
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent, VaultKey

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
pytestmark = pytest.mark.key_providers("file")  # the local providers' own refusals
ERROR = "toolkit-vault: error: "


def run_all(jobs: list[tuple[dict[str, str], list[str]]]) -> list[subprocess.CompletedProcess[str]]:
    """Run CLI commands side by side (they only read); their results in order."""
    procs = [
        subprocess.Popen(
            [CLI, *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env, args in jobs
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def refusal(done: subprocess.CompletedProcess[str] | Result) -> str:
    """The one line a refused command prints: exit 1, nothing on stdout, no traceback."""
    code = done.returncode if isinstance(done, subprocess.CompletedProcess) else done.exit_code
    assert code == 1, (code, done.stdout, done.stderr)
    assert done.stdout == "" and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR), done.stderr
    return lines[0].removeprefix(ERROR)


def snapshot(home: Path, database: Path) -> dict[str, Any]:
    """Everything a refusal must leave alone: files, modes, symlinks, keys in the store."""
    files = {}
    for path in sorted(home.parent.rglob("*")):
        if path.name.endswith(("-wal", "-shm")):
            continue  # SQLite's own: any reader creates, checkpoints and removes them
        if path.is_symlink():
            content: str | bytes = os.readlink(path)
        else:
            content = path.read_bytes() if path.is_file() else b""
        files[str(path.relative_to(home.parent))] = (path.lstat().st_mode, content)
    engine = create_engine(f"sqlite:///{database}")
    with engine.connect() as db:
        keys = db.execute(
            select(VaultKey.key_id, VaultKey.wrapped_key, VaultKey.is_active, VaultKey.mac)
        ).all()
        events = db.execute(select(AuditEvent.seq)).all()
    engine.dispose()
    return {"files": files, "vault_keys": sorted(map(tuple, keys)), "events": len(events)}


def _doc(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _rewrite(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc))
    path.chmod(0o600)


def _symlink(path: Path) -> None:
    target = path.parent.parent / "elsewhere.json"
    shutil.copy2(path, target)
    path.unlink()
    path.symlink_to(target)


KEY_FILE_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "world-readable": (lambda p: p.chmod(0o644), "has mode 0644; it must be 0600"),
    "group-readable": (lambda p: p.chmod(0o640), "has mode 0640; it must be 0600"),
    "symlink": (_symlink, "is a symlink; refusing to follow it"),
    "wrong length": (
        lambda p: _rewrite(p, {**_doc(p), "keys": {"kek-1": base64.b64encode(bytes(16)).decode()}}),
        "key kek-1 must be 32 bytes, not 16",
    ),
    "not base64": (
        lambda p: _rewrite(p, {**_doc(p), "keys": {"kek-1": "not*base64!" * 4}}),
        "key kek-1 is not valid base64",
    ),
    "another key": (
        lambda p: _rewrite(
            p, {**_doc(p), "keys": {"kek-1": base64.b64encode(os.urandom(32)).decode()}}
        ),
        "vault key vk-1 does not open with key file",
    ),
}


@SQLITE_ONLY
def test_key_file_refusals(
    home: VaultSettings, cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases: dict[str, tuple[Path, dict[str, str]]] = {}
    for n, (name, (spoil, _)) in enumerate(KEY_FILE_CASES.items()):
        case_home = tmp_path / f"case-{n}" / "home"
        shutil.copytree(home.home, case_home, symlinks=True)
        spoil(case_home / "master-keys.json")
        env = {**cli_env, "TOOLKIT_VAULT_HOME": str(case_home)}
        env["TOOLKIT_VAULT_DATABASE_URL"] = f"sqlite:///{case_home / 'vault.db'}"
        cases[name] = (case_home, env)
    before = {name: snapshot(h, h / "vault.db") for name, (h, _) in cases.items()}

    services = run_all([(env, ["stdio"]) for _, env in cases.values()])
    for (name, (case_home, env)), done in zip(cases.items(), services, strict=True):
        expected = KEY_FILE_CASES[name][1]
        assert expected in refusal(done), name
        for variable in ("TOOLKIT_VAULT_HOME", "TOOLKIT_VAULT_DATABASE_URL"):
            monkeypatch.setenv(variable, env[variable])
        for command in (["keys", "rotate", "--json"], ["init"], ["check"]):
            assert expected in refusal(CliRunner().invoke(main, command)), (name, command)
        assert snapshot(case_home, case_home / "vault.db") == before[name], name


SECURE = "file_keyring.FileKeyring"
INSECURE = {
    "fail": "keyring.backends.fail.Keyring",
    "null": "keyring.backends.null.Keyring",
    "plaintext": "keyrings.alt.file.PlaintextKeyring",
}


@SQLITE_ONLY
def test_insecure_keyrings_are_refused_and_nothing_is_generated(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    keyring_file = tmp_path / "keyring.json"
    xdg = tmp_path / "xdg"  # where the plaintext backend would write its file
    xdg.mkdir()

    def env_for(home: Path, backend: str) -> dict[str, str]:
        return {
            **cli_env,
            "PYTHONPATH": os.pathsep.join([str(HERE), cli_env["PYTHONPATH"]]),
            "TOOLKIT_VAULT_HOME": str(home),
            "TOOLKIT_VAULT_DATABASE_URL": f"sqlite:///{home / 'vault.db'}",
            "PYTHON_KEYRING_BACKEND": backend,
            "TKV_TEST_KEYRING_FILE": str(keyring_file),
            "XDG_DATA_HOME": str(xdg),
        }

    home = tmp_path / "kr" / "home"
    (created,) = run_all([(env_for(home, SECURE), ["init"])])
    assert created.returncode == 0, created.stderr
    assert "master key: created OS keyring (FileKeyring)" in created.stderr
    entries = keyring_file.read_bytes()
    assert b"master-keys:" in entries
    before = snapshot(home, home / "vault.db")

    fresh = tmp_path / "fresh" / "home"
    jobs = [(env_for(fresh, INSECURE["plaintext"]), ["init"])]
    jobs += [
        (env_for(home, INSECURE["fail"]), ["stdio"]),
        (env_for(home, INSECURE["null"]), ["keys", "rotate"]),
        (env_for(home, INSECURE["plaintext"]), ["keys", "rotate"]),
    ]
    jobs.append((env_for(home, SECURE), ["toolkits", "list", "--json"]))
    *refused, still_opens = run_all(jobs)

    for done, (env, _) in zip(refused, jobs, strict=False):
        line = refusal(done)
        assert f"no secure OS keyring is available (found {env['PYTHON_KEYRING_BACKEND']})" in line
        assert "use --key-provider file" in line
    assert still_opens.returncode == 0, still_opens.stderr
    assert keyring_file.read_bytes() == entries  # no entry added, replaced or removed
    assert list(xdg.rglob("*")) == []  # the plaintext backend never wrote its file
    assert not fresh.exists() or list(fresh.rglob("*")) == []
    assert snapshot(home, home / "vault.db") == before
