"""Imported registry packages run as their publishers declared them (issue 51), on SQLite
and PostgreSQL: the real server.json of PyPI's mcp-server-time and mcp-server-git and npm's
server-everything and server-filesystem (tests/fixtures/published_servers), imported,
configured over A2E, their tools listed from the live server and one called, in the
sandbox. The packages run from the cache scripts/components/mcp_servers.sh fills
(`TOOLKIT_VAULT_PACKAGES`), with no network: each document's pinned version is set to
the one installed (SOURCES.md there).

Also: a secret the publisher puts on the command line is refused at import unless the
operator allows it (audited), and a configure is checked by the server itself (one that
exits makes it an `error` and stores nothing; one slow to start is stored).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_support import CACHE, NODE_SERVERS, OUR_SERVERS, SITE
from spec_support import call_tool, configure, hello, send
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import A2EConnection
from toolkit_vault.core.vault import Vault
from toolkit_vault.sandbox import sandbox_available
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.toolkits import launches, served
from toolkit_vault.toolkits.imports import PackageRefused, import_package

FIXTURES = Path(__file__).parent / "fixtures" / "published_servers"
BOTH = ("toolkits", "tools")

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="no sandbox on this machine")


def installed_version(identifier: str) -> str:
    if identifier.startswith("@"):
        manifest = NODE_SERVERS.parent / identifier / "package.json"
        return str(json.loads(manifest.read_text())["version"])
    wanted = identifier.replace("-", "_")
    for info in (CACHE / "venv").glob("lib/python3*/site-packages/*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].rpartition("-")
        if name == wanted:
            return version
    pytest.fail(f"{identifier} missing: run scripts/components/mcp_servers.sh")


def published(name: str) -> bytes:
    """The real server.json, each package pinned to the version the cache holds."""
    doc = json.loads((FIXTURES / f"{name}.server.json").read_text())
    for package in doc["packages"]:
        package["version"] = installed_version(package["identifier"])
    return json.dumps(doc).encode()


@pytest.fixture
def vault(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    private = Path(tempfile.mkdtemp(prefix="tkv-servers-", dir="/tmp"))
    os.chmod(private, 0o711)  # noqa: S103 (the sandbox user passes through, as root)
    monkeypatch.setenv(served.SERVERS_DIR_ENV, str(private))
    monkeypatch.setenv(launches.PACKAGES_ENV, f"{CACHE / 'venv'}:{CACHE / 'node'}")
    monkeypatch.setenv(served.SERVER_BINDS_ENV, f"{SITE}:{OUR_SERVERS}")
    monkeypatch.delenv(served.SANDBOX_ENV, raising=False)
    opened = open_vault(home)
    yield opened
    opened.instances.drop(lambda *_: True)
    opened.store.close()


def call(conn: A2EConnection, toolkit: str, tool: str, **arguments: Any) -> dict[str, Any]:
    answer = call_tool(conn, toolkit, tool, **arguments)
    assert answer["type"] == "tool/call/resp", answer
    return answer


def text(answer: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in answer["content"])


def listed(conn: A2EConnection, toolkit: str) -> set[str]:
    (answer,) = send(conn, {"type": "tool/list/req"})
    return {t["name"] for t in answer["tools"] if t["toolkit"] == toolkit}


def run(vault: Vault, name: str, config: dict[str, Any]) -> tuple[A2EConnection, str]:
    """Import the published server.json, configure its (first) package over A2E."""
    report = import_package(vault.store, vault.registry, published(name), "local")
    toolkit = report.toolkits[0].name
    conn, _ = hello(vault, capabilities=BOTH)
    answer = configure(conn, toolkit, config)
    assert answer[0]["status"] == "ok", answer
    return conn, toolkit


def test_pypi_time_server_from_its_server_json(vault: Vault) -> None:
    conn, toolkit = run(vault, "time", {})
    launch = vault.registry.get(toolkit).definition.config_schema["x-toolkit-package"]["launch"]
    assert launch["recipe"]["package"]["registry"] == "pypi"
    assert {"get_current_time", "convert_time"} <= listed(conn, toolkit)
    answer = call(conn, toolkit, "get_current_time", timezone="UTC")
    assert json.loads(text(answer))["timezone"] == "UTC"


def test_pypi_git_server_from_its_server_json(vault: Vault) -> None:
    conn, toolkit = run(vault, "git", {})
    assert {"git_status", "git_log"} <= listed(conn, toolkit)
    answer = call(conn, toolkit, "git_status", repo_path="/tmp")  # its private /tmp: no repo
    assert answer["is_error"] is True  # the server's own answer, from inside its sandbox


def test_npm_everything_server_from_its_server_json(vault: Vault) -> None:
    report = import_package(vault.store, vault.registry, published("everything"), "local")
    names = [t.name for t in report.toolkits]
    stdio = next(n for n in names if n.endswith("#package-0"))
    conn, _ = hello(vault, capabilities=BOTH)
    assert configure(conn, stdio, {})[0]["status"] == "ok"
    assert "echo" in listed(conn, stdio)
    assert "hello vault" in text(call(conn, stdio, "echo", message="hello vault"))
    # its output schema (zod's JSON Schema) held by the vault's compiler: the result fits
    weather = call(conn, stdio, "get-structured-content", location="New York")
    assert weather["is_error"] is False and "temperature" in weather["structured_content"]


def test_npm_filesystem_server_gets_its_directory_on_argv(vault: Vault) -> None:
    conn, toolkit = run(vault, "filesystem", {"allowed_directory": "/tmp"})
    assert "write_file" in listed(conn, toolkit)
    call(conn, toolkit, "write_file", path="/tmp/note.txt", content="inside")
    assert text(call(conn, toolkit, "read_text_file", path="/tmp/note.txt")) == "inside"
    refused = call(conn, toolkit, "read_text_file", path="/etc/hostname")
    assert refused["is_error"] is True  # outside the directory its argv allowed


SECRET_ARGV = {
    "name": "io.example/secret-on-argv",
    "version": "1.0.0",
    "packages": [
        {
            "registryType": "pypi",
            "identifier": "mcp-server-time",
            "version": "1.0.0",
            "packageArguments": [
                {"type": "named", "name": "--api-key", "description": "Your API key"}
            ],
            "transport": {"type": "stdio"},
        }
    ],
}


def test_a_secret_on_the_command_line_is_refused_unless_allowed(vault: Vault) -> None:
    data = json.dumps(SECRET_ARGV).encode()
    with pytest.raises(PackageRefused) as refused:
        import_package(vault.store, vault.registry, data, "local")
    assert "secret_in_argv" in refused.value.message
    assert "--allow-secret-argv" in refused.value.message
    assert "io.example/secret-on-argv" not in vault.registry
    import_package(vault.store, vault.registry, data, "local", allow_secret_argv=True)
    schema = vault.registry.get("io.example/secret-on-argv").definition.config_schema
    assert schema["x-toolkit-package"]["launch"][launches.SECRET_ARGV_ALLOWED] is True
    events = [e for e in vault.export_audit(0) if e["action"] == AuditAction.TOOLKIT_IMPORTED]
    assert events[-1]["details"]["secret_argv_allowed"] == ["api_key"]
    page = list_events(vault.store, EventFilter(toolkit="io.example/secret-on-argv"), limit=50)
    (said,) = [e.summary for e in page.events if e.action == AuditAction.TOOLKIT_IMPORTED]
    assert said.endswith("; allowed on its command line: api_key"), said


def test_a_stored_recipe_with_a_secret_on_argv_is_not_launched_without_the_mark(
    vault: Vault,
) -> None:
    data = json.dumps(SECRET_ARGV).encode()
    import_package(vault.store, vault.registry, data, "local", allow_secret_argv=True)
    definition = vault.registry.get("io.example/secret-on-argv").definition
    stored = definition.config_schema["x-toolkit-package"]["launch"]
    unmarked = {k: v for k, v in stored.items() if k != launches.SECRET_ARGV_ALLOWED}
    with pytest.raises(launches.LaunchRefused, match="did not allow"):
        launches.build(unmarked, definition, {"api_key": "sk-abcdef123456"})
    installs = (CACHE / "venv",)
    stored = {**stored, "recipe": {**stored["recipe"], "package": {**stored["recipe"]["package"]}}}
    stored["recipe"]["package"]["version"] = installed_version("mcp-server-time")
    built = launches.build(stored, definition, {"api_key": "sk-abcdef123456"}, installs)
    assert built.argv[0] == str(CACHE / "venv" / "bin" / "mcp-server-time")
    assert built.argv[-2:] == ("--api-key", "sk-abcdef123456")
    assert "sk-abcdef123456" in built.secrets  # redacted from its stderr


def api_key_entry(command: str, *args: str) -> bytes:
    entry = {"command": command, "args": list(args), "env": {"API_KEY": "k", "PYTHONPATH": "p"}}
    return json.dumps({"mcpServers": {"api-key-test": entry}}).encode()


def test_a_server_that_exits_makes_the_configure_an_error_and_stores_nothing(
    vault: Vault,
) -> None:
    script = f'test -n "$API_KEY" || exit 2; exec /usr/bin/python3 {OUR_SERVERS}/api_key_server.py'
    entry = api_key_entry("/bin/sh", "-c", script)  # exits at once without its key
    import_package(vault.store, vault.registry, entry, "local")
    conn, session = hello(vault, capabilities=BOTH)
    answer = configure(conn, "api-key-test", {"api_key": "", "pythonpath": str(SITE)})
    assert answer[0]["type"] == "error" or answer[0].get("status") == "error", answer
    said = json.dumps(answer)
    assert "the server did not start or exited" in said
    assert vault.store.current_versions(session) == []  # nothing stored
    checked = vault.checks.last()["api-key-test"]
    assert not checked.passed
    toolkit = vault.registry.get("api-key-test")
    assert "verify" in vault.plugin_checks.describe(toolkit)  # the Checks page lists it


def test_a_server_slow_to_start_is_stored_and_reported(
    vault: Vault, caplog: pytest.LogCaptureFixture
) -> None:
    script = (
        f"sleep {served.VERIFY_TIMEOUT + 1}; exec /usr/bin/python3 {OUR_SERVERS}/api_key_server.py"
    )
    import_package(vault.store, vault.registry, api_key_entry("/bin/sh", "-c", script), "local")
    conn, session = hello(vault, capabilities=BOTH)
    answer = configure(conn, "api-key-test", {"api_key": "sk-slow-123456", "pythonpath": str(SITE)})
    assert answer[0]["status"] == "ok", answer
    assert "slow to start" in caplog.text
    assert [v.toolkit_name for v in vault.store.current_versions(session)] == ["api-key-test"]


def test_an_mcpb_bundle_runs_its_entry_point_with_its_user_config(
    vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle unpacked where the operator keeps packages (its manifest.json pins its
    name and version): `${__dirname}` is that directory, `${user_config.api_key}` the
    secret field, in the environment only."""
    bundles = Path(tempfile.mkdtemp(prefix="tkv-bundles-", dir="/tmp"))
    os.chmod(bundles, 0o755)  # noqa: S103 (the sandbox user reads it, as root)
    unpacked = bundles / "api-key-bundle"
    unpacked.mkdir(mode=0o755)
    (unpacked / "server.py").write_text((OUR_SERVERS / "api_key_server.py").read_text())
    manifest = {
        "manifest_version": "0.3",
        "name": "api-key-bundle",
        "version": "1.2.0",
        "description": "Our API_KEY server as a bundle",
        "author": {"name": "tests"},
        "server": {
            "type": "python",
            "entry_point": "server.py",
            "mcp_config": {
                "command": "/usr/bin/python3",
                "args": ["${__dirname}/server.py"],
                "env": {"API_KEY": "${user_config.api_key}", "PYTHONPATH": str(SITE)},
            },
        },
        "user_config": {
            "api_key": {"type": "string", "title": "API key", "sensitive": True, "required": True}
        },
    }
    data = json.dumps(manifest).encode()
    (unpacked / "manifest.json").write_bytes(data)
    settings = served._servers.settings
    monkeypatch.setattr(
        served._servers, "settings", dataclasses.replace(settings, packages=(bundles,))
    )
    import_package(vault.store, vault.registry, data, "local")
    conn, session = hello(vault, capabilities=BOTH)
    key = "sk-bundle-canary-7Hq2Lp9x"
    assert configure(conn, "api-key-bundle", {"api_key": key})[0]["status"] == "ok"
    assert text(call(conn, "api-key-bundle", "whoami")) == "authorized"
    instance = vault.instances.instance(session, "api-key-bundle")
    assert isinstance(instance, served.ServedToolkit) and instance.pid is not None
    assert key.encode() not in Path(f"/proc/{instance.pid}/cmdline").read_bytes()
