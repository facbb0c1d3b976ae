"""`toolkit-vault --help`, `version` and completion start without the vault's heavy imports.

Each probe runs the real `main` in a fresh interpreter with the given argv, then lists
which heavy packages and command modules ended up in `sys.modules`: a command module
imported again at the top of `toolkit_vault.cli` (or a heavy import in `about` or `shell`)
fails here, whatever the timing on the day. The table that lets `--help` list commands
without importing them, and the copies `version` prints, are held equal to their sources.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cli_support import run_cli
from toolkit_vault.cli import COMMANDS, main
from toolkit_vault.cli import about as about_module
from toolkit_vault.cli.lazy import LazyCommands
from toolkit_vault.cli.operators import AUDIT_COMMANDS
from toolkit_vault.settings import VaultSettings

HEAVY = {
    "alembic",
    "cryptography",
    "fastapi",
    "jinja2",
    "jsonschema",
    "keyring",
    "orjson",
    "psycopg",
    "dotenv",
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "prometheus_client",
    "re2",
    "referencing",
    "rich",
    "sqlalchemy",
    "starlette",
    "toolkit_package",
    "uvicorn",
}
# the modules that hold commands other than `version`, and the helpers only they use
COMMAND_MODULES = {entry.module for entry in COMMANDS.values()} - {"toolkit_vault.cli.about"}
COMMAND_MODULES |= {"toolkit_vault.cli.ids", "toolkit_vault.cli.keyflags"}
COMMAND_MODULES |= {"toolkit_vault.cli.tables"}

_PROBE = r"""
import json, sys
from toolkit_vault.cli import main
heavy, commands = set(sys.argv[1].split(",")), set(sys.argv[2].split(","))
try:
    main(sys.argv[3:], prog_name="toolkit-vault")
except SystemExit as stop:
    status = stop.code
loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy or m in commands)
print("\n" + json.dumps({"status": status, "loaded": loaded}))
"""


def _probe(
    *argv: str, env: dict[str, str] | None = None, heavy: set[str] = HEAVY
) -> tuple[str, list[str]]:
    """Run `main(argv)` in a new interpreter: its output, and the heavy modules it loaded."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLKIT_VAULT_", "_TOOLKIT"))}
    command = [sys.executable, "-c", _PROBE, ",".join(heavy), ",".join(COMMAND_MODULES), *argv]
    done = subprocess.run(
        command,
        env={**base, "COLUMNS": "80", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    output, _, report = done.stdout.rstrip("\n").rpartition("\n")
    found = json.loads(report)
    assert found["status"] in (0, None), (argv, done.stderr)
    return output, found["loaded"]


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["-h"], ["version"], ["version", "--json"], ["--version"]],
    ids=" ".join,
)
def test_help_and_version_import_no_heavy_module(argv: list[str]) -> None:
    _, loaded = _probe(*argv)
    assert loaded == []


# What a read-only listing of a small vault has no use for: the serving side (the MCP SDK,
# FastAPI, OAuth clients), the packaging side (`toolkit_package`) and JSON Schema. Importing
# them was most of the 2.5-3 s such a command took (issue 53); its own work is milliseconds.
SERVING = {
    "authlib",
    "fastapi",
    "jsonschema",
    "mcp",
    "mcp_types",
    "starlette",
    "toolkit_package",
    "uvicorn",
}


# Issue 53's third pass: no listing imports the ORM (the store's tables are SQLAlchemy Core
# tables and it only executes statements), and `toolkits list` no JSON Schema validator (a
# listing's schema digest needs none; the built-in's schemas compile at their first use)
# nor the packaging side's importers (only `toolkits import` runs them) and package model.
VALIDATOR = {"jsonschema", "jsonschema_specifications", "referencing", "rfc3986_validator"}
IMPORTERS = {"toolkit_package.importers", "toolkit_package.bundles", "toolkit_package.selection"}
IMPORTERS |= {"toolkit_package.model", "toolkit_package.roles"}
# Issue 53's fourth pass: the settings are read without pydantic-settings (and its dotenv),
# so `tokens list` and `audit list` import no pydantic at all; `toolkits list` still does
# (the registry's definitions are pydantic models), but not pydantic-settings.
# Nor any listing `prometheus_client`: statements are counted in `tallies`, and the registry
# and the metrics kept on `prometheus_client`'s own are made at their first use.
NEVER_FOR_A_LISTING = {"pydantic_settings", "dotenv", "prometheus_client"}
PYDANTIC = {"pydantic", "pydantic_core", *NEVER_FOR_A_LISTING}


@pytest.mark.parametrize("argv", [["tokens", "list"], ["audit", "list"]], ids=" ".join)
def test_a_listing_imports_nothing_of_the_serving_side(
    argv: list[str], home: VaultSettings, cli_env: dict[str, str]
) -> None:
    env = {k: v for k, v in cli_env.items() if k.startswith("TOOLKIT_VAULT_")}
    _, loaded = _probe(*argv, env=env, heavy=HEAVY | SERVING | VALIDATOR)
    assert "sqlalchemy" in loaded  # it did open the vault
    assert sorted({m.split(".")[0] for m in loaded} & SERVING) == []
    assert sorted({m.split(".")[0] for m in loaded} & PYDANTIC) == []
    _no_orm_validator_or_importers(loaded)


def _no_orm_validator_or_importers(loaded: list[str]) -> None:
    assert "sqlalchemy.engine" in loaded  # it did open the store
    assert [m for m in loaded if m.startswith(("sqlalchemy.orm", "sqlalchemy.ext"))] == []
    assert sorted({m.split(".")[0] for m in loaded} & VALIDATOR) == []
    assert sorted(set(loaded) & IMPORTERS) == []


# Operators' commands open the whole vault, without toolkits, and launch no server: not the
# MCP SDK (its import was most of `audit verify`'s start at a million events), the HTTP
# server's side, nor the HTTP client (loaded at a first OAuth connection or credential check).
@pytest.mark.parametrize("argv", [["audit", "verify"], ["check"], ["keys", "status"]], ids=" ".join)
def test_operators_commands_import_no_mcp_sdk(
    argv: list[str], home: VaultSettings, cli_env: dict[str, str]
) -> None:
    env = {k: v for k, v in cli_env.items() if k.startswith("TOOLKIT_VAULT_")}
    _, loaded = _probe(*argv, env=env, heavy=HEAVY | SERVING | {"toolkit_vault"})
    assert "toolkit_vault.keys.hierarchy" in loaded  # it did open the vault keys
    serving = {"mcp", "mcp_types", "uvicorn", "authlib", "httpx"}
    assert sorted({m.split(".")[0] for m in loaded} & serving) == []


# `audit verify` and `check` need the store, its keys and the audit key: not the vault that
# serves (`core.vault`), the registry, its pydantic models or the schema compiler (issue 53:
# their import was a third of an incremental `audit verify` at a million events).
@pytest.mark.parametrize("argv", [["audit", "verify"], ["check"]], ids=" ".join)
def test_audit_verify_and_check_import_no_vault_registry_or_models(
    argv: list[str], home: VaultSettings, cli_env: dict[str, str]
) -> None:
    env = {k: v for k, v in cli_env.items() if k.startswith("TOOLKIT_VAULT_")}
    heavy = HEAVY | SERVING | VALIDATOR | {"toolkit_vault"}
    output, loaded = _probe(*argv, env=env, heavy=heavy)
    assert "audit chain" in output or "events verified" in output
    assert "toolkit_vault.core.auditing" in loaded and "toolkit_vault.keys.hierarchy" in loaded
    unwanted = {"toolkit_vault.core.vault", "toolkit_vault.toolkits.registry"}
    unwanted |= {"toolkit_vault.protocol", "toolkit_vault.plugin", "toolkit_vault.schema"}
    unwanted |= {"toolkit_vault.toolkits.served", "toolkit_vault.cli.trail"}
    unwanted |= {"toolkit_vault.cli.audit_hash", "toolkit_vault.audit.wording"}
    assert sorted(set(loaded) & unwanted) == []
    assert sorted({m.split(".")[0] for m in loaded} & (PYDANTIC | VALIDATOR)) == []


# `toolkits list` opens the registry (imported definitions are verified under the vault
# keys), so it does import the packaging side; but not the MCP SDK (loaded only when an
# imported server is launched or reached), the HTTP server, nor `Vault`.
# Nor the OAuth client (authlib, httpx: a schema's `x-oauth` is read without it).
NOT_FOR_THE_REGISTRY = {"fastapi", "mcp", "mcp_types", "starlette", "uvicorn"}
NOT_FOR_THE_REGISTRY |= {"anyio", "authlib", "httpx", "httpx2"}
IMPORTED_SIDE = {"toolkit_vault.toolkits.imports", "toolkit_vault.toolkits.served"}
IMPORTED_SIDE |= {"toolkit_vault.toolkits.remote_served", "toolkit_vault.toolkits.launches"}


def test_toolkits_list_imports_no_mcp_sdk_and_no_vault(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    env = {k: v for k, v in cli_env.items() if k.startswith("TOOLKIT_VAULT_")}
    output, loaded = _probe(
        "toolkits",
        "list",
        env=env,
        heavy=HEAVY | SERVING | NOT_FOR_THE_REGISTRY | VALIDATOR | {"toolkit_vault"},
    )
    assert "filesystem" in output and "sqlalchemy" in loaded  # it did open the store
    # no plugin installed and no imported definition: the built-in toolkit is listed from
    # its plain fields, without the registry and its pydantic models (issue 53's fifth pass)
    assert "toolkit_vault.keys.hierarchy" in loaded  # the vault keys were opened, as before
    assert "toolkit_vault.toolkits.registry" not in loaded
    assert "toolkit_vault.toolkits.import_report" not in loaded  # `terminal.printable` suffices
    assert sorted({m.split(".")[0] for m in loaded} & PYDANTIC) == []
    # a vault with no imported definition: nothing of what loads and runs them (issue 53)
    assert [m for m in loaded if m.split(".")[0] == "toolkit_package"] == []
    assert sorted(set(loaded) & IMPORTED_SIDE) == []
    assert sorted({m.split(".")[0] for m in loaded} & NOT_FOR_THE_REGISTRY) == []
    assert "toolkit_vault.core.vault" not in loaded
    assert "toolkit_vault.mcp_client.session" not in loaded
    assert "toolkit_vault.oauth.client" not in loaded
    assert sorted({m.split(".")[0] for m in loaded} & NEVER_FOR_A_LISTING) == []
    _no_orm_validator_or_importers(loaded)


@pytest.mark.usefixtures("stored_only")
def test_toolkits_list_loads_the_imported_side_when_a_definition_is_stored(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    """What the listing above leaves out is loaded, and the imported toolkit listed, once
    the vault stores a definition."""
    vector = Path(__file__).parent / "vectors" / "package" / "server-secret-env.json"
    done = run_cli(("toolkits", "import", str(vector), "--json"), cli_env)
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)["toolkits"]
    env = {k: v for k, v in cli_env.items() if k.startswith("TOOLKIT_VAULT_")}
    heavy = {"toolkit_vault", "toolkit_package", *NOT_FOR_THE_REGISTRY}
    output, loaded = _probe("toolkits", "list", env=env, heavy=heavy)
    assert entry["name"] in output and "filesystem" in output
    assert IMPORTED_SIDE - {"toolkit_vault.toolkits.remote_served"} <= set(loaded)
    assert "toolkit_package.imported" in loaded and "toolkit_vault.mcp_client" in loaded
    # still not the MCP SDK: it is loaded when an imported server is launched or reached
    assert sorted({m.split(".")[0] for m in loaded} & NOT_FOR_THE_REGISTRY) == []


def test_the_mcp_clients_names_load_the_sdk_at_first_use() -> None:
    """`mcp_client` imports the SDK only when a name that needs it is asked for."""
    code = (
        "import sys; import toolkit_vault.mcp_client as m; before = 'mcp' in sys.modules; "
        "m.StdioServer; print(before, 'mcp' in sys.modules, m.StdioServer.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True", "toolkit_vault.mcp_client.session"]
    from toolkit_vault import mcp_client

    assert all(getattr(mcp_client, name) is not None for name in mcp_client.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mcp_client.nope  # noqa: B018


def test_the_oauth_clients_names_load_authlib_at_first_use() -> None:
    code = (
        "import sys; import toolkit_vault.oauth as o; o.OAuthFailed; "
        "before = 'authlib' in sys.modules or 'httpx' in sys.modules; "
        "o.OAuthClient; print(before, 'authlib' in sys.modules, o.OAuthClient.__module__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # `OAuthFailed` (caught by the policy side) does not load the HTTP client; the client does
    assert done.stdout.split() == ["False", "True", "toolkit_vault.oauth.client"]
    from toolkit_vault import oauth

    assert all(getattr(oauth, name) is not None for name in oauth.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        oauth.nope  # noqa: B018


def test_the_toolkits_commands_copies_are_their_sources() -> None:
    from toolkit_package.skeletons import FORMATS
    from toolkit_vault.cli import toolkits
    from toolkit_vault.oauth import fetch
    from toolkit_vault.toolkits import remote_oauth

    assert toolkits.SKELETON_FORMATS == FORMATS
    assert toolkits.DEFAULT_PUBLIC_URL == remote_oauth.DEFAULT_PUBLIC_URL
    assert remote_oauth.DEADLINE == fetch.DEADLINE


def test_a_commands_objects_are_frozen_at_its_exit() -> None:
    """The interpreter's last collections skip what a command made (issue 53): `main`
    freezes it from an exit hook, and only then."""
    code = (
        "import atexit, gc\n"
        "from toolkit_vault.cli import main\n"
        "try:\n    main(['version'])\nexcept SystemExit:\n    pass\n"
        "before = gc.get_freeze_count()\n"
        "atexit._run_exitfuncs()\n"
        "print(before == 0, gc.get_freeze_count() > 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1].split() == ["True", "True"]  # after what it printed


def test_completing_a_command_name_imports_no_command() -> None:
    words = {"_TOOLKIT_VAULT_COMPLETE": "bash_complete", "COMP_CWORD": "1"}
    output, loaded = _probe(env={**words, "COMP_WORDS": "toolkit-vault "})
    assert output.split() == [f"plain,{name}" for name in sorted(COMMANDS)]
    assert loaded == []


def test_the_probe_sees_a_command_import_its_module() -> None:
    """The other tests' empty lists mean something: a command's own help loads it."""
    _, loaded = _probe("stdio", "-h")
    assert "toolkit_vault.cli.serving" in loaded and "sqlalchemy" in loaded


def test_each_summary_in_the_table_is_its_commands_own() -> None:
    for name, entry in [*COMMANDS.items(), *AUDIT_COMMANDS.items()]:
        command = getattr(importlib.import_module(entry.module), entry.attribute)
        assert isinstance(command, click.Command) and command.name == name
        assert entry.short_help == command.get_short_help_str(), name


def test_audits_commands_are_all_there_and_run() -> None:
    """`audit`'s table (`operators.AUDIT_COMMANDS`) loads each command when looked up:
    `audit --help` lists every one, and one from the table runs."""
    shown = CliRunner().invoke(main, ["audit", "--help"])
    assert shown.exit_code == 0, shown.output
    names = ["accept-restore", "export", "hash", "list", "tail", "verify"]
    listed = [line.split()[0] for line in shown.output.split("Commands:")[1].splitlines() if line]
    assert listed == names
    helped = CliRunner().invoke(main, ["audit", "tail", "--help"])
    assert helped.exit_code == 0 and "--follow" in helped.output


def test_help_from_the_table_is_the_help_click_prints_from_the_commands() -> None:
    settings = {
        "params": main.params,
        "help": main.help,
        "epilog": main.epilog,
        "context_settings": main.context_settings,
    }
    from_table = type(main)(main.name, commands=COMMANDS, **settings)  # nothing loaded yet
    from_commands = click.Group(main.name, commands=list(main.commands.values()), **settings)
    printed = [
        CliRunner().invoke(group, ["--help"], prog_name="toolkit-vault", terminal_width=80)
        for group in (from_table, from_commands)
    ]
    assert printed[0].exit_code == printed[1].exit_code == 0
    assert re.search(r"^  check +Decrypt-verify every stored version;", printed[0].stdout, re.M)
    assert printed[0].stdout == printed[1].stdout


def test_lazy_commands_behave_as_a_dict_of_commands() -> None:
    version = COMMANDS["version"]
    commands = LazyCommands({"version": version, "history": COMMANDS["history"]})
    assert list(commands) == ["version", "history"] and len(commands) == 2
    assert commands.short_help("history") == COMMANDS["history"].short_help
    assert commands["version"] is about_module.version_command
    assert commands.get("nope") is None
    extra = click.Command("extra", short_help="Added by hand.")
    commands["extra"] = extra  # what `add_command` does
    assert commands["extra"] is extra and commands.short_help("extra") == "Added by hand."
    del commands["version"]
    assert list(commands) == ["history", "extra"]
    with pytest.raises(KeyError):
        del commands["version"]
    wrong = LazyCommands({"history": version._replace(attribute="PACKAGE")})
    with pytest.raises(TypeError, match=r"about\.PACKAGE is not a click command"):
        wrong["history"]


_COUNTED = r"""
import importlib.metadata, json, sys
real, callers = importlib.metadata.entry_points, []
def counted(**params):
    callers.append(sys._getframe(1).f_globals.get("__name__", ""))
    return real(**params)
importlib.metadata.entry_points = counted
from toolkit_vault.cli import main
try:
    main(sys.argv[1:], prog_name="toolkit-vault")
except SystemExit as stop:
    assert stop.code in (0, None), stop.code
print("\n" + json.dumps(callers))
"""


def test_toolkits_list_reads_the_installed_entry_points_once(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    """The key providers (settings, then the provider) and the toolkit plugins share one
    scan of every distribution's metadata (`installed`), not one each."""
    env = {k: v for k, v in cli_env.items() if k.startswith("TOOLKIT_VAULT_")}
    base = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    done = subprocess.run(
        [sys.executable, "-c", _COUNTED, "toolkits", "list"],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    output, _, report = done.stdout.rstrip("\n").rpartition("\n")
    assert "filesystem" in output
    ours = [caller for caller in json.loads(report) if caller.startswith("toolkit_vault")]
    assert ours == ["toolkit_vault.installed"]


def test_the_built_in_toolkits_line_is_the_registrys() -> None:
    """The line a listing shows without the registry is the one the registry gives."""
    from toolkit_vault.toolkits.listing import BUILT_IN_LISTED, ListedToolkit
    from toolkit_vault.toolkits.registry import ToolkitRegistry

    registered = ToolkitRegistry.default().get(BUILT_IN_LISTED.name)
    assert ListedToolkit.of(registered) == BUILT_IN_LISTED


def test_the_registry_compiles_no_built_in_schema() -> None:
    """A registry of the built-in toolkit alone (no plugin on the path) loads no validator:
    the built-in's schemas compile at their first use."""
    code = (
        "import sys; from toolkit_vault.toolkits.registry import ToolkitRegistry; "
        "ToolkitRegistry.default(); print(sorted(m for m in sys.modules if m in sys.argv[1:]))"
    )
    command = [sys.executable, "-c", code, *sorted(VALIDATOR)]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"


def test_a_listings_schema_digest_is_the_compiled_schemas() -> None:
    from toolkit_vault.toolkits.registry import ToolkitRegistry

    for toolkit in ToolkitRegistry.default().all():
        listed = toolkit.schema_digest
        assert listed == toolkit.schema.digest and listed.startswith("sha256:")
