"""`toolkit-vault`: the operator's command line, a thin shell over the service API.

Every command exits 0 on success, or non-zero with one clear line on stderr. `--json`
output is stable: documented in the README, keys only ever added.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url

from .bootstrap import LOCAL_PRINCIPAL, init_vault, open_vault
from .errors import VaultError
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
