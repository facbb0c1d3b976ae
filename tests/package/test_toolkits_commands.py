"""`toolkits show`, `toolkits remove` and `toolkit-package-inspect --help`, as a user runs them:
real CLI processes on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess

import pytest
from sqlalchemy import select

from test_import import BIN, CASES, ENV, VECTORS, events, imported_rows, one_error_line, vault_cli
from test_vault import configure, handshake, listed
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import ConfigVersion, CurrentConfig
from toolkit_vault.toolkits.imports import import_package


def test_show_gives_each_field_its_mark_and_reason(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    assert vault_cli(cli_env, "toolkits", "import", str(VECTORS / ENV)).returncode == 0
    done = vault_cli(cli_env, "toolkits", "show", "io.github.example/issue-tracker", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["source"] == f"package {shown['source_digest']}"
    assert shown["definition"]["schema"]["properties"]["tracker_api_token"]["writeOnly"] is True
    assert [(f["field"], f["secret"], f["reason"]) for f in shown["fields"]] == [
        ("tracker_api_token", True, "isSecret"),
        ("tracker_base_url", False, "harmless name: url"),
        ("tracker_webhook_secret", True, "isSecret"),
    ]
    human = vault_cli(cli_env, "toolkits", "show", "io.github.example/issue-tracker")
    assert "tracker_api_token" in human.stdout and "isSecret" in human.stdout
    builtin = json.loads(vault_cli(cli_env, "toolkits", "show", "filesystem", "--json").stdout)
    assert builtin["source"] == "built-in" and builtin["fields"][0]["field"] == "root_dir"
    assert "toolkit not found" in one_error_line(vault_cli(cli_env, "toolkits", "show", "nope"))


@pytest.mark.usefixtures("stored_only")
def test_remove_is_audited_and_unconfigures_every_session(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    name, config, _, _ = CASES[ENV]
    import_package(vault.store, vault.registry, (VECTORS / ENV).read_bytes(), "local")
    conn, session = handshake(vault)
    assert configure(conn, name, config)[0]["status"] == "ok"
    assert listed(conn)[name] is True

    done = vault_cli(cli_env, "toolkits", "remove", name, "--json")
    assert done.returncode == 0, done.stderr
    removed = json.loads(done.stdout)
    assert removed["unconfigured_sessions"] == [session]
    assert imported_rows(vault) == []
    (event,) = events(vault, "toolkit_removed")
    assert (event.toolkit_name, json.loads(event.details)["unconfigured"]) == (name, [session])
    assert name not in listed(conn)  # this running vault follows the removal (issue 37)
    with vault.store.engine.connect() as db:
        assert (
            list(db.execute(select(CurrentConfig).where(CurrentConfig.toolkit_name == name))) == []
        )
        assert len(list(db.execute(select(ConfigVersion)))) == 1  # history keeps the version

    import_package(vault.store, vault.registry, (VECTORS / ENV).read_bytes(), "local")
    resumed, _ = handshake(open_vault(home), session)
    assert listed(resumed)[name] is False  # importing it again brings no old config back
    assert vault_cli(cli_env, "audit", "verify").returncode == 0
    assert "not an import" in one_error_line(vault_cli(cli_env, "toolkits", "remove", "filesystem"))
    assert "no imported toolkit" in one_error_line(vault_cli(cli_env, "toolkits", "remove", "x"))


def test_inspect_help_answers_at_once(cli_env: dict[str, str]) -> None:
    for flag in ("--help", "-h"):
        done = subprocess.run(
            [str(BIN / "toolkit-package-inspect"), flag],
            stdin=subprocess.PIPE,  # left open: a command waiting on stdin would time out
            capture_output=True,
            env=cli_env,
            timeout=30,
        )
        assert done.returncode == 0 and done.stdout.startswith(b"usage: toolkit-package-inspect")
        assert b"1 MiB" in done.stdout and b"256 KiB" in done.stdout
    done = subprocess.run(
        [str(BIN / "toolkit-package-inspect"), "--json"],
        stdin=subprocess.PIPE,
        capture_output=True,
        env=cli_env,
        timeout=30,
    )
    assert done.returncode == 2 and b"see --help" in done.stderr and done.stdout == b""
