"""Who a command run at the shell acts as (issue 53): the OS user of the process, from its
real uid (not `$USER`, which the caller sets), and the name a person asserts with `--actor`
or TOOLKIT_VAULT_ACTOR, kept apart and shown as asserted; `audit list` says both."""

from __future__ import annotations

import json
import os
import pwd
from typing import Any

import pytest

from cli_support import run_cli
from toolkit_vault.actors import shell_actor, shell_actor_name
from toolkit_vault.core.vault import Vault

pytestmark = pytest.mark.one_database
OS_USER = pwd.getpwuid(os.getuid()).pw_name


def test_the_os_user_comes_from_the_uid_and_an_asserted_name_is_kept_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("USER", "mallory")  # the caller's word: not who runs the process
    monkeypatch.setenv("LOGNAME", "mallory")
    monkeypatch.delenv("TOOLKIT_VAULT_ACTOR", raising=False)
    assert shell_actor() == f"shell:{OS_USER}"
    assert shell_actor_name(shell_actor()) == f"{OS_USER} at the shell"
    monkeypatch.setenv("TOOLKIT_VAULT_ACTOR", " Ada\x1b[31m Lovelace ")
    assert shell_actor() == f"shell:{OS_USER}:Ada[31m Lovelace"  # printable, trimmed
    said = shell_actor_name(shell_actor("x" * 500))
    assert said == f"{'x' * 64} (asserted; at the shell as {OS_USER})"
    assert shell_actor_name("operator") is None and shell_actor_name("init") is None


def _token_events(env: dict[str, str]) -> list[dict[str, Any]]:
    listed = run_cli(("audit", "list", "--action", "token_created", "--json"), env)
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout)["events"])


def test_audit_list_names_the_person_at_the_shell(vault: Vault, cli_env: dict[str, str]) -> None:
    env = {**cli_env, "USER": "mallory"}
    for args, extra in (
        (("tokens", "create", "--role", "agent", "--name", "plain"), {}),
        (("--actor", "Ada", "tokens", "create", "--role", "agent", "--name", "flag"), {}),
        (("tokens", "create", "--role", "agent", "--name", "env"), {"TOOLKIT_VAULT_ACTOR": "Bo"}),
    ):
        made = run_cli(args, {**env, **extra})
        assert made.returncode == 0, made.stderr
    events = {e["principal_name"]: e for e in _token_events(env)}
    assert events["plain"]["actor"] == f"shell:{OS_USER}"
    assert events["plain"]["actor_name"] == f"{OS_USER} at the shell"
    assert events["flag"]["actor"] == f"shell:{OS_USER}:Ada"
    assert events["flag"]["actor_name"] == f"Ada (asserted; at the shell as {OS_USER})"
    assert events["env"]["actor_name"] == f"Bo (asserted; at the shell as {OS_USER})"
    table = run_cli(("audit", "list", "--actor", f"shell:{OS_USER}:Ada"), env)
    assert table.returncode == 0 and "Ada (asserted" in table.stdout, table.stderr
