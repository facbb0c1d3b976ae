"""`toolkit-vault`: the operator's command line, a thin shell over the service API.

Every command exits 0 on success, or non-zero with one clear line on stderr. `--json`
output is stable: documented in the README, keys only ever added.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text
from sqlalchemy.engine import make_url

from .bootstrap import LOCAL_PRINCIPAL, init_vault, open_store, open_vault
from .errors import VaultError
from .history import history, iso_time, parse_time
from .imports import import_package, read_package, report_lines
from .keys import provider_for
from .logs import configure_logging
from .principals import ROLES, create_token, list_principals, revoke
from .registry import ToolkitRegistry
from .rotation import check_store, key_status, retire_key, rotate_keys
from .service import Vault
from .settings import VaultSettings, load_settings
from .stdio import serve_stdio

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str) -> None:
    click.echo(f"toolkit-vault: error: {message}", err=True)
    sys.exit(1)


def guarded(fn: F) -> F:
    """Turn the vault's errors into one line on stderr and exit status 1."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except VaultError as exc:
            _fail(exc.message)
        except Exception as exc:  # never a traceback: it could carry more than it should
            logging.getLogger(__name__).debug("unexpected error", exc_info=True)
            _fail(f"unexpected {type(exc).__name__}; nothing further was changed")

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper  # type: ignore[return-value]


def open_for_operators(settings: VaultSettings) -> Vault:
    """The vault without toolkits: key, audit, purge and token commands never load plugins
    or compile schemas, so a broken plugin cannot stop an operator."""
    return open_vault(settings, registry=ToolkitRegistry())


@click.group()
@click.version_option(package_name="toolkit-vault")
def main() -> None:
    """Credential vault for A2E agent toolkits (home: $TOOLKIT_VAULT_HOME, default ./var)."""
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s"
    )


@main.command()
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


@main.command()
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


@main.command()
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

    from .http import Limits, create_app

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
        from .relay import PgEventRelay

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


@main.group()
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


# -- keys and check (operators) ------------------------------------------------------------


@contextlib.contextmanager
def _progress(label: str, enabled: bool) -> Iterator[Callable[[int], Callable[[int], None]] | None]:
    """A rich progress bar on stderr; `start(total)` returns the advance function."""
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:

        def start(total: int) -> Callable[[int], None]:
            task = progress.add_task(label, total=total)
            return lambda n: progress.advance(task, n)

        yield start


@main.group()
def keys() -> None:
    """Master keys: status, rotation, retirement."""


@keys.command("status")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_status(as_json: bool) -> None:
    """Every master key: primary, retired, wrapped keys it protects, held by the provider."""
    settings = load_settings()
    vault = open_for_operators(settings)
    status = key_status(
        vault.store, provider_for(settings.key_provider, settings.home, settings.vault_id)
    )
    if as_json:
        click.echo(json.dumps({"keys": status}, indent=2))
        return
    table = Table("kek id", "primary", "retired", "wrapped keys", "in provider")
    for k in status:
        table.add_row(
            k["kek_id"],
            "yes" if k["primary"] else "",
            _when(k["retired_at"]),
            str(k["wrapped_keys"]),
            "yes" if k["in_provider"] else "NO",
        )
    Console().print(table)


@keys.command("rotate")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=500, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (no progress bar).")
@guarded
def keys_rotate(batch_size: int, as_json: bool) -> None:
    """Make a new master key primary and rewrap every wrapped key under it.

    Idempotent and resumable: a killed run is finished by running it again.
    """
    settings = load_settings()
    vault = open_for_operators(settings)
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    with _progress("rewrapping", not as_json) as start:
        report = rotate_keys(vault.store, provider, batch_size=batch_size, start=start)
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        verb = "resumed rotation to" if report.resumed else "rotated to"
        click.echo(
            f"{verb} {report.primary}: {report.rewrapped} versions and "
            f"{report.internal_rewrapped} internal keys rewrapped, {len(report.failed)} failed"
        )
    if report.failed:
        raise VaultError(
            f"{len(report.failed)} versions failed to decrypt and were left as they are"
        )


@keys.command("retire")
@click.argument("kek_id")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def keys_retire(kek_id: str, as_json: bool) -> None:
    """Retire a master key that no wrapped key uses any more, and remove it from the provider."""
    settings = load_settings()
    vault = open_for_operators(settings)
    provider = provider_for(settings.key_provider, settings.home, settings.vault_id)
    result = retire_key(vault.store, provider, kek_id)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    elif result["removed_from_provider"]:
        click.echo(f"retired {kek_id} and removed it from {provider.where}")
    else:
        click.echo(f"retired {kek_id}; remove it from {provider.where} yourself")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (no progress bar).")
@guarded
def check(as_json: bool) -> None:
    """Decrypt-verify every stored version in memory; print counts, never a value."""
    vault = open_for_operators(load_settings())
    with _progress("checking", not as_json) as start:
        result = check_store(vault.store, vault.ring, start)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(
            f"{result['versions']} versions: {result['intact']} intact, {result['failed']} failed, "
            f"{result['no_ciphertext']} without ciphertext (failed or purged attempts)"
        )
    if result["failed"]:
        raise VaultError(f"{result['failed']} stored versions failed to decrypt")


def _when(epoch: float | None) -> str:
    return "" if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


# -- history, audit verify, purge, tokens (auditors and operators) --------------------------

OPERATOR = "operator"  # the actor recorded for operator actions taken on the command line


def _emit(payload: dict[str, Any]) -> None:
    click.echo(json.dumps(payload, indent=2))


def _table(*columns: str) -> Table:
    """A table that folds long cells (ids, times) instead of cutting them off."""
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


@main.command("history")
@click.option("--session", "session_id", default=None, help="Only this session.")
@click.option("--toolkit", default=None, help="Only this toolkit.")
@click.option(
    "--since",
    default=None,
    metavar="TIME",
    help="Only versions stored at or after TIME: epoch seconds or ISO 8601 (naive = UTC).",
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def history_command(
    session_id: str | None, toolkit: str | None, since: str | None, as_json: bool
) -> None:
    """Every config version: actor, time, status, public config, secret fingerprints.

    Needs no master key. A fingerprint is equal between two versions exactly when that
    secret is unchanged; it reveals nothing else. In the table, * marks a fingerprint
    that differs from the previous listed version of the same session and toolkit.
    """
    entries = history(
        open_store(load_settings()),
        session_id,
        toolkit,
        None if since is None else parse_time(since),
    )
    if as_json:
        _emit({"versions": entries})
        return
    table = _table("session", "toolkit", "v", "status", "actor", "time (UTC)", "secrets")
    previous: dict[tuple[str, str], dict[str, str | None]] = {}
    for e in entries:
        key = (e["session_id"], e["toolkit_name"])
        before = previous.get(key, {})
        previous[key] = e["secret_fingerprints"]
        secrets = [
            _fingerprint_cell(pointer, fp, before)
            for pointer, fp in sorted(e["secret_fingerprints"].items())
        ]
        table.add_row(
            e["session_id"][:8],
            e["toolkit_name"],
            f"{e['version']}{' (current)' if e['current'] else ''}",
            e["status"],
            e["actor"],
            e["time"],
            "\n".join(secrets),
        )
    Console().print(table)
    click.echo(f"{len(entries)} versions", err=True)


def _fingerprint_cell(pointer: str, fp: str | None, before: dict[str, str | None]) -> str:
    changed = "*" if before and before.get(pointer) != fp else ""
    return f"{pointer} {(fp or 'purged')[:12]}{changed}"


@main.group()
def audit() -> None:
    """The tamper-evident audit log (an HMAC hash chain)."""


@audit.command("verify")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def audit_verify(as_json: bool) -> None:
    """Verify the audit chain and its head; exit 1 naming the first bad event.

    Also checks that every config version has its `configure` event (and every purged
    one a `purge` event). Needs the master key (the audit key is stored wrapped by it).
    """
    report = open_for_operators(load_settings()).verify_audit()
    if as_json:
        _emit(report.as_json())
    else:
        click.echo(f"{report.verified}/{report.events} events verified; {report.message}")
        for v in report.unaudited_versions:
            click.echo(f"  {v['session_id']} {v['toolkit_name']} v{v['version']}: {v['reason']}")
    if report.problem in ("edited", "deleted", "inserted", "truncated"):
        raise VaultError(f"audit chain broken at event {report.first_bad_seq}: {report.message}")
    if not report.ok:
        raise VaultError(report.message)


@main.command("purge")
@click.option("--session", "session_id", required=True, help="The session to purge.")
@click.option("--toolkit", default=None, help="Only this toolkit of the session.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (required when not a tty).")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def purge_command(session_id: str, toolkit: str | None, yes: bool, as_json: bool) -> None:
    """Crypto-shred stored configs: destroy wrapped keys, ciphertext and fingerprints.

    Irreversible. History keeps the metadata (status `purged`); the purge is audited.
    """
    what = f"session {session_id}" + (f", toolkit {toolkit}" if toolkit else "")
    if not yes:
        if not sys.stdin.isatty():
            raise VaultError("purge is irreversible: confirm with --yes (stdin is not a tty)")
        if not click.confirm(f"Destroy every stored secret of {what}?", err=True):
            raise VaultError("purge cancelled; nothing was changed")
    report = open_for_operators(load_settings()).purge(OPERATOR, session_id, toolkit)
    if as_json:
        _emit(report.as_json())
    else:
        names = ", ".join(report.toolkits) or "none left to purge"
        click.echo(f"purged {report.versions} versions of {what} ({names})")
    if report.files_scrubbed is False:
        click.echo(
            "toolkit-vault: warning: another process kept the SQLite WAL busy; old pages stay "
            "in it until its next checkpoint",
            err=True,
        )


@main.group()
def tokens() -> None:
    """Principals and their bearer tokens (roles: agent, operator, auditor)."""


@tokens.command("create")
@click.option("--role", required=True, type=click.Choice(ROLES), help="The principal's role.")
@click.option("--name", required=True, help="A unique name for the principal.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (includes the token).")
@guarded
def tokens_create(role: str, name: str, as_json: bool) -> None:
    """Create a principal and print its token: shown this once, stored only hashed."""
    vault = open_for_operators(load_settings())
    principal_id, token = create_token(vault.store, role, name, actor=OPERATOR)
    if as_json:
        _emit({"principal_id": principal_id, "name": name, "role": role, "token": token})
        return
    click.echo(f"created {role} {name} ({principal_id}); store the token now:", err=True)
    click.echo(token)


@tokens.command("list")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def tokens_list(as_json: bool) -> None:
    """List principals (never a token or its hash)."""
    principals = list_principals(open_store(load_settings()))
    if as_json:
        _emit({"principals": [p.as_json() for p in principals]})
        return
    table = _table("name", "role", "principal id", "token", "created (UTC)", "revoked (UTC)")
    for p in principals:
        table.add_row(
            p.name,
            p.role,
            p.principal_id,
            "yes" if p.has_token else "",
            iso_time(p.created_at),
            "" if p.revoked_at is None else iso_time(p.revoked_at),
        )
    Console().print(table)


@tokens.command("revoke")
@click.argument("name_or_id")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def tokens_revoke(name_or_id: str, as_json: bool) -> None:
    """Revoke a principal's token (by name or principal id); revoking twice is harmless."""
    vault = open_for_operators(load_settings())
    principal, changed = revoke(vault.store, name_or_id, actor=OPERATOR)
    if as_json:
        _emit({**principal.as_json(), "revoked_now": changed})
    elif changed:
        click.echo(f"revoked {principal.name} ({principal.principal_id})")
    else:
        click.echo(f"{principal.name} ({principal.principal_id}) was already revoked")
