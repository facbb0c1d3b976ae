"""The conventions an operator of Vault or SOPS expects: -h everywhere with examples and the
environment, `version`, shell completion, exit statuses 0/1/2 with one line, help without
side effects, a banner only for a person at a terminal, a busy port said plainly."""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import re
import socket
import subprocess
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cli_support import CLI
from test_cli import run
from toolkit_vault.cli import main
from toolkit_vault.keys.providers.base import ProviderError, ProviderSettings
from toolkit_vault.keys.providers.document import KeyDocument
from toolkit_vault.keys.providers.env import ENV_KEYS, EnvProvider
from toolkit_vault.protocol import PROTOCOL_VERSION
from toolkit_vault.settings import ENV_PREFIX, EnvSettings
from toolkit_vault.store.models import SCHEMA_REVISION

pytestmark = pytest.mark.one_database

ROOT = Path(__file__).parents[1]
# Their help is the key-hierarchy engineer's to write (issue 17 gives them `keys` and `check`).
KEY_COMMANDS: set[tuple[str, ...]] = set()  # every command follows the conventions


def commands(group: click.Group = main, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))


def nowhere(tmp_path: Path) -> dict[str, str]:
    """An environment whose home does not exist: help and version must not create it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    return {**env, "TOOLKIT_VAULT_HOME": str(tmp_path / "no-home"), "COLUMNS": "80"}


def test_every_command_takes_h_and_help_with_examples_and_environment(tmp_path: Path) -> None:
    runner = CliRunner()
    env = nowhere(tmp_path)
    seen = list(commands())
    assert ("version",) in seen and ("tokens", "revoke") in seen and len(seen) >= 20
    for path in [(), *seen]:
        short = runner.invoke(main, [*path, "-h"], env=env)
        long = runner.invoke(main, [*path, "--help"], env=env)
        assert short.exit_code == long.exit_code == 0, (path, short.output)
        assert short.stdout == long.stdout and short.stdout.startswith("Usage: ")
        assert all(len(line) <= 80 for line in short.stdout.splitlines()), path
        if path in KEY_COMMANDS or (path and isinstance(main.commands[path[0]], click.Group)):
            if len(path) == 1 and path not in KEY_COMMANDS:
                listed = short.stdout.split("Commands:")[1].splitlines()
                assert not any(x.endswith("...") for x in listed), path  # no summary cut
            continue
        assert "Examples:\n    toolkit-vault " in short.stdout, path
        assert "Exit status: 0 ok, 1 failure (one line on stderr), 2 usage error." in (
            short.stdout
        ), path
        if path != ("version",):
            assert "TOOLKIT_VAULT_HOME" in short.stdout, path
    top = runner.invoke(main, ["-h"], env=env).stdout
    for name in ("HOME", "DATABASE_URL", "KEY_PROVIDER", "MASTER_KEYS"):
        assert f"TOOLKIT_VAULT_{name}" in top
    assert "_TOOLKIT_VAULT_COMPLETE=bash_source" in top
    assert not (tmp_path / "no-home").exists()


def test_version_names_package_schema_and_protocol(tmp_path: Path) -> None:
    runner = CliRunner()
    env = nowhere(tmp_path)
    flag = runner.invoke(main, ["--version"], env=env)
    command = runner.invoke(main, ["version"], env=env)
    assert flag.exit_code == command.exit_code == 0 and flag.stdout == command.stdout
    assert flag.stdout.splitlines() == [
        f"toolkit-vault {version('toolkit-vault')}",
        f"database schema revision {SCHEMA_REVISION}",
        f"A2E protocol {PROTOCOL_VERSION} (accepts 1.x); capabilities: toolkits, tools",
    ]
    shown = json.loads(runner.invoke(main, ["version", "--json"], env=env).stdout)
    assert shown == {
        "package": "toolkit-vault",
        "version": version("toolkit-vault"),
        "schema_revision": SCHEMA_REVISION,
        "protocol": {"version": "1.0", "accepts": "1.x", "capabilities": ["toolkits", "tools"]},
    }
    assert not (tmp_path / "no-home").exists()


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("toolkit-vault: error: ")
    return lines[0]


USAGE_ERRORS = [
    (["--bogus"], "No such option '--bogus'", "toolkit-vault --help"),
    (["nope"], "No such command 'nope'", "toolkit-vault --help"),
    (
        ["toolkits", "list", "--wid"],
        "Did you mean '--wide'? (see",
        "toolkit-vault toolkits list --help",
    ),
    (
        ["tokens", "create", "--role", "king", "--name", "x"],
        "'king' is not one of",
        "create --help",
    ),
    (["tokens", "create", "--role", "agent"], "Missing option '--name'", "create --help"),
    (["history", "surplus"], "unexpected extra argument", "toolkit-vault history --help"),
    (["serve", "--port", "70000"], "70000 is not in the range", "toolkit-vault serve --help"),
    (["toolkits", "import", "x.json", "--rename", "a"], "takes OLD=NEW", "import --help"),
]


def test_exit_status_is_0_ok_1_failure_2_usage_each_with_one_line(tmp_path: Path) -> None:
    env = nowhere(tmp_path)
    ok = run(env, "version")
    assert ok.returncode == 0 and ok.stderr == ""
    failed = run(env, "history")
    assert failed.returncode == 1
    assert "no vault in" in one_line(failed) and "run `toolkit-vault init` first" in failed.stderr
    for args, says, see in USAGE_ERRORS:
        done = run(env, *args)
        assert done.returncode == 2, (args, done.stderr)
        line = one_line(done)
        assert says in line and line.endswith("--help')") and see in line, line
        assert done.stdout == ""
    bare = run(env, "tokens")  # a group without a command: its whole help, as a usage error
    assert bare.returncode == 2 and "Commands:" in bare.stderr and "revoke" in bare.stderr
    assert not (tmp_path / "no-home").exists()


def test_shell_completion_for_bash_zsh_and_fish(tmp_path: Path) -> None:
    env = nowhere(tmp_path)
    scripts = {
        shell: subprocess.run(
            [CLI],
            env={**env, "_TOOLKIT_VAULT_COMPLETE": f"{shell}_source"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        for shell in ("bash", "zsh", "fish")
    }
    assert all(done.returncode == 0 for done in scripts.values())
    assert "complete -o nosort -F _toolkit_vault_completion toolkit-vault" in scripts["bash"].stdout
    assert "#compdef toolkit-vault" in scripts["zsh"].stdout
    assert "complete --no-files --command toolkit-vault" in scripts["fish"].stdout
    words = {**env, "_TOOLKIT_VAULT_COMPLETE": "bash_complete", "COMP_CWORD": "1"}
    done = subprocess.run(
        [CLI],
        env={**words, "COMP_WORDS": "toolkit-vault to"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["plain,tokens", "plain,toolkits"]
    readme = (ROOT / "README.md").read_text()
    for shell in ("bash", "zsh", "fish"):
        assert f"_TOOLKIT_VAULT_COMPLETE={shell}_source toolkit-vault" in readme
    assert not (tmp_path / "no-home").exists()


def test_env_key_provider_errors_show_the_document_format(fresh_env: dict[str, str]) -> None:
    unset = run(fresh_env, "init", "--key-provider", "env")
    line = one_line(unset)
    assert ENV_KEYS in line and '{"format": 1, "primary": "kek-1", "keys": {"kek-1": ' in line
    canary = "tkv-canary-env-document-5d1e"
    for document in (f'{{"format": 1, "{canary}": 1}}', canary):
        done = run({**fresh_env, ENV_KEYS: document}, "init", "--key-provider", "env")
        line = one_line(done)
        assert '"format": 1' in line and canary not in done.stderr + done.stdout, line
    good = run(
        {**fresh_env, ENV_KEYS: KeyDocument.first().dumps()}, "init", "--key-provider", "env"
    )
    assert good.returncode == 0, good.stderr


def test_env_provider_package_shows_the_format_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, in the `providers` package that replaces keys.py."""
    provider = EnvProvider(ProviderSettings(home=tmp_path, vault_id="v", options={}))
    monkeypatch.setenv(ENV_KEYS, "tkv-canary-not-a-document")
    with pytest.raises(ProviderError) as caught:
        provider.status()
    assert '"format": 1' in str(caught.value) and "canary" not in str(caught.value)
    with pytest.raises(ProviderError, match=re.escape('as JSON: {"format": 1')):
        provider.create_master_key()


def test_stdio_banner_only_for_a_person_at_a_terminal(
    home: object, cli_env: dict[str, str]
) -> None:
    hello = json.dumps({"type": "handshake/req", "capabilities": ["toolkits"]}) + "\n"
    piped = subprocess.run([CLI, "stdio"], input=hello, capture_output=True, text=True, env=cli_env)
    assert piped.returncode == 0
    assert json.loads(piped.stdout)["type"] == "handshake/resp"
    assert [x for x in piped.stderr.splitlines() if not x.startswith("WARNING ")] == []
    leader, follower = pty.openpty()
    try:
        with subprocess.Popen(
            [CLI, "stdio"], stdin=follower, stdout=subprocess.PIPE, stderr=follower, env=cli_env
        ) as proc:
            os.write(leader, b"\x04")  # Ctrl-D at a terminal: end of input
            proc.wait(timeout=60)
            seen = b""
            while True:
                try:
                    chunk = os.read(leader, 4096) if _readable(leader) else b""
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 0
    assert b"A2E toolkits over stdio; one JSON message per line" in seen


def _readable(fd: int) -> bool:
    import select

    return bool(select.select([fd], [], [], 1.0)[0])


# Variables read by one command only, which names them in its own help, never by `serve`.
NOT_SERVED = {
    "TOOLKIT_VAULT_NO_DISCOVER": ("toolkits", "import"),
    "TOOLKIT_VAULT_TOKEN": ("clients", "config"),  # read by an MCP client, not the vault
    "TOOLKIT_VAULT_ACTOR": (),  # a person at the shell names themselves: every command
}


def variables_read() -> set[str]:
    """Every `TOOLKIT_VAULT_*` variable the code names (a module's constant, a docstring)
    and every field of the settings read from the environment."""
    named = re.compile(r"(?<![A-Za-z0-9_])TOOLKIT_VAULT_[A-Z0-9_]*[A-Z0-9]")
    found: set[str] = set()
    for path in (ROOT / "service" / "toolkit_vault").rglob("*.py"):
        if "_migrations" not in path.parts:
            found.update(named.findall(path.read_text(encoding="utf-8")))
    assert ENV_PREFIX == "TOOLKIT_VAULT_"
    found.update(ENV_PREFIX + field.name.upper() for field in dataclasses.fields(EnvSettings))
    return found


def test_serve_help_names_every_variable_the_code_reads(tmp_path: Path) -> None:
    runner = CliRunner()
    env = nowhere(tmp_path)
    served = runner.invoke(main, ["serve", "--help"], env=env)
    assert served.exit_code == 0, served.output
    listed = served.stdout.split("Environment:")[1]
    read = variables_read()
    assert {"TOOLKIT_VAULT_AUDIT_DEVICES", "TOOLKIT_VAULT_FILESYSTEM_ROOTS"} <= read  # found
    assert {"TOOLKIT_VAULT_AUDIT_FAIL_CLOSED", "TOOLKIT_VAULT_LOG_COPY"} <= read
    assert "TOOLKIT_VAULT_VERIFY_ALLOW" in read
    missing = {name for name in read - NOT_SERVED.keys() if name not in listed.split()}
    assert missing == set(), "add these to serve's Environment (cli/shell.py SERVE_ENV)"
    for name, command in NOT_SERVED.items():
        own = runner.invoke(main, [*command, "--help"], env=env)
        assert name in own.stdout, (name, command)


def test_serve_help_runs_no_init(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    for flag in ("--help", "-h"):
        done = subprocess.run(
            [ROOT / "scripts" / "serve", flag],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Usage: toolkit-vault serve [OPTIONS]")
        assert "--port" in done.stdout and "Examples:" in done.stdout
    assert list(tmp_path.iterdir()) == []  # no ./var, no master key


def test_a_busy_port_is_one_line_and_exit_1(home: object, cli_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [ROOT / "scripts" / "serve", "--port", str(port)],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 1
    lines = [x for x in done.stderr.splitlines() if not x.startswith("WARNING ")]
    assert lines == [
        f"toolkit-vault: error: cannot serve on 127.0.0.1:{port}: the address is already in use "
        "(another server?); stop it or choose another --port"
    ]
    assert "serving A2E" not in done.stderr and done.stdout == ""


def test_progress_bars_only_on_a_terminal(home: object) -> None:
    """Captured or piped, `check` and `keys rotate` write their results and nothing else:
    no stray blank line, no escape codes from a progress bar."""
    for args in (["check"], ["keys", "rotate"]):
        done = CliRunner().invoke(main, args)
        assert done.exit_code == 0, done.output
        assert done.stderr == "" and not done.stdout.startswith("\n") and "\x1b" not in done.stdout


def test_readme_states_the_exit_statuses() -> None:
    readme = (ROOT / "README.md").read_text()
    said = " ".join(readme.split())
    assert "command exits **0** on success, **1** on failure and **2** on a usage error" in said
    assert "exits 0 on success, or 1 with one line" not in said
