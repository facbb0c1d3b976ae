"""`toolkit-vault`: the operator's command line, a thin shell over the service API.

Every command exits 0 on success, or non-zero with one clear line on stderr. `--json`
output is stable: documented in the README, keys only ever added.
"""

from __future__ import annotations

import contextlib
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
from sqlalchemy.engine import make_url

from .bootstrap import LOCAL_PRINCIPAL, init_vault, open_vault
from .errors import VaultError
from .keys import provider_for
from .rotation import check_store, key_status, retire_key, rotate_keys
from .settings import load_settings
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
        table.add_row(d.name, d.alias, d.category, d.version, ", ".join(d.tools), t.source)
    Console().print(table)


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
    vault = open_vault(settings)
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
    vault = open_vault(settings)
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
    vault = open_vault(settings)
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
    vault = open_vault(load_settings())
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
