"""Commands that set the vault up and serve it: `init`, `stdio` and `serve`.

These and `toolkits` are the only commands that load toolkit plugins; the operator and
auditor commands live apart (`operators`) and open the vault without them.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import click
from sqlalchemy.engine import make_url

from ..bootstrap import LOCAL_PRINCIPAL, init_vault, open_provider, open_vault
from ..errors import VaultError
from ..logs import configure_logging
from ..settings import load_settings
from ..stdio import serve_stdio
from .keyflags import key_options, provider_flags
from .shell import guarded

__all__ = ["init", "serve", "stdio"]


@click.command()
@provider_flags
@guarded
def init(key_provider: str | None, **flags: Any) -> None:
    """Create or check the vault home, migrate the database, set up the master key.

    The key provider's flags say where the master key lives (an existing KMS key, a PKCS#11
    token); `init` records them, so later commands need none.
    """
    recorded = load_settings()
    if recorded.initialized and key_provider and key_provider != recorded.key_provider:
        raise VaultError(f"{recorded.home} already uses the {recorded.key_provider} key provider")
    settings = load_settings(key_provider, key_options(flags))
    report = init_vault(settings)
    verb = "created" if report.created_key else "using"
    database = make_url(report.database_url).render_as_string(hide_password=True)
    click.echo(f"vault home: {report.home}", err=True)
    click.echo(f"database:   {database}", err=True)
    click.echo(f"master key: {verb} {report.key_location}", err=True)
    if report.hierarchy is not None:
        moved = report.hierarchy
        click.echo(
            f"upgraded:   {moved['rewrapped']} data keys moved to vault key {moved['vault_key']}"
            + (f", {len(moved['failed'])} left (do not open)" if moved["failed"] else ""),
            err=True,
        )


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
    log_format: str,
) -> None:
    """HTTP + WebSocket A2E (/a2e) and the admin API (/v1/...), bearer tokens required."""
    import uvicorn

    from ..http import Limits, create_app

    if (tls_cert is None) != (tls_key is None):
        raise VaultError("--tls-cert and --tls-key go together")
    if tls_cert is None and not insecure and not _is_loopback(host):
        raise VaultError(
            f"refusing to serve {host} without TLS: give --tls-cert/--tls-key or --insecure"
        )
    configure_logging("INFO", json_lines=log_format == "json")
    settings = load_settings()
    vault = open_vault(settings)
    provider = open_provider(settings)
    if vault.store.engine.dialect.name == "postgresql":
        from ..relay import PgEventRelay

        PgEventRelay(vault).start()  # status events reach the other replicas' WebSockets
    limits = Limits(max_message_bytes, connections_per_principal, rate, max(1, int(rate * 2)))
    scheme = "https" if tls_cert else "http"
    click.echo(
        f"toolkit-vault: serving A2E on {scheme}://{host}:{port}/a2e (WebSocket and POST), "
        f"admin API on {scheme}://{host}:{port}/v1/ (OpenAPI at /openapi.json).\n"
        "  An agent needs a token: toolkit-vault tokens create --role agent --name my-agent",
        err=True,
    )
    uvicorn.run(
        create_app(vault, provider, limits),
        host=host,
        port=port,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        ws_max_size=max_message_bytes * 4,
        log_config=None,
        access_log=False,
        server_header=False,
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
