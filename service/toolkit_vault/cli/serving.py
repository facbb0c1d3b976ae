"""Commands that set the vault up and serve it: `init`, `stdio` and `serve`.

These and `toolkits` are the only commands that load toolkit plugins; the operator and
auditor commands live apart (`operators`) and open the vault without them.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import click

from toolkit_vault.audit.devices import reopen_on_sighup
from toolkit_vault.bootstrap import LOCAL_PRINCIPAL, init_vault, open_provider, open_vault
from toolkit_vault.cli.keyflags import key_options, provider_flags
from toolkit_vault.cli.shell import SERVE_ENV, epilog, guarded
from toolkit_vault.errors import VaultError
from toolkit_vault.logs import (
    LOG_COPY_VARIABLE,
    configure_logging,
    copy_log,
    hold_library_loggers,
    redact_every_record,
    register_secrets,
)
from toolkit_vault.settings import EnvSettings, load_settings, oidc_settings
from toolkit_vault.store.urls import shown_url
from toolkit_vault.toolkits.served import sandbox_warning
from toolkit_vault.transports.http_server import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    SLOW_CONNECTIONS_PER_IP,
)
from toolkit_vault.transports.stdio import serve_stdio

__all__ = ["init", "mcp", "serve", "stdio"]

_PUBLIC_URL = re.compile(
    r"https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?(/[\w.~%/-]*)?", re.A
)


@click.command(
    short_help="Create or check the vault home; migrate the database.",
    epilog=epilog(
        "toolkit-vault init --key-provider file   # master key in a 0600 file",
        "toolkit-vault init --key-provider aws-kms --key-id alias/toolkit-vault",
        "toolkit-vault init                       # again: checks, changes nothing",
    ),
)
@provider_flags
@guarded
def init(key_provider: str | None, **flags: Any) -> None:
    """Create or check the vault home, migrate the database, set up the master key.

    Safe to run again. The first run records the database, the key provider and its flags
    (where the master key lives: an existing KMS key, a PKCS#11 token) in the home
    (vault.json), so later commands need none.
    """
    recorded = load_settings()
    if recorded.initialized and key_provider and key_provider != recorded.key_provider:
        raise VaultError(f"{recorded.home} already uses the {recorded.key_provider} key provider")
    settings = load_settings(key_provider, key_options(flags))
    report = init_vault(settings)
    verb = "created" if report.created_key else "using"
    database = shown_url(report.database_url)
    click.echo(f"vault home: {report.home}", err=True)
    click.echo(f"database:   {database}", err=True)
    click.echo(f"master key: {verb} {report.key_location}", err=True)
    if settings.audit_devices:  # (checked by init_vault: a URL with a password is refused)
        mode = "fail-closed" if settings.audit_fail_closed else "fail-open"
        click.echo(f"audit to:   {', '.join(settings.audit_devices)} ({mode})", err=True)
    if report.upgraded is not None:
        signed = sum(report.upgraded["signed"].values())
        left = report.upgraded["unsigned_count"]
        click.echo(f"upgraded:   {signed} rows authenticated, {left} left unsigned", err=True)
        for line in report.upgraded["left_unsigned"]:
            click.echo(f"  not believed: {line}", err=True)
    if report.hierarchy is not None:
        moved = report.hierarchy
        click.echo(
            f"upgraded:   {moved['rewrapped']} data keys moved to vault key {moved['vault_key']}"
            + (f", {len(moved['failed'])} left (do not open)" if moved["failed"] else ""),
            err=True,
        )


@click.command(
    short_help="A2E as JSON lines on stdin/stdout.",
    epilog=epilog(
        "toolkit-vault stdio < requests.jsonl > responses.jsonl",
        """echo '{"type":"handshake/req","capabilities":["toolkits"]}' |""",
        "  toolkit-vault stdio",
    ),
)
@guarded
def stdio() -> None:
    """Speak A2E as JSON lines on stdin/stdout, one message per line, as the local
    principal (whoever can read the home). A short guide goes to stderr only when stdin and
    stderr are a terminal; piped, stdout carries protocol and nothing else."""
    hold_library_loggers()  # a credential check's request URL is no log line
    _copy_log("stdio")
    vault = open_vault(load_settings())
    if sys.stdin.isatty() and sys.stderr.isatty():
        click.echo(
            "toolkit-vault: A2E toolkits over stdio; one JSON message per line. Start with\n"
            '  {"type":"handshake/req","capabilities":["toolkits"]}\n'
            'then {"type":"toolkit/list/req"} or {"type":"toolkit/configure/req",'
            '"toolkit_name":"filesystem","config":{"root_dir":"/tmp"}}. Ctrl-D ends.',
            err=True,
        )
    serve_stdio(vault, LOCAL_PRINCIPAL)


@click.command(
    short_help="MCP over stdio, for clients that launch servers.",
    epilog=epilog(
        "toolkit-vault mcp            # what Claude Desktop, VS Code or Cursor launch",
        "toolkit-vault clients config --client claude-desktop   # the entry to paste",
    ),
)
@guarded
def mcp() -> None:
    """Speak MCP over stdio as the local principal: every toolkit's tools, their
    credentials kept in the vault. stdout carries protocol and nothing else."""
    from toolkit_vault.transports.mcp.over_stdio import serve_mcp_stdio  # the SDK, only here

    hold_library_loggers()
    _copy_log("mcp")
    serve_mcp_stdio(open_vault(load_settings()), LOCAL_PRINCIPAL)


@click.command(
    short_help="HTTP + WebSocket A2E and the admin API.",
    epilog=epilog(
        "toolkit-vault serve                              # http://127.0.0.1:8600",
        "toolkit-vault serve --port 8700 --log-format text",
        "toolkit-vault serve --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem",
        env=SERVE_ENV,
    ),
)
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
    "--body-timeout",
    type=click.FloatRange(0.1, 300),
    default=BODY_TIMEOUT_S,
    show_default=True,
    help="Seconds a client has to send a request's body, once its headers are in (then 408).",
)
@click.option(
    "--slow-connections-per-ip",
    type=click.IntRange(1),
    default=SLOW_CONNECTIONS_PER_IP,
    show_default=True,
    help="Connections one client address may have still sending a request; more are closed.",
)
@click.option(
    "--public-url",
    default=None,
    metavar="URL",
    help="The origin intake links name (https://vault.example.com); default: the address "
    "served (--host, --port, TLS).",
)
@click.option(
    "--oidc-issuer",
    default=None,
    metavar="URL",
    help="Let people sign in to the console through this OpenID provider (docs/oidc.md).",
)
@click.option("--oidc-client-id", default=None, help="The vault's client id at that provider.")
@click.option(
    "--oidc-client-secret-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A 0600 file holding the client secret (a confidential client).",
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
    body_timeout: float,
    slow_connections_per_ip: int,
    public_url: str | None,
    oidc_issuer: str | None,
    oidc_client_id: str | None,
    oidc_client_secret_file: Path | None,
    log_format: str,
) -> None:
    """Serve A2E over WebSocket and HTTP POST at /a2e and the admin API under /v1/
    (OpenAPI at /openapi.json, with a token); every route but /healthz needs a bearer token
    (`tokens create`). A port already in use is one line on stderr, exit status 1."""
    from toolkit_vault.core.reminders import ExpiryReminders
    from toolkit_vault.transports.expiry_watch import ExpiryWatch
    from toolkit_vault.transports.http_api import Limits, create_app
    from toolkit_vault.transports.http_server import run
    from toolkit_vault.transports.oauth_watch import OAuthWatch
    from toolkit_vault.transports.registry_watch import RegistryWatch

    if (tls_cert is None) != (tls_key is None):
        raise VaultError("--tls-cert and --tls-key go together")
    if tls_cert is None and not insecure and not _is_loopback(host):
        raise VaultError(
            f"refusing to serve {host} without TLS: give --tls-cert/--tls-key or --insecure"
        )
    scheme = "https" if tls_cert else "http"
    origin = _public_origin(public_url) if public_url else _served_origin(scheme, host, port)
    _check_port(host, port)
    configure_logging("INFO", json_lines=log_format == "json")
    _copy_log("serve")
    redact_every_record()  # a plugin's own handlers never pass the handler's filter
    settings = load_settings()
    oidc = oidc_settings(oidc_issuer, oidc_client_id, oidc_client_secret_file)
    if oidc is not None and oidc.client_secret is not None:  # never in a log line
        register_secrets([oidc.client_secret.reveal().decode()])
    telemetry = _start_telemetry()
    vault = open_vault(settings, audit_stream=sys.stdout.buffer)  # `stdout` device: stdout
    reopen_on_sighup(vault.store)  # logrotate: audit files open again on SIGHUP
    if (sandbox := sandbox_warning()) is not None:  # the operator hears it before any launch
        click.echo(f"toolkit-vault: WARNING: {sandbox}", err=True)
    provider = open_provider(settings)
    if vault.store.on_postgres:
        from toolkit_vault.transports.relay import PgEventRelay

        PgEventRelay(vault).start()  # status events reach the other replicas' WebSockets
    RegistryWatch(vault).start()  # imports and removals made elsewhere reach idle sockets
    OAuthWatch(vault).start()  # OAuth tokens of live toolkits refreshed before they expire
    ExpiryWatch(ExpiryReminders(vault)).start()  # credentials that end: reminded, then ended
    limits = Limits(max_message_bytes, connections_per_principal, rate, max(1, int(rate * 2)))
    click.echo(
        f"toolkit-vault: serving A2E on {scheme}://{host}:{port}/a2e (WebSocket and POST), "
        f"admin API on {scheme}://{host}:{port}/v1/ (OpenAPI at /openapi.json, with a token).\n"
        "  An agent needs a token: toolkit-vault tokens create --role agent --name my-agent"
        + "".join(f"\n  {line}" for line in telemetry),
        err=True,
    )
    if oidc is not None:
        click.echo(
            f"  Console sign-in through {oidc.issuer} (client {oidc.client_id}); roles from "
            "toolkit-vault console-roles.",
            err=True,
        )
    run(
        create_app(vault, provider, limits, origin, oidc),
        host,
        port,
        tls_cert=tls_cert,
        tls_key=tls_key,
        ws_max_size=max_message_bytes * 4,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        slow_connections_per_ip=slow_connections_per_ip,
    )


def _start_telemetry() -> list[str]:
    """Metrics on or off, their loopback listener, traces (`EnvSettings`); what to say."""
    from toolkit_vault.telemetry import traces
    from toolkit_vault.telemetry.metrics import METRICS
    from toolkit_vault.transports.http_health import serve_metrics_on_loopback

    env = EnvSettings.from_environment()
    METRICS.enabled = env.metrics
    said = ["metrics: /metrics (operator or auditor token)" if env.metrics else "metrics: off"]
    if env.metrics and env.metrics_listen:
        host, port = serve_metrics_on_loopback(env.metrics_listen)
        said.append(f"metrics: also http://{host}:{port}/metrics (loopback, no token)")
    if env.otel_traces:
        if traces.configure_tracing():
            said.append("traces: OpenTelemetry, OTLP over HTTP (OTEL_EXPORTER_OTLP_*)")
        else:
            raise VaultError("TOOLKIT_VAULT_OTEL_TRACES needs the otel extra installed")
    return said


def _copy_log(command: str) -> None:
    """`TOOLKIT_VAULT_LOG_COPY`: every log record to a file too (tests, debugging); a
    directory it cannot write to is one clear line, not a traceback."""
    try:
        copy_log(command)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
        raise VaultError(f"{LOG_COPY_VARIABLE}: cannot write the log copy: {reason}") from None


def _public_origin(url: str) -> str:
    """`--public-url` as intake links use it: http(s), a host, an optional port and path;
    nothing else (no credentials, query or fragment); a trailing slash dropped."""
    if not _PUBLIC_URL.fullmatch(url):
        raise VaultError("--public-url must look like https://vault.example.com[:port][/path]")
    return url.rstrip("/")


def _served_origin(scheme: str, host: str, port: int) -> str | None:
    """The origin of the address `serve` binds, for intake links without --public-url. None
    for a wildcard address or port 0 (no one origin): each link then names the local address
    of the socket its request came in on, never a request header."""
    if port == 0 or host in ("", "0.0.0.0", "::"):  # noqa: S104 (compared, not bound)
        return None
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _check_port(host: str, port: int) -> None:
    """Fail before the banner, in one line, when the address cannot be bound: uvicorn would
    report it only later, inside its JSON log lines. Bound as uvicorn binds (SO_REUSEADDR),
    so a port in TIME_WAIT is not refused here only to work there."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise VaultError(
                    f"cannot serve on {host}:{port}: the address is already in use (another "
                    "server?); stop it or choose another --port"
                ) from None
            reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
            raise VaultError(f"cannot serve on {host}:{port}: {reason}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
