"""`toolkits import|show|remove`: MCP metadata becomes toolkits the vault configures encrypted.

Every configuration value in tests/vectors/package contains "canary"; the secrets configured
here contain it too. None may appear in an import report, an inspect report, a list
response or a stored row's public half. Runs on SQLite and PostgreSQL. The corpus of real
published metadata is tests/fixtures/mcp (see tests/package/test_corpus.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select

from cli_support import run_cli
from test_vault import AGENT, configure, handshake, listed, request
from toolkit_package.selection import Selection
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.schema import compiled
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent, ConfigVersion, ImportedToolkitRow
from toolkit_vault.toolkits import imports
from toolkit_vault.toolkits.imports import PackageRefused, PackageToolkit, import_package

BIN = Path(sys.executable).parent
VECTORS = Path(__file__).parent / "vectors" / "package"
CORPUS = Path(__file__).parent / "fixtures" / "mcp"
ARGV, REMOTE, ENV = (
    "server-argv-variable-secret.json",
    "server-remote-secret-header.json",
    "server-secret-env.json",
)
SECRET = "tkv-canary-secret"
BROKEN_PLUGIN = "WARNING toolkit entry point broken failed to load: RuntimeError"  # tests/plugins
GOOGLE = CORPUS / "clients/claude/3rzy__claude-google-workspace-config.json"

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
        [str(BIN / program), *args], capture_output=True, env=env, timeout=120, input=stdin
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def vault_cli(
    env: dict[str, str], *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env, input=stdin)


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
        return list(db.execute(select(ImportedToolkitRow).order_by(ImportedToolkitRow.name)))


def events(vault: Vault, action: str = "toolkit_imported") -> list[Any]:
    with vault.store.engine.connect() as db:
        query = select(AuditEvent).where(AuditEvent.action == action)
        return list(db.execute(query.order_by(AuditEvent.seq)))


@pytest.mark.usefixtures("stored_only")
@pytest.mark.parametrize("vector", [ARGV, REMOTE, ENV])
def test_vector_imports_and_the_vault_configures_it_encrypted(
    vector: str, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    name, config, pointers, argv_warning = CASES[vector]
    path = VECTORS / vector
    done = vault_cli(cli_env, "toolkits", "import", str(path), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    (entry,) = report["toolkits"]
    assert (entry["name"], entry["outcome"]) == (name, "imported")
    assert entry["digest"].startswith("sha256:") and len(entry["digest"]) == 71
    assert entry["secret_fields"] == [p.lstrip("/") for p in pointers]
    marks = {m["field"]: (m["secret"], m["reason"]) for m in entry["classification"]}
    assert {f for f, (s, _) in marks.items() if s} == {p.lstrip("/") for p in pointers}
    assert all(reason for _, reason in marks.values())
    warned = "passed on the command line; argv is visible to every local user"
    assert (warned in done.stderr) is argv_warning
    assert bool(report["warnings"]) is argv_warning
    assert_no_canary(done.stdout + done.stderr, path)

    inspected = run("toolkit-package-inspect", cli_env, stdin=path.read_bytes())
    assert inspected.returncode == 0, inspected.stderr
    assert_no_canary(inspected.stdout + inspected.stderr, path)

    vault = open_vault(home)  # another process: it sees the import through the store
    try:
        assert str(vault.registry.get(name).source) == f"package {entry['digest']}"
        conn, _ = handshake(vault)
        assert listed(conn)[name] is False
        out = configure(conn, name, config)
        assert out[0]["status"] == "ok", out
        assert listed(conn)[name] is True
        listing = request(conn, {"type": "toolkit/list/req"})
        assert SECRET not in json.dumps(out) + json.dumps(listing)
        with vault.store.engine.connect() as db:
            (row,) = db.execute(select(ConfigVersion).where(ConfigVersion.toolkit_name == name))
        assert sorted(json.loads(row.sealed_secrets)) == sorted(pointers)
        assert SECRET not in row.public_config
        assert json.loads(row.public_config) == {
            k: v for k, v in config.items() if f"/{k}" not in pointers
        }
    finally:
        vault.store.engine.dispose()


def test_human_report_names_each_field_mark_and_reason(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    path = VECTORS / ARGV
    done = vault_cli(cli_env, "toolkits", "import", "-", stdin=path.read_bytes())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("imported io.github.example/weather-container (local_mcp, sha256:")
    assert "  secret weather_token: isSecret" in lines
    assert "  public weather_region: harmless name: region" in lines
    assert "WARNING: io.github.example/weather-container: secret variable 'weather_token'" in (
        done.stderr
    )
    assert_no_canary(done.stdout + done.stderr, path)
    again = vault_cli(cli_env, "toolkits", "import", str(path))
    assert again.stdout.startswith("unchanged io.github.example/weather-container")


def test_a_clash_skips_that_server_and_the_rest_go_in(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    """A real Claude Desktop config with an entry named `filesystem` (the built-in's name)."""
    done = vault_cli(cli_env, "toolkits", "import", str(GOOGLE), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    names = [t["name"] for t in report["toolkits"]]
    assert names == ["brave-search", "github", "gdrive", "google-workspace-mcp"]
    assert [(s["name"], s["code"]) for s in report["skipped"]] == [("filesystem", "name_taken")]
    human = vault_cli(cli_env, "toolkits", "import", str(GOOGLE))
    assert "skipped 1 server(s):" in human.stdout
    assert "  filesystem: name_taken at /mcpServers/filesystem: the name is taken by the " in (
        human.stdout
    )

    strict = vault_cli(cli_env, "toolkits", "import", str(GOOGLE), "--strict", "--skip", "github")
    assert "name_taken: 'filesystem'" in one_error_line(strict)
    renamed = vault_cli(
        cli_env, "toolkits", "import", str(GOOGLE), "--rename", "filesystem=fs-server", "--json"
    )
    assert renamed.returncode == 0, renamed.stderr
    fs = [t for t in json.loads(renamed.stdout)["toolkits"] if t["name"] == "fs-server"]
    assert fs[0]["renamed_from"] == "filesystem" and fs[0]["outcome"] == "imported"


def test_only_skip_and_typos_are_refused(vault: Vault) -> None:
    data = GOOGLE.read_bytes()
    only = Selection(only=frozenset({"github"}))
    report = import_package(vault.store, vault.registry, data, "local", only)
    assert [t.name for t in report.toolkits] == ["github"]
    assert {s.name: s.code for s in report.skipped} == {
        "brave-search": "not_selected",
        "filesystem": "not_selected",
        "gdrive": "not_selected",
        "google-workspace-mcp": "not_selected",
    }
    for bad, message in [
        (Selection(skip=frozenset({"githbu"})), "--skip names no server of this input: 'githbu'"),
        (Selection(only=frozenset({"nope"})), "--only names no server"),
        (Selection(rename={"x": "y"}), "--rename names no server"),
        (Selection(public=("GOOGLE_CLIENT_SECRE",)), "names no field of the chosen servers"),
        (Selection(secret=("a",), public=("a",)), "given to both --secret and --public"),
    ]:
        with pytest.raises(PackageRefused, match=message):
            import_package(vault.store, vault.registry, data, "local", bad)
    assert [r.name for r in imported_rows(vault)] == ["github"]


def test_a_server_named_without_its_package_suffix_gets_the_names_to_use(vault: Vault) -> None:
    data = (CORPUS / "registry" / "seed.json").read_bytes()
    airtable = "io.github.domdomegg/airtable-mcp-server"
    suffixes = ", ".join(f"{airtable}#package-{n}" for n in range(3))
    with pytest.raises(PackageRefused) as refused:
        import_package(
            vault.store, vault.registry, data, "local", Selection(only=frozenset({airtable}))
        )
    assert str(refused.value).endswith(
        f"--only names no server of this input: {airtable!r}; it has one per package: {suffixes}"
    )
    chosen = Selection(only=frozenset({f"{airtable}#package-1"}))
    report = import_package(vault.store, vault.registry, data, "local", chosen)
    assert len(report.toolkits) == 1


def test_overrides_mark_fields_and_are_audited(vault: Vault) -> None:
    path = CORPUS / "clients/claude/AccelByte__ags-extend-sdk-mcp-server.json"
    chosen = Selection(secret=("accelbyte-jssdk-mcp:PORT",))
    report = import_package(vault.store, vault.registry, path.read_bytes(), "local", chosen)
    (entry,) = report.toolkits
    assert entry.secret_fields == ("port",)
    assert {m.field: m.reason for m in entry.marks} == {
        "node_env": "harmless name: env",
        "port": "--secret",
    }
    schema = vault.registry.get("accelbyte-jssdk-mcp").definition.config_schema
    assert schema["properties"]["port"]["writeOnly"] is True
    (event,) = events(vault)
    assert json.loads(event.details)["overrides"] == [{"field": "port", "secret": True}]

    path = CORPUS / "clients/claude/0xsaju__mcp-server.json"
    chosen = Selection(public=("max_new_tokens",))
    report = import_package(vault.store, vault.registry, path.read_bytes(), "local", chosen)
    assert report.toolkits[0].secret_fields == ()
    assert json.loads(events(vault)[-1].details)["overrides"] == [
        {"field": "max_new_tokens", "secret": False}
    ]


def test_unknown_format_is_refused(home: VaultSettings, cli_env: dict[str, str]) -> None:
    done = vault_cli(cli_env, "toolkits", "import", "-", stdin=b'{"hello": "canary-world"}')
    assert one_error_line(done) == (
        "toolkit-vault: error: package refused: unknown_format: "
        "not a server.json, registry listing, bundle manifest or client map"
    )
    missing = vault_cli(cli_env, "toolkits", "import", str(VECTORS / "nope.json"))
    assert "cannot read" in one_error_line(missing)
    jsonc = vault_cli(cli_env, "toolkits", "import", "-", stdin=b'{"servers": {\n  "a": 1 2}}')
    assert one_error_line(jsonc).endswith(
        "not_json: invalid JSON at line 2 column 10: Expecting ',' delimiter"
    )


def test_an_input_whose_only_server_clashes_is_refused_and_stores_nothing(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    package = CORPUS / "clients" / "claude" / "AbuMareBear__dotfiles.json"  # only `filesystem`
    done = vault_cli(cli_env, "toolkits", "import", str(package))
    assert one_error_line(done) == (
        "toolkit-vault: error: package refused: no_servers: no server could be imported: "
        "'filesystem': name_taken: the name is taken by the built-in toolkit: "
        "rename it with --rename filesystem=NEW-NAME"
    )
    as_json = vault_cli(cli_env, "toolkits", "import", str(package), "--json")
    assert as_json.returncode == 1 and "--rename filesystem=NEW-NAME" in as_json.stderr
    report = json.loads(as_json.stdout)  # the report, on stdout, though nothing was imported
    assert report["toolkits"] == [] and report["skipped_servers"] == 1
    (skipped,) = report["skipped"]
    assert (skipped["name"], skipped["code"]) == ("filesystem", "name_taken")
    assert "--rename filesystem=NEW-NAME" in skipped["message"]
    vault = open_vault(home)
    try:
        assert str(vault.registry.get("filesystem").source) == "built-in"
        assert imported_rows(vault) == [] and events(vault) == []
    finally:
        vault.store.engine.dispose()


def test_a_bundle_without_mcp_config_and_a_server_json_without_package_say_why(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    bundle = json.loads((CORPUS / "bundles" / "mcpb" / "hello-world-node.json").read_text())
    del bundle["server"]["mcp_config"]
    done = vault_cli(
        cli_env, "toolkits", "import", "-", "--json", stdin=json.dumps(bundle).encode()
    )
    (skipped,) = json.loads(done.stdout)["skipped"]
    assert (skipped["code"], skipped["scope"]) == ("no_mcp_config", "/server/mcp_config")
    assert "declares no server.mcp_config" in skipped["message"]
    assert "no_mcp_config: bundle declares no server.mcp_config" in done.stderr
    server = json.loads((CORPUS / "registry" / "seed.json").read_text())[-1]
    server.pop("packages", None), server.pop("remotes", None)
    done = vault_cli(cli_env, "toolkits", "import", "-", stdin=json.dumps(server).encode())
    assert one_error_line(done).endswith(
        f"{server['name']!r}: no_packages_or_remotes: server.json offers no package and no "
        "remote: nothing to run or connect to"
    )


@pytest.mark.usefixtures("stored_only")  # the bundle is not unpacked here
def test_a_bundles_tools_are_listed_once_it_is_configured(vault: Vault) -> None:
    path = CORPUS / "bundles" / "mcpb" / "hello-world-node.json"
    declared = [t["name"] for t in json.loads(path.read_text())["tools"]]
    import_package(vault.store, vault.registry, path.read_bytes(), "local")
    conn = connect(vault, AGENT)
    hello = request(conn, {"type": "handshake/req", "capabilities": ["toolkits", "tools"]})
    assert hello[0]["type"] == "handshake/resp", hello
    out = configure(conn, "hello-world-node", {"api_key": f"{SECRET}-bundle", "max_results": 5})
    assert out[0]["status"] == "ok", out
    (answer,) = request(conn, {"type": "tool/list/req"})
    tools = [t["name"] for t in answer["tools"] if t["toolkit"] == "hello-world-node"]
    assert declared and tools == declared


@pytest.mark.usefixtures("stored_only")
def test_the_vault_refuses_a_choice_the_publisher_did_not_offer(vault: Vault) -> None:
    server = json.loads((CORPUS / "registry" / "seed.json").read_text())[3]  # time-mcp-pypi
    (package,) = server["packages"][:1]
    package["environmentVariables"] = [
        {"name": "DB_TYPE", "choices": ["postgresql", "mysql"], "default": "postgresql"},
        {"name": "SSL_MODE", "choices": ["disable", "require"]},
    ]
    server["packages"] = [package]
    server.pop("remotes", None)
    import_package(vault.store, vault.registry, json.dumps(server).encode(), "local")
    conn, _ = handshake(vault)
    refused = configure(conn, server["name"], {"db_type": "oracle", "ssl_mode": "bogus"})
    assert refused[0]["type"] == "error", refused
    ok = configure(conn, server["name"], {"db_type": "mysql", "ssl_mode": "require"})
    assert ok[0]["status"] == "ok", ok


def test_strict_keeps_all_or_nothing(vault: Vault) -> None:
    package = {
        "mcpServers": {
            "fine": {"command": "npx", "args": ["fine-server"]},
            "secretive": {"command": "npx", "args": ["other-server"]},
        }
    }
    data = json.dumps(package).encode()
    with pytest.raises(PackageRefused, match="name_taken: 'secretive'"):
        import_package(vault.store, vault.registry, data, "local", strict=True)
    assert imported_rows(vault) == [] and events(vault) == []
    assert "fine" not in vault.registry
    report = import_package(vault.store, vault.registry, data, "local")
    assert [t.name for t in report.toolkits] == ["fine"]


def test_a_schema_that_does_not_compile_skips_that_server(
    vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = imports.to_toolkit_definition

    def hostile(server: Any, fmt: str) -> Any:
        made = real(server, fmt)
        if server.name == "analytics":
            made.definition["schema"]["properties"]["authorization"]["$ref"] = "https://x.test/s"
        return made

    monkeypatch.setattr(imports, "to_toolkit_definition", hostile)
    data = (VECTORS / "client-config.json").read_bytes()
    report = import_package(vault.store, vault.registry, data, "local")
    assert [t.name for t in report.toolkits] == ["github"]
    assert [(s.name, s.code) for s in report.skipped][-1] == ("analytics", "invalid_schema")
    with pytest.raises(PackageRefused, match=r"invalid_entry at /mcpServers/broken/command"):
        import_package(vault.store, vault.registry, data, "local", strict=True)
    only = Selection(skip=frozenset({"broken"}))
    with pytest.raises(PackageRefused, match=r"invalid_schema: 'analytics'"):
        import_package(vault.store, vault.registry, data, "local", only, strict=True)
    assert [r.name for r in imported_rows(vault)] == ["github"]


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
        db.execute(insert(ImportedToolkitRow).values(**values))
    restarted = open_vault(home)
    try:
        assert str(restarted.registry.get("filesystem").source) == "built-in"
        assert str(restarted.registry.get(row.name).source) == f"package {row.package_digest}"
    finally:
        restarted.store.engine.dispose()


def test_a_stored_schema_a_later_release_refuses_is_refused_where_it_is_needed(
    vault: Vault, home: VaultSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening a vault compiles no imported schema (a registry's worth would cost seconds in
    every process); the configure that needs one this release no longer accepts (here: a
    lower size bound) is refused, naming why, and stores nothing."""
    name, config, _, _ = CASES[ENV]
    import_package(vault.store, vault.registry, (VECTORS / ENV).read_bytes(), "local")
    restarted = open_vault(home)
    try:
        assert "schema" not in vars(restarted.registry.get(name))  # not compiled yet
        monkeypatch.setattr(compiled, "MAX_SCHEMA_BYTES", 64)
        conn, _ = handshake(restarted)
        assert listed(conn)[name] is False
        (refused,) = configure(conn, name, config)
        assert refused["type"] == "error" and "schema is larger than 64 bytes" in refused["message"]
        assert SECRET not in json.dumps(refused)
        with restarted.store.engine.connect() as db:
            assert db.execute(select(ConfigVersion)).all() == []
    finally:
        restarted.store.engine.dispose()


def test_the_imported_initializer_runs_nothing(vault: Vault) -> None:
    import_package(vault.store, vault.registry, (VECTORS / ARGV).read_bytes(), "local")
    toolkit = vault.registry.get("io.github.example/weather-container").factory()
    assert isinstance(toolkit, PackageToolkit)
    assert toolkit.initialize({"weather_token": SECRET}) is None
    assert SECRET not in repr(vars(toolkit))
