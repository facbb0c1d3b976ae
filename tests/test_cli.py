"""The command line as an operator uses it: real processes, exit codes, one-line errors."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from cli_support import run_cli
from toolkit_vault.keys.providers.document import KeyDocument
from toolkit_vault.keys.providers.env import ENV_KEYS

pytestmark = pytest.mark.key_providers("file")  # the local providers' files and variables


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env, timeout=60)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_init_refuses_an_insecure_keyring(fresh_env: dict[str, str], tmp_path: Path) -> None:
    for backend in ("keyring.backends.fail.Keyring", "keyring.backends.null.Keyring"):
        done = run({**fresh_env, "PYTHON_KEYRING_BACKEND": backend}, "init")
        assert "--key-provider file" in one_error_line(done)
    assert not (tmp_path / "fresh" / "master-keys.json").exists()


def test_init_with_a_file_key_is_idempotent(home: object, cli_env: dict[str, str]) -> None:
    key_file = Path(cli_env["TOOLKIT_VAULT_HOME"]) / "master-keys.json"
    before = key_file.read_bytes()
    done = run(cli_env, "init")
    assert done.returncode == 0, done.stderr
    assert f"master key: using key file {key_file}" in done.stderr
    assert key_file.read_bytes() == before
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    record = json.loads((key_file.parent / "vault.json").read_text())
    assert (
        record["key_provider"] == "file"
        and record["database_url"] == cli_env["TOOLKIT_VAULT_DATABASE_URL"]
    )
    assert "already uses the file key provider" in one_error_line(
        run(cli_env, "init", "--key-provider", "env")
    )


def test_first_init_says_where_the_key_was_created(
    fresh_env: dict[str, str], tmp_path: Path
) -> None:
    done = run(fresh_env, "init", "--key-provider", "file")
    assert done.returncode == 0, done.stderr
    assert f"master key: created key file {tmp_path / 'fresh' / 'master-keys.json'}" in done.stderr


def test_missing_key_is_never_replaced(home: object, cli_env: dict[str, str]) -> None:
    key_file = Path(cli_env["TOOLKIT_VAULT_HOME"]) / "master-keys.json"
    key_file.unlink()
    for command in (["stdio"], ["init"], ["toolkits", "show", "filesystem"]):
        line = one_error_line(run(cli_env, *command))
        assert f"key provider file (key file {key_file}): holds no master key" in line
        assert not key_file.exists()
    listed = run(cli_env, "toolkits", "list")  # lists definitions: needs no key, makes none
    assert listed.returncode == 0 and "holds no master key" in listed.stderr
    assert not key_file.exists()


def test_loose_key_file_permissions_refuse_to_start(home: object, cli_env: dict[str, str]) -> None:
    key_file = Path(cli_env["TOOLKIT_VAULT_HOME"]) / "master-keys.json"
    key_file.chmod(0o644)
    assert "must be 0600" in one_error_line(run(cli_env, "stdio"))


def test_env_provider(fresh_env: dict[str, str]) -> None:
    assert ENV_KEYS in one_error_line(run(fresh_env, "init", "--key-provider", "env"))
    env = {**fresh_env, ENV_KEYS: KeyDocument.first().dumps()}
    assert run(env, "init", "--key-provider", "env").returncode == 0
    assert run(env, "toolkits", "list").returncode == 0
    other = {**fresh_env, ENV_KEYS: KeyDocument.first().dumps()}
    line = one_error_line(run(other, "toolkits", "show", "fs"))
    assert "vault key vk-1 does not open with environment variable" in line
    assert "wrong master key" in line


def test_toolkits_list_json(home: object, cli_env: dict[str, str]) -> None:
    done = run(cli_env, "toolkits", "list", "--json")
    assert done.returncode == 0, done.stderr
    listed = {t["name"]: t for t in json.loads(done.stdout)["toolkits"]}
    assert set(listed) == {"filesystem", "secretive"}
    assert listed["filesystem"]["source"] == "built-in"
    assert listed["secretive"]["source"] == "entry point secretive"
    assert listed["filesystem"]["schema_digest"].startswith("sha256:")
    table = run(cli_env, "toolkits", "list")
    assert "filesystem" in table.stdout and table.returncode == 0
