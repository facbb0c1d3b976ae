"""Commands that set the vault up and serve it: `init`, `stdio`, `serve` and `toolkits`.

These are the only commands that load toolkit plugins; the operator and auditor commands
live apart (`operators`) and open the vault without them.
"""

from __future__ import annotations

import ipaddress
import json

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text
from sqlalchemy.engine import make_url

from ..bootstrap import LOCAL_PRINCIPAL, init_vault, open_vault
from ..errors import VaultError
from ..imports import import_package, read_package, report_lines
from ..keys import provider_for
from ..logs import configure_logging
from ..settings import load_settings
from ..stdio import serve_stdio
from ..webserver import HEADER_TIMEOUT_S
from .shell import guarded

__all__ = ["init", "serve", "stdio", "toolkits"]


@click.command()
@click.option(
    "--key-provider",
    type=click.Choice(["keyring", "file", "env"]),
    default=None,
    help="Where the master key lives (default: recorded in the home, else the OS keyring).",
)
@guarded
def init(key_provider: str | None) -> None:
    """Create or check the vault home, migrate the database, set up the master key."""
    recorded = load_settings()
    if recorded.initialized and key_provider and key_provider != recorded.key_provider:
        raise VaultError(f"{recorded.home} already uses the {recorded.key_provider} key provider")
    settings = load_settings(key_provider)  # type: ignore[arg-type]
    report = init_vault(settings)
    verb = "created" if report.created_key else "using"
    database = make_url(report.database_url).render_as_string(hide_password=True)
    click.echo(f"vault home: {report.home}", err=True)
    click.echo(f"database:   {database}", err=True)
    click.echo(f"master key: {verb} {report.key_location}", err=True)


@click.command()
@guarded
def stdio() -> None:
    """Speak A2E as JSON lines on stdin/stdout (one message per line)."""
    vault = open_vault(load_settings())
    click.echo(
        "toolkit-vault: A2E toolkits over stdio; one JSON message per line. Start with\n"
        '  {"type":"handshake/req","capabilities":["toolkits"]}\n'
        'then {"type":"toolkit/list/req"} or {"type":"toolkit/configure/req",'
        '"toolkit_name":"filesystem","config":{"root_dir":"/tmp"}}. Ctrl-D ends.',
        err=True,
    )
    serve_stdio(vault, LOCAL_PRINCIPAL)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=8600, show_default=True)
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--insecure", is_flag=True, help="Allow a non-loopback address without TLS.")
@click.option(
    "--max-message-bytes", type=click.IntRange(1024), default=1024 * 1024, show_default=True
)
@click.option("--connections-per-principal", type=click.IntRange(1), default=8, show_default=True)
@click.option(
    "--rate",
    type=click.FloatRange(0.1),
    default=50.0,
    show_default=True,
    help="Requests per second per principal.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(0.1, 300),
    default=HEADER_TIMEOUT_S,
    show_default=True,
    help="Seconds a client has to send a request's line and headers.",
)
@click.option(
    "--log-format", type=click.Choice(["json", "text"]), default="json", show_default=True
)
@guarded
def serve(
    host: str,
    port: int,
    tls_cert: str | None,
    tls_key: str | None,
    insecure: bool,
    max_message_bytes: int,
    connections_per_principal: int,
    rate: float,
    header_timeout: float,
    log_format: str,
) -> None:
    """HTTP + WebSocket A2E (/a2e) and the admin API (/v1/...), bearer tokens required."""
    from ..http import Limits, create_app
    from ..webserver import run

    if (tls_cert is None) != (tls_key is None):
        raise VaultError("--tls-cert and --tls-key go together")
    if tls_cert is None and not insecure and not _is_loopback(host):
        raise VaultError(
            f"refusing to serve {host} without TLS: give --tls-cert/--tls-key or --insecure"
        )
    configure_logging("INFO", json_lines=log_format == "json")
    settings = load_settings()
    vault = open_vault(settings)
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    if vault.store.engine.dialect.name == "postgresql":
        from ..relay import PgEventRelay

        PgEventRelay(vault).start()  # status events reach the other replicas' WebSockets
    limits = Limits(max_message_bytes, connections_per_principal, rate, max(1, int(rate * 2)))
    scheme = "https" if tls_cert else "http"
    click.echo(
        f"toolkit-vault: serving A2E on {scheme}://{host}:{port}/a2e (WebSocket and POST), "
        f"admin API on {scheme}://{host}:{port}/v1/ (OpenAPI at /openapi.json, with a token).\n"
        "  An agent needs a token: toolkit-vault tokens create --role agent --name my-agent",
        err=True,
    )
    run(
        create_app(vault, provider, limits),
        host,
        port,
        tls_cert=tls_cert,
        tls_key=tls_key,
        ws_max_size=max_message_bytes * 4,
        header_timeout=header_timeout,
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.group()
def toolkits() -> None:
    """Registered toolkits."""


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


@toolkits.command("import")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def toolkits_import(path: str, as_json: bool) -> None:
    """Import MCP servers (server.json, bundle manifest.json, client config; `-`: stdin)."""
    data = read_package(path)
    vault = open_vault(load_settings())
    report = import_package(vault.store, vault.registry, data, LOCAL_PRINCIPAL.principal_id)
    click.echo(
        json.dumps(report.as_json(), indent=2) if as_json else "\n".join(report_lines(report))
    )
    for warning in report.warnings:
        click.echo(f"toolkit-vault: WARNING: {warning.message}", err=True)
