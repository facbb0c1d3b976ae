"""`toolkits import`: MCP server metadata becomes a toolkit the vault configures, encrypted.

Every configuration value in tests/vectors/package contains "canary"; the secrets configured
here contain it too. None may appear in an import report, an inspect report, a list
response or a stored row's public half. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from test_vault import configure, handshake, listed, request
from toolkit_package.jsonbound import MAX_INPUT_BYTES
from toolkit_vault import imports
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.imports import PackageRefused, PackageToolkit, import_package
from toolkit_vault.models import AuditEvent, ConfigVersion, ImportedToolkit
from toolkit_vault.service import Vault
from toolkit_vault.settings import VaultSettings

BIN = Path(sys.executable).parent
VECTORS = Path(__file__).parent / "vectors" / "package"
ARGV, REMOTE, ENV = (
    "server-argv-variable-secret.json",
    "server-remote-secret-header.json",
    "server-secret-env.json",
)
SECRET = "tkv-canary-secret"
BROKEN_PLUGIN = "WARNING toolkit entry point broken failed to load: RuntimeError"  # tests/plugins

# file -> (toolkit name, config to submit, secret pointers, argv warning expected)
CASES: dict[str, tuple[str, dict[str, Any], list[str], bool]] = {
    ARGV: (
        "io.github.example/weather-container",
        {"weather_token": f"{SECRET}-weather", "units": "metric"},
        ["/weather_token"],
        True,
    ),
    REMOTE: (
        "com.example/acme-analytics",
        {"tenant": "acme", "x_api_key": f"{SECRET}-x-api-key"},
        ["/x_api_key"],
        False,
    ),
    ENV: (
        "io.github.example/issue-tracker",
        {
            "tracker_api_token": f"{SECRET}-api-token",
            "tracker_webhook_secret": f"{SECRET}-webhook",
            "tracker_base_url": "https://tracker.example.test",
        },
        ["/tracker_api_token", "/tracker_webhook_secret"],
        False,
    ),
}


def run(
    program: str, env: dict[str, str], *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(BIN / program), *args], capture_output=True, env=env, timeout=60, input=stdin
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def vault_cli(
    env: dict[str, str], *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    return run("toolkit-vault", env, *args, stdin=stdin)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done
    lines = [line for line in done.stderr.strip().splitlines() if line != BROKEN_PLUGIN]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""
    return lines[0]


def canaries(value: Any) -> Iterator[str]:
    """Every string (key or value) of a vector that holds a configuration value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from canaries(key)
            yield from canaries(item)
    elif isinstance(value, list):
        for item in value:
            yield from canaries(item)
    elif isinstance(value, str) and "canary" in value:
        yield value


def assert_no_canary(text: str, path: Path) -> None:
    found = list(canaries(json.loads(path.read_text())))
    assert found  # the vector really carries values
    assert not [value for value in found if value in text]
    assert "canary" not in text


def imported_rows(vault: Vault) -> list[Any]:
    with vault.store.engine.connect() as db:
        return list(db.execute(select(ImportedToolkit).order_by(ImportedToolkit.name)))


def import_events(vault: Vault) -> list[Any]:
    with vault.store.engine.connect() as db:
        query = select(AuditEvent).where(AuditEvent.action == "toolkit_imported")
        return list(db.execute(query.order_by(AuditEvent.seq)))


@pytest.mark.parametrize("vector", [ARGV, REMOTE, ENV])
def test_vector_imports_and_the_vault_configures_it_encrypted(
    vector: str, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    name, config, pointers, argv_warning = CASES[vector]
    path = VECTORS / vector
    done = vault_cli(cli_env, "toolkits", "import", str(path), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    (entry,) = report["toolkits"]
    assert (entry["name"], entry["outcome"], entry["digest"]) == (name, "imported", digest)
    assert entry["secret_fields"] == [p.lstrip("/") for p in pointers]
    assert report["input_sha256"] == digest.removeprefix("sha256:")
    warned = "passed on the command line; argv is visible to every local user"
    assert (warned in done.stderr) is argv_warning
    assert bool(report["warnings"]) is argv_warning
    assert_no_canary(done.stdout + done.stderr, path)

    inspected = run("toolkit-package-inspect", cli_env, stdin=path.read_bytes())
    assert inspected.returncode == 0, inspected.stderr
    assert_no_canary(inspected.stdout + inspected.stderr, path)

    vault = open_vault(home)  # another process: it sees the import through the store
    try:
        assert vault.registry.get(name).source == f"package {digest}"
        conn, session = handshake(vault)
        assert listed(conn)[name] is False
        out = configure(conn, name, config)
        assert out[0]["status"] == "ok", out
        assert out[1]["type"] == "toolkit/status/event" and out[1]["configured"] is True
        assert listed(conn)[name] is True
        listing = request(conn, {"type": "toolkit/list/req"})
        assert SECRET not in json.dumps(out) + json.dumps(listing)
        with vault.store.engine.connect() as db:
            (row,) = db.execute(select(ConfigVersion).where(ConfigVersion.toolkit_name == name))
        assert sorted(json.loads(row.sealed_secrets)) == pointers
        assert sorted(json.loads(row.secret_fingerprints)) == pointers
        assert row.kek_id and row.wrapped_dek
        assert SECRET not in row.public_config
        assert json.loads(row.public_config) == {
            k: v for k, v in config.items() if f"/{k}" not in pointers
        }
    finally:
        vault.store.engine.dispose()

    restarted = open_vault(home)  # resuming re-initializes the imported toolkit from the store
    try:
        resumed, same = handshake(restarted, session)
        assert same == session and listed(resumed)[name] is True
    finally:
        restarted.store.engine.dispose()


def test_human_report_and_argv_warning(home: VaultSettings, cli_env: dict[str, str]) -> None:
    path = VECTORS / ARGV
    done = vault_cli(cli_env, "toolkits", "import", "-", stdin=path.read_bytes())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported io.github.example/weather-container (local_mcp, ")
    assert "secret fields: weather_token" in done.stdout
    assert "WARNING: io.github.example/weather-container: secret variable 'weather_token'" in (
        done.stderr
    )
    assert_no_canary(done.stdout + done.stderr, path)
    again = vault_cli(cli_env, "toolkits", "import", str(path))
    assert again.stdout.startswith("unchanged io.github.example/weather-container")
    listing = json.loads(vault_cli(cli_env, "toolkits", "list", "--json").stdout)
    sources = {t["name"]: t["source"] for t in listing["toolkits"]}
    assert sources["io.github.example/weather-container"].startswith("package sha256:")


def test_skipped_servers_are_reported(vault: Vault) -> None:
    path = VECTORS / "client-config.json"
    report = import_package(vault.store, vault.registry, path.read_bytes(), "local")
    assert [t.name for t in report.toolkits] == ["github", "analytics"]
    assert report.skipped_servers == 1
    assert [(d.code, d.scope) for d in report.diagnostics] == [
        ("invalid_entry", "/mcpServers/broken/command")
    ]
    assert [(w.toolkit, w.field) for w in report.warnings] == [("github", "gh_token")]
    assert "canary" not in json.dumps(report.as_json())


def test_python_api_is_live_and_reimporting_the_same_digest_is_a_noop(vault: Vault) -> None:
    data = (VECTORS / ENV).read_bytes()
    first = import_package(vault.store, vault.registry, data, "local")
    name = first.toolkits[0].name
    assert first.toolkits[0].outcome == "imported"
    conn, _ = handshake(vault)  # the importing vault serves it at once
    assert configure(conn, name, CASES[ENV][1])[0]["status"] == "ok"
    (before,) = imported_rows(vault)
    second = import_package(vault.store, vault.registry, data, "local")
    assert second.toolkits[0].outcome == "unchanged"
    assert imported_rows(vault) == [before]
    (event,) = import_events(vault)
    assert (event.toolkit_name, event.actor) == (name, "local")
    details = json.loads(event.details)
    assert details["digest"] == before.package_digest and details["previous_digest"] is None


def test_a_changed_package_replaces_the_definition(vault: Vault) -> None:
    data = (VECTORS / REMOTE).read_bytes()
    import_package(vault.store, vault.registry, data, "local")
    changed = data.replace(b"ACME API key", b"ACME API key (tenant scoped)")
    report = import_package(vault.store, vault.registry, changed, "operator")
    (entry,) = report.toolkits
    assert entry.outcome == "replaced"
    (row,) = imported_rows(vault)
    assert row.package_digest == entry.digest == "sha256:" + hashlib.sha256(changed).hexdigest()
    assert row.actor == "operator"
    assert vault.registry.get(entry.name).source == f"package {entry.digest}"
    schema = vault.registry.get(entry.name).definition.config_schema
    assert schema["properties"]["x_api_key"]["description"] == "ACME API key (tenant scoped)"
    first, second = import_events(vault)
    assert json.loads(second.details)["previous_digest"] == json.loads(first.details)["digest"]


def test_unknown_format_is_refused(home: VaultSettings, cli_env: dict[str, str]) -> None:
    done = vault_cli(cli_env, "toolkits", "import", "-", stdin=b'{"hello": "canary-world"}')
    line = one_error_line(done)
    assert line == (
        "toolkit-vault: error: package refused: unknown_format: "
        "not a server.json, bundle manifest or client map"
    )
    missing = vault_cli(cli_env, "toolkits", "import", str(VECTORS / "nope.json"))
    assert "cannot read" in one_error_line(missing)


def test_a_name_clash_with_filesystem_is_refused(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    package = {"mcpServers": {"filesystem": {"command": "npx", "args": ["-y", "fs-server"]}}}
    done = vault_cli(cli_env, "toolkits", "import", "-", stdin=json.dumps(package).encode())
    assert "'filesystem' is taken by the built-in toolkit" in one_error_line(done)
    vault = open_vault(home)
    try:
        assert vault.registry.get("filesystem").source == "built-in"
        assert imported_rows(vault) == [] and import_events(vault) == []
    finally:
        vault.store.engine.dispose()


def test_a_name_clash_with_an_entry_point_refuses_the_whole_package(vault: Vault) -> None:
    package = {
        "mcpServers": {
            "fine": {"command": "npx", "args": ["fine-server"]},
            "secretive": {"command": "npx", "args": ["other-server"]},
        }
    }
    with pytest.raises(PackageRefused, match="'secretive' is taken by the entry point"):
        import_package(vault.store, vault.registry, json.dumps(package).encode(), "local")
    assert imported_rows(vault) == [] and import_events(vault) == []
    assert "fine" not in vault.registry


def test_oversized_input_is_refused(
    home: VaultSettings, cli_env: dict[str, str], tmp_path: Path, vault: Vault
) -> None:
    big = b"{" + b" " * (MAX_INPUT_BYTES - 1) + b"}"
    assert len(big) == MAX_INPUT_BYTES + 1
    (tmp_path / "big.json").write_bytes(big)
    expected = "toolkit-vault: error: package refused: input_too_large: input exceeds 1048576 bytes"
    assert one_error_line(vault_cli(cli_env, "toolkits", "import", str(tmp_path / "big.json"))) == (
        expected
    )
    assert one_error_line(vault_cli(cli_env, "toolkits", "import", "-", stdin=big)) == expected
    with pytest.raises(PackageRefused, match="input_too_large"):
        import_package(vault.store, vault.registry, big, "local")
    assert imported_rows(vault) == []


def test_a_schema_that_does_not_compile_stores_nothing(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = imports.to_toolkit_definition

    def hostile(server: Any, result: Any) -> Any:
        made = real(server, result)
        if server.name == "analytics":
            made.definition["schema"]["properties"]["authorization"]["$ref"] = "https://x.test/s"
        return made

    monkeypatch.setattr(imports, "to_toolkit_definition", hostile)
    data = (VECTORS / "client-config.json").read_bytes()
    with pytest.raises(PackageRefused, match=r"toolkit 'analytics': schema \$ref .* is not local"):
        import_package(vault.store, vault.registry, data, "local")
    assert imported_rows(vault) == [] and import_events(vault) == []
    assert "github" not in vault.registry


def test_a_stored_toolkit_never_displaces_a_registered_one(
    vault: Vault, home: VaultSettings
) -> None:
    """A plugin installed after the import keeps its name; the stored definition is left out."""
    import_package(vault.store, vault.registry, (VECTORS / ENV).read_bytes(), "local")
    (row,) = imported_rows(vault)
    definition = json.loads(row.definition)
    definition["name"] = "filesystem"
    with vault.store.engine.begin() as db:
        values = {**row._mapping, "name": "filesystem", "definition": json.dumps(definition)}
        db.execute(insert(ImportedToolkit).values(**values))
        assert db.execute(select(func.count()).select_from(ImportedToolkit)).scalar_one() == 2
    restarted = open_vault(home)
    try:
        assert restarted.registry.get("filesystem").source == "built-in"
        assert restarted.registry.get(row.name).source == f"package {row.package_digest}"
    finally:
        restarted.store.engine.dispose()


def test_the_imported_initializer_runs_nothing(vault: Vault) -> None:
    import_package(vault.store, vault.registry, (VECTORS / ARGV).read_bytes(), "local")
    toolkit = vault.registry.get("io.github.example/weather-container").factory()
    assert isinstance(toolkit, PackageToolkit)
    assert toolkit.initialize({"weather_token": SECRET}) is None
    assert SECRET not in repr(vars(toolkit))


def test_a_package_with_no_usable_server_is_refused(vault: Vault) -> None:
    package = {"mcpServers": {"broken": {"command": 42}}}
    with pytest.raises(PackageRefused, match=r"no_servers: .*\(1 skipped"):
        import_package(vault.store, vault.registry, json.dumps(package).encode(), "local")
    assert imported_rows(vault) == []
