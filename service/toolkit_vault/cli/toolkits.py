"""`toolkits list|show|import|remove`: the registered toolkits, and imports a user steers.

A thin shell over `imports` (import, remove) and `import_report` (what to print). Imported
names, fields and reasons are untrusted text, so tables render them as plain text.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from toolkit_vault.actors import shell_actor
from toolkit_vault.bootstrap import list_toolkits, open_store, open_vault
from toolkit_vault.cli.ids import resolve_session
from toolkit_vault.cli.shell import emit, epilog, guarded, plural
from toolkit_vault.cli.tables import Column, Row, echo_table
from toolkit_vault.cli.toolkit_tools import tools
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.terminal import printable
from toolkit_vault.toolkits.listing import ListedToolkit
from toolkit_vault.toolkits.sources import SourceKind

# `toolkits list` imports only what a listing uses: the import, template and show commands
# import the packaging side, OAuth discovery and the server states where they run. Their
# options' values are copies, held equal to their sources by tests/test_cli_startup.py.
SKELETON_FORMATS = ("json", "env", "vscode", "mcpb")  # toolkit_package.skeletons.FORMATS
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8600"  # toolkits.remote_oauth.DEFAULT_PUBLIC_URL
NO_DISCOVER_VARIABLE = "TOOLKIT_VAULT_NO_DISCOVER"  # an air-gapped host, a test suite

__all__ = ["toolkits"]


@click.group(short_help="Registered toolkits: list, show, import, remove.")
def toolkits() -> None:
    """Registered toolkits: list them, show one's fields and secret marks, import MCP
    servers as toolkits, remove an import, accept an imported server's changed tools."""


toolkits.add_command(tools)


@toolkits.command(
    "list",
    short_help="Registered toolkits and where each came from.",
    epilog=epilog(
        "toolkit-vault toolkits list",
        "toolkit-vault toolkits list --wide   # alias, category, full digests",
        "toolkit-vault toolkits list --json",
    ),
)
@click.option("--wide", is_flag=True, help="Every column in full, one line per toolkit.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_list(wide: bool, as_json: bool) -> None:
    """List registered toolkits and where each came from.

    Needs no master key. Without it, imported definitions are listed as stored, marked
    `unverified` (their integrity MAC is under a key the master key protects); a toolkit
    that fails the check is not listed when the key is there, and cannot be configured.
    """
    settings = load_settings()
    try:
        registered, unchecked = list_toolkits(settings), None
    except VaultError as exc:
        registered, unchecked = _listed_without_keys(settings), exc.message
        click.echo(
            f"toolkit-vault: note: imported definitions are unverified ({unchecked})", err=True
        )
    entries: list[dict[str, Any]] = [
        {
            "name": t.name,
            "alias": t.alias,
            "category": t.category,
            "version": t.version,
            "tools": list(t.tools),
            "schema_digest": t.schema_digest,
            "source": str(t.source),
            "verified": unchecked is None or t.source.kind is not SourceKind.PACKAGE,
        }
        for t in registered
    ]
    if as_json:
        emit({"toolkits": entries})
        return
    columns = [Column("NAME"), Column("VERSION"), Column("SOURCE"), Column("TOOLS")]
    if wide:
        columns[1:1] = [Column("ALIAS"), Column("CATEGORY")]
    rows = []
    for e in entries:
        source = e["source"] if wide else _short_source(e["source"])
        cells = [e["name"], e["version"], source + ("" if e["verified"] else " (unverified)")]
        if wide:
            cells[1:1] = [e["alias"] or "", e["category"] or ""]
        rows.append(Row([printable(c) for c in (*cells, ", ".join(e["tools"]))]))
    echo_table(columns, rows, wide=wide)


def _short_source(source: str) -> str:
    prefix = f"{SourceKind.PACKAGE} sha256:"
    if source.startswith(prefix) and len(source) > len(prefix) + 12:
        return source[: len(prefix) + 12] + "…"  # a digest, never typed; names stay whole
    return source


def _listed_without_keys(settings: VaultSettings) -> list[ListedToolkit]:
    """The registry a keyless listing shows: built-in and plugin toolkits, and imported
    definitions as stored, unverified. It only lists; it never configures anything."""
    from toolkit_vault.toolkits.imports import stored_toolkits
    from toolkit_vault.toolkits.registry import ToolkitRegistry

    registry = ToolkitRegistry.default()
    store = open_store(settings)
    try:
        for factory, source in stored_toolkits(store, unverified=True):
            try:
                registry.register(factory, source)
            except VaultError:  # a name taken by a built-in or plugin: not listed either way
                continue
    finally:
        store.close()
    return [ListedToolkit.of(toolkit) for toolkit in registry.all()]


@toolkits.command(
    "show",
    short_help="One toolkit's fields, secret marks and reasons.",
    epilog=epilog(
        "toolkit-vault toolkits show filesystem",
        "toolkit-vault toolkits show 'io.github.example/server#package-0' --json",
    ),
)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_show(name: str, as_json: bool) -> None:
    """One toolkit: its definition, each field's secret mark and the reason for it, and
    the state of each of its local servers this machine's vault processes run."""
    from toolkit_vault.toolkits.import_report import describe_toolkit
    from toolkit_vault.toolkits.server_processes import server_states
    from toolkit_vault.toolkits.server_status import server_line

    vault = open_vault(load_settings())
    shown = describe_toolkit(vault.registry.get(name))
    shown["servers"] = server_states(name)  # its local servers, on this machine
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
    if (oauth := shown["oauth"]) is not None:
        where = (oauth.get("discovered") or {}).get("metadata")
        click.echo(f"  oauth: {printable(str(oauth.get('issuer') or oauth.get('token_endpoint')))}")
        if where:
            click.echo(f"  oauth metadata: {printable(str(where))} (RFC 9728, at import)")
    columns = [Column(h) for h in ("FIELD", "INPUT", "KIND", "SECRET", "REASON")]
    rows = [
        Row(
            [
                printable(str(f["field"])),
                printable(str(f["input"])),
                printable(str(f["kind"])),
                "secret" if f["secret"] else "public",
                printable(str(f["reason"])),
            ]
        )
        for f in shown["fields"]
    ]
    echo_table(columns, rows)
    if shown["other_fields_secret"]:
        click.echo("  any field the schema does not declare is secret")
    for server in shown["servers"]:
        click.echo(f"  server: {printable(server_line(server))}")


def _renames(values: tuple[str, ...]) -> dict[str, str]:
    renames: dict[str, str] = {}
    for value in values:
        old, sep, new = value.partition("=")
        if not sep or not old or not new:
            raise click.BadParameter(f"takes OLD=NEW, not {value!r}", param_hint="--rename")
        renames[old] = new
    return renames


@toolkits.command(
    "template",
    short_help="A client-config skeleton: a placeholder for every field.",
    epilog=epilog(
        "toolkit-vault toolkits template weather",
        "toolkit-vault toolkits template weather --format vscode > .vscode/mcp.json",
        "toolkit-vault toolkits template weather --format mcpb > manifest.json",
    ),
)
@click.argument("name")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(SKELETON_FORMATS),
    default="json",
    show_default=True,
    help="A configure request, .env lines, a VS Code mcp.json or an MCPB manifest.",
)
@guarded
def toolkits_template(name: str, fmt: str) -> None:
    """Print a skeleton of a client config for toolkit NAME: a placeholder for every field,
    secret ones declared secret (VS Code: password: true; MCPB: sensitive: true), so
    `toolkits import` of it marks the same fields secret. Never a value."""
    from toolkit_vault.core.templates import skeleton_of

    click.echo(skeleton_of(open_vault(load_settings()).toolkit(name), fmt), nl=False)


@toolkits.command(
    "import",
    short_help="Import MCP servers (file, - or registry URL) as toolkits.",
    epilog=epilog(
        "toolkit-vault toolkits import server.json",
        "toolkit-vault toolkits import claude_desktop_config.json --skip github",
        "toolkit-vault toolkits import - --rename filesystem=fs-server < mcp.json",
        "toolkit-vault toolkits import https://registry.example/v0/servers",
        "toolkit-vault toolkits import server.json --oauth-client-id my-client-id",
        "toolkit-vault toolkits import server.json --no-discover   # no network",
        "toolkit-vault toolkits import mcp.json --dry-run   # report; store nothing",
        "toolkit-vault toolkits import mcp.json --replace   # over another source's",
    ),
)
@click.argument("source")
@click.option("--only", multiple=True, metavar="NAME", help="Import only these servers.")
@click.option("--skip", multiple=True, metavar="NAME", help="Leave these servers out.")
@click.option("--rename", multiple=True, metavar="OLD=NEW", help="Import a server as NEW.")
@click.option("--secret", multiple=True, metavar="[SERVER:]FIELD", help="Mark a field secret.")
@click.option("--public", multiple=True, metavar="[SERVER:]FIELD", help="Mark a field public.")
@click.option("--strict", is_flag=True, help="All or nothing: any unusable server refuses all.")
@click.option(
    "--replace",
    "replace_source",
    is_flag=True,
    help="Replace a toolkit imported under the same name from another source (audited).",
)
@click.option("--dry-run", is_flag=True, help="Print the report; store nothing.")
@click.option(
    "--no-discover",
    is_flag=True,
    envvar=NO_DISCOVER_VARIABLE,
    help="Do not read remote servers' OAuth metadata (RFC 9728): no network at all "
    f"(also ${NO_DISCOVER_VARIABLE}=1).",
)
@click.option(
    "--oauth-client-id",
    metavar="ID",
    default=None,
    help="The client id for remote servers that use OAuth (else RFC 7591 registration).",
)
@click.option(
    "--allow-private",
    is_flag=True,
    help="Let OAuth discovery reach remote servers on private, loopback, link-local or "
    "NAT64-mapped addresses (refused by default: a package names them, not you).",
)
@click.option(
    "--allow-secret-argv",
    is_flag=True,
    help="Run packages whose published command line carries a secret field (refused by "
    "default: argv is visible to every local user); audited.",
)
@click.option(
    "--public-url",
    metavar="URL",
    default=DEFAULT_PUBLIC_URL,
    show_default=True,
    help="The origin `serve` is reached at: a registration names its OAuth callback there.",
)
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
    replace_source: bool,
    dry_run: bool,
    no_discover: bool,
    oauth_client_id: str | None,
    allow_private: bool,
    allow_secret_argv: bool,
    public_url: str,
    as_json: bool,
) -> None:
    """Import MCP servers from SOURCE: a file, `-` (stdin) or a registry URL.

    Reads a server.json, a registry listing or a JSON list of server.json, a bundle
    manifest.json, a Claude Desktop or VS Code config (JSONC) or a VS Code settings.json,
    at most 16 MiB. Each server becomes one toolkit; one that cannot be imported is skipped
    with its reason (exit 0 when any was imported): a name taken by a built-in or plugin
    toolkit, or differing from a registered one's in case only, or imported from another
    source (unless --replace). A remote server whose protected resource
    metadata (RFC 9728) names an authorization server gets `x-oauth` (docs/oauth.md).
    """
    from toolkit_package.selection import Selection
    from toolkit_vault.toolkits.import_report import oauth_warnings, report_lines
    from toolkit_vault.toolkits.imports import DiscoveryOptions, PackageRefused, import_package
    from toolkit_vault.toolkits.package_sources import read_package

    selection = Selection(
        only=frozenset(only),
        skip=frozenset(skip),
        rename=_renames(rename),
        secret=secret,
        public=public,
    )
    data = read_package(source)
    vault = open_vault(load_settings())
    try:
        report = import_package(
            vault.store,
            vault.registry,
            data,
            shell_actor(),
            selection,
            strict=strict,
            discovery=DiscoveryOptions(
                not no_discover, oauth_client_id, public_url, allow_private=allow_private
            ),
            replace_source=replace_source,
            dry_run=dry_run,
            allow_secret_argv=allow_secret_argv,
        )
    except PackageRefused as exc:  # --json still says what was skipped and why, on stdout
        if as_json and exc.report is not None:
            click.echo(json.dumps(exc.report.as_json(), indent=2))
        raise
    click.echo(
        json.dumps(report.as_json(), indent=2) if as_json else "\n".join(report_lines(report))
    )
    for entry in report.toolkits:
        if entry.replaced_digest is not None:
            click.echo(
                f"toolkit-vault: note: {printable(entry.name)} replaced the toolkit imported "
                f"from another source ({entry.replaced_digest})",
                err=True,
            )
    for warning in report.warnings:
        click.echo(f"toolkit-vault: WARNING: {warning.message}", err=True)
    for message in oauth_warnings(report):
        click.echo(f"toolkit-vault: WARNING: {message}", err=True)


@toolkits.command(
    "remove",
    short_help="Remove an imported toolkit; its sessions are unconfigured.",
    epilog=epilog("toolkit-vault toolkits remove 'io.github.example/server#package-0'"),
)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_remove(name: str, as_json: bool) -> None:
    """Remove an imported toolkit; sessions that had it configured no longer do."""
    from toolkit_vault.toolkits.imports import remove_toolkit

    vault = open_vault(load_settings())
    removed = remove_toolkit(vault.store, vault.registry, name, shell_actor())
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
    click.echo(f"removed {printable(removed.name)}; unconfigured in {plural(count, 'session')}")


@toolkits.command(
    "disconnect",
    short_help="End an OAuth connection: revoke its tokens, shred them.",
    epilog=epilog(
        "toolkit-vault toolkits disconnect calendar --session 3f2a9c1e --yes",
        "toolkit-vault toolkits disconnect calendar --principal my-agent --yes --json",
    ),
)
@click.argument("name")
@click.option("--session", "session_id", default=None, help="The session (id or unique prefix).")
@click.option("--principal", default=None, help="The principal (id or name) whose own it is.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required when not a tty).")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_disconnect(
    name: str, session_id: str | None, principal: str | None, yes: bool, as_json: bool
) -> None:
    """End a toolkit's OAuth connection in one scope: its tokens are revoked at the
    authorization server (RFC 7009, where it offers revocation; audited
    `oauth_disconnected`), then its stored configs there are crypto-shredded as `purge
    --toolkit` does. The agent connects again through a new intake link."""
    if (session_id is None) == (principal is None):
        raise VaultError("name one scope: --session S or --principal P")
    vault = open_vault(load_settings())  # with its toolkits: their x-oauth names the server
    if session_id is not None:
        session_id = resolve_session(vault.store, session_id)
    what = (f"session {session_id}" if principal is None else f"principal {principal}") + (
        f", toolkit {printable(name)}"
    )
    if not yes:
        if not sys.stdin.isatty():
            raise VaultError("disconnect is irreversible: confirm with --yes (stdin is not a tty)")
        if not click.confirm(f"Revoke and destroy the connection of {what}?", err=True):
            raise VaultError("disconnect cancelled; nothing was changed")
    if principal is not None:
        report = vault.purge_principal(shell_actor(), principal, name)
    else:
        report = vault.purge(shell_actor(), str(session_id), name)
    if as_json:
        emit(report.as_json())
    else:
        click.echo(f"disconnected {what}: {plural(report.versions, 'version')} shredded")
