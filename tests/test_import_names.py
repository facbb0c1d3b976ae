"""Imports run by the hundred (issue 51), on SQLite and PostgreSQL: a name that differs from
a registered toolkit's in case only is refused with the rename hint; an import never
replaces a toolkit imported from another source without `--replace` (which says so, and
is audited); `--dry-run` prints the report and leaves the database as it was; an imported
field's label is readable ("SSL mode", "Host"), in the stored schema and the intake form.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import MetaData, select

from cli_support import run_cli
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent
from toolkit_vault.toolkits.imports import PackageRefused, import_package
from toolkit_vault.transports.web.forms import build_fields, leaves


def client_config(servers: dict[str, dict[str, Any]]) -> bytes:
    return json.dumps({"mcpServers": servers}).encode()


GITHUB_A = {"command": "npx", "args": ["-y", "github-mcp-a"], "env": {"GITHUB_TOKEN": "x"}}
GITHUB_B = {"command": "uvx", "args": ["github-mcp-b"], "env": {"GH_PAT": "x"}}


def server_json(version: str = "1.0.0") -> bytes:
    return json.dumps(
        {
            "name": "io.github.example/pg",
            "description": "A database server.",
            "version": version,
            "packages": [
                {
                    "registryType": "npm",
                    "identifier": "@example/pg-server",
                    "version": version,
                    "transport": {"type": "stdio"},
                    "packageArguments": [
                        {"type": "named", "name": "--host", "isRequired": True},
                    ],
                    "environmentVariables": [{"name": "SSL_MODE"}, {"name": "DB_PASSWORD"}],
                }
            ],
        }
    ).encode()


def imported_events(vault: Vault) -> list[dict[str, Any]]:
    with vault.store.engine.connect() as db:
        rows = db.execute(
            select(AuditEvent.toolkit_name, AuditEvent.details)
            .where(AuditEvent.action == "toolkit_imported")
            .order_by(AuditEvent.seq)
        ).all()
    return [{"name": n, **(d if isinstance(d, dict) else json.loads(d))} for n, d in rows]


def test_a_name_differing_in_case_only_is_refused_with_the_rename_hint(vault: Vault) -> None:
    with pytest.raises(PackageRefused) as refused:
        import_package(vault.store, vault.registry, client_config({"Filesystem": GITHUB_A}), "l")
    message = refused.value.message
    assert "name_taken" in message and "differs only in case" in message
    assert "'filesystem'" in message and "--rename Filesystem=NEW-NAME" in message
    assert "Filesystem" not in vault.registry and imported_events(vault) == []
    # between imports too, and within one input
    import_package(vault.store, vault.registry, client_config({"github": GITHUB_A}), "l")
    servers = {"GitHub": GITHUB_B, "notes": GITHUB_A, "NOTES": GITHUB_B}
    report = import_package(vault.store, vault.registry, client_config(servers), "l")
    assert [t.name for t in report.toolkits] == ["notes"]
    skipped = {s.name: (s.code, s.message) for s in report.skipped}
    assert skipped["GitHub"][0] == "name_taken" and "'github'" in skipped["GitHub"][1]
    assert skipped["NOTES"][0] == "duplicate_name"


def test_another_source_under_an_imported_name_needs_replace(vault: Vault) -> None:
    import_package(vault.store, vault.registry, client_config({"github": GITHUB_A}), "l")
    first = vault.registry.get("github").source.name
    other = client_config({"github": GITHUB_B})
    with pytest.raises(PackageRefused) as refused:
        import_package(vault.store, vault.registry, other, "l")
    assert "name_imported" in refused.value.message
    assert "--replace" in refused.value.message and "--rename github=NEW-NAME" in (
        refused.value.message
    )
    assert vault.registry.get("github").source.name == first  # not replaced
    report = import_package(vault.store, vault.registry, other, "l", replace_source=True)
    (entry,) = report.toolkits
    assert entry.outcome == "replaced" and entry.replaced_digest == first
    assert report.as_json()["toolkits"][0]["replaced_digest"] == first
    assert vault.registry.get("github").source.name != first
    assert imported_events(vault)[-1]["replaced_source"] == first  # audited
    # the same source again changes nothing, --replace or not
    again = import_package(vault.store, vault.registry, other, "l")
    assert again.toolkits[0].outcome == "unchanged" and again.toolkits[0].replaced_digest is None


def test_a_registry_server_updated_is_the_same_source(vault: Vault) -> None:
    import_package(vault.store, vault.registry, server_json("1.0.0"), "l")
    report = import_package(vault.store, vault.registry, server_json("1.1.0"), "l")
    (entry,) = report.toolkits
    assert entry.outcome == "replaced" and entry.replaced_digest is None
    assert "replaced_source" not in imported_events(vault)[-1]


def test_an_imported_fields_label_is_readable_in_the_form(vault: Vault) -> None:
    import_package(vault.store, vault.registry, server_json(), "l")
    (name,) = [t.definition.name for t in vault.registry.all() if "pg" in t.definition.name]
    toolkit = vault.registry.get(name)
    properties = toolkit.definition.config_schema["properties"]
    titles = {p["x-toolkit-input"]["name"]: p["title"] for p in properties.values()}
    assert titles == {"--host": "Host", "SSL_MODE": "SSL mode", "DB_PASSWORD": "DB password"}
    labels = {
        f.label for f in leaves(build_fields(toolkit.schema.schema, toolkit.schema.is_secret_at))
    }
    assert {"Host", "SSL mode", "DB password"} <= labels
    # a schema an older release stored, its raw name as the title: the form reads it too
    older = {
        "type": "object",
        "properties": {
            "ssl_mode": {
                "type": "string",
                "title": "SSL_MODE",
                "x-toolkit-input": {"kind": "env", "name": "SSL_MODE"},
            },
            "x_api_key": {
                "type": "string",
                "title": "X-API-Key",
                "x-toolkit-input": {"kind": "header", "name": "X-API-Key"},
            },
        },
    }
    shown = {f.label for f in leaves(build_fields(older, lambda _: False))}
    assert shown == {"SSL mode", "X-API-Key"}  # a header keeps its own name


def _dump(vault: Vault) -> dict[str, list[Any]]:
    """Every row of every table."""
    tables = MetaData()
    with vault.store.engine.connect() as db:
        tables.reflect(db)
        return {
            name: [tuple(row) for row in db.execute(select(table)).all()]
            for name, table in sorted(tables.tables.items())
        }


def test_dry_run_prints_the_report_and_stores_nothing(
    home: VaultSettings, cli_env: dict[str, str]
) -> None:
    vault = open_vault(home)
    try:
        import_package(vault.store, vault.registry, client_config({"github": GITHUB_A}), "l")
        before = _dump(vault)
        data = client_config({"github": GITHUB_B, "notes": GITHUB_A, "Filesystem": GITHUB_A})
        done = run_cli(("toolkits", "import", "-", "--dry-run", "--replace"), cli_env, input=data)
        assert done.returncode == 0, done.stderr
        assert "would be replaced: github" in done.stdout
        assert "would be imported: notes" in done.stdout
        assert "Filesystem: name_taken" in done.stdout
        assert done.stdout.rstrip().endswith("dry run: nothing was stored")
        as_json = run_cli(("toolkits", "import", "-", "--dry-run", "--json"), cli_env, input=data)
        report = json.loads(as_json.stdout)
        assert report["dry_run"] is True
        assert [t["outcome"] for t in report["toolkits"]] == ["imported"]  # github: skipped
        assert {s["name"]: s["code"] for s in report["skipped"]}["github"] == "name_imported"
        assert _dump(vault) == before  # the database is unchanged
        stored = run_cli(("toolkits", "import", "-", "--replace"), cli_env, input=data)
        assert stored.returncode == 0, stored.stderr
        assert "replaced the toolkit imported from another source" in stored.stderr
        assert _dump(vault) != before
    finally:
        vault.store.engine.dispose()
