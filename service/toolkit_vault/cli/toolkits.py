"""`toolkits list|show|import|remove`: the registered toolkits, and imports a user steers.

A thin shell over `imports` (import, remove) and `import_report` (what to print). Imported
names, fields and reasons are untrusted text, so tables render them as plain text.
"""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from toolkit_package.selection import Selection

from ..bootstrap import LOCAL_PRINCIPAL, open_vault
from ..errors import VaultError
from ..import_report import describe_toolkit, printable, report_lines
from ..imports import import_package, remove_toolkit
from ..package_sources import read_package
from ..settings import load_settings
from .shell import emit, guarded

__all__ = ["toolkits"]


@click.group()
def toolkits() -> None:
    """Registered toolkits: list, show, import MCP servers, remove an import."""


@toolkits.command("list")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_list(as_json: bool) -> None:
    """List registered toolkits and where each came from."""
    vault = open_vault(load_settings())
    entries = [
        {
            "name": t.definition.name,
            "alias": t.definition.alias,
            "category": t.definition.category,
            "version": t.definition.version,
            "tools": t.definition.tools,
            "schema_digest": t.schema.digest,
            "source": t.source,
        }
        for t in vault.registry.all()
    ]
    if as_json:
        click.echo(json.dumps({"toolkits": entries}, indent=2))
        return
    table = Table("name", "alias", "category", "version", "tools", "source")
    for t in vault.registry.all():
        d = t.definition
        row = (d.name, d.alias, d.category, d.version, ", ".join(d.tools), t.source)
        table.add_row(*(Text(cell) for cell in row))  # imported names are untrusted: no markup
    Console().print(table)


@toolkits.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_show(name: str, as_json: bool) -> None:
    """One toolkit: its definition, and each field's secret mark and the reason for it."""
    vault = open_vault(load_settings())
    shown = describe_toolkit(vault.registry.get(name))
    if as_json:
        emit(shown)
        return
    definition = shown["definition"]
    click.echo(f"{printable(shown['name'])} ({printable(shown['source'])})")
    for key in ("alias", "category", "version", "description"):
        click.echo(f"  {key}: {printable(str(definition.get(key) or ''))}")
    click.echo(f"  tools: {printable(', '.join(definition.get('tools', [])))}")
    click.echo(f"  source digest: {shown['source_digest'] or '-'}")
    click.echo(f"  schema digest: {shown['schema_digest']}")
    table = Table("field", "input", "kind", "secret", "reason")
    for f in shown["fields"]:
        row = (
            f["field"],
            f["input"],
            f["kind"],
            "secret" if f["secret"] else "public",
            f["reason"],
        )
        table.add_row(*(Text(str(cell)) for cell in row))
    Console().print(table)
    if shown["other_fields_secret"]:
        click.echo("  any field the schema does not declare is secret")


def _renames(values: tuple[str, ...]) -> dict[str, str]:
    renames: dict[str, str] = {}
    for value in values:
        old, sep, new = value.partition("=")
        if not sep or not old or not new:
            raise VaultError(f"--rename takes OLD=NEW, not {value!r}")
        renames[old] = new
    return renames


@toolkits.command("import")
@click.argument("source")
@click.option("--only", multiple=True, metavar="NAME", help="Import only these servers.")
@click.option("--skip", multiple=True, metavar="NAME", help="Leave these servers out.")
@click.option("--rename", multiple=True, metavar="OLD=NEW", help="Import a server as NEW.")
@click.option("--secret", multiple=True, metavar="[SERVER:]FIELD", help="Mark a field secret.")
@click.option("--public", multiple=True, metavar="[SERVER:]FIELD", help="Mark a field public.")
@click.option("--strict", is_flag=True, help="All or nothing: any unusable server refuses all.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_import(
    source: str,
    only: tuple[str, ...],
    skip: tuple[str, ...],
    rename: tuple[str, ...],
    secret: tuple[str, ...],
    public: tuple[str, ...],
    strict: bool,
    as_json: bool,
) -> None:
    """Import MCP servers from SOURCE: a file, `-` (stdin) or a registry URL.

    Reads a server.json, a registry listing or a JSON list of server.json, a bundle
    manifest.json, a Claude Desktop or VS Code config (JSONC) or a VS Code settings.json,
    at most 16 MiB. Each server becomes one toolkit; one that cannot be imported is skipped
    with its reason (exit 0 when any was imported).
    """
    selection = Selection(
        only=frozenset(only),
        skip=frozenset(skip),
        rename=_renames(rename),
        secret=secret,
        public=public,
    )
    data = read_package(source)
    vault = open_vault(load_settings())
    report = import_package(
        vault.store, vault.registry, data, LOCAL_PRINCIPAL.principal_id, selection, strict=strict
    )
    click.echo(
        json.dumps(report.as_json(), indent=2) if as_json else "\n".join(report_lines(report))
    )
    for warning in report.warnings:
        click.echo(f"toolkit-vault: WARNING: {warning.message}", err=True)


@toolkits.command("remove")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_remove(name: str, as_json: bool) -> None:
    """Remove an imported toolkit; sessions that had it configured no longer do."""
    vault = open_vault(load_settings())
    removed = remove_toolkit(vault.store, vault.registry, name, LOCAL_PRINCIPAL.principal_id)
    if as_json:
        emit(
            {
                "name": removed.name,
                "digest": removed.digest,
                "unconfigured_sessions": list(removed.unconfigured_sessions),
            }
        )
        return
    count = len(removed.unconfigured_sessions)
    click.echo(f"removed {printable(removed.name)}; unconfigured in {count} session(s)")
