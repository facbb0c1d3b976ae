"""`tokens create|list|revoke`: principals and their bearer tokens, for operators.

A token is printed once, at creation, alone on stdout (for scripts); nothing else here ever
shows one or its hash. Principals are shown and typed by name; an id (or a unique prefix of
one) works too. A token made with `--ttl` expires; `tokens list` says when, and whether it
has.
"""

from __future__ import annotations

from typing import Any

import click

from toolkit_vault.access.principals import (
    MAX_TTL,
    ROLES,
    create_token,
    list_principals,
    parse_ttl,
    revoke,
)
from toolkit_vault.actors import shell_actor
from toolkit_vault.bootstrap import open_store
from toolkit_vault.cli.ids import resolve_principal
from toolkit_vault.cli.shell import (
    STORE_ENV,
    emit,
    epilog,
    guarded,
    iso_seconds,
    open_for_operators,
    said_if_behind,
)
from toolkit_vault.cli.tables import Column, Row, echo_table
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import load_settings

__all__ = ["tokens"]


@click.group(short_help="Principals and their bearer tokens.")
def tokens() -> None:
    """Principals and their bearer tokens (roles: agent, operator, auditor)."""


def _ttl(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_ttl(value)
    except VaultError as exc:
        raise click.BadParameter(exc.message) from None


@tokens.command(
    "create",
    short_help="Create a principal; print its token once.",
    epilog=epilog(
        "toolkit-vault tokens create --role agent --name my-agent --ttl 30d",
        "TOKEN=$(toolkit-vault tokens create --role auditor --name alice --ttl 12h)",
        "toolkit-vault tokens create --role operator --name ops --json",
    ),
)
@click.option("--role", required=True, type=click.Choice(ROLES), help="The principal's role.")
@click.option("--name", required=True, help="A unique name for the principal.")
@click.option(
    "--ttl",
    callback=_ttl,
    metavar="DURATION",
    help=f"Expire the token after this long: 90s, 15m, 12h, 30d (at most {MAX_TTL // 86400}d; "
    "default: never).",
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (includes the token).")
@guarded
def tokens_create(role: str, name: str, ttl: float | None, as_json: bool) -> None:
    """Create a principal and print its token: shown this once, stored only hashed."""
    vault = open_for_operators(load_settings())
    principal_id, token = create_token(vault.store, role, name, actor=shell_actor(), ttl=ttl)
    made = next(p for p in list_principals(vault.store) if p.principal_id == principal_id)
    if as_json:
        created: dict[str, Any] = {"principal_id": principal_id, "name": name, "role": role}
        emit({**created, "token": token, "expires_at": made.expires_at})
        return
    until = "never expires"
    if made.expires_at is not None:
        until = f"expires {iso_seconds(made.expires_at)}"
    click.echo(f"created {role} {name} ({principal_id}; {until}); store the token now:", err=True)
    click.echo(token)


@tokens.command(
    "list",
    short_help="Principals; never a token or its hash.",
    epilog=epilog("toolkit-vault tokens list", "toolkit-vault tokens list --wide", env=STORE_ENV),
)
@click.option("--wide", is_flag=True, help="Add the principal ids.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def tokens_list(wide: bool, as_json: bool) -> None:
    """List principals: name, role, their token's state (active, expired, revoked or none),
    when it was created and when it ends (its expiry, or its revocation). Needs no master
    key; never shows a token or its hash."""
    store = open_store(load_settings())
    warning = said_if_behind(store)
    principals = list_principals(store)
    if as_json:
        emit({"principals": [p.as_json() for p in principals], "witness_warning": warning})
        return
    columns = [Column("NAME"), Column("ROLE"), Column("TOKEN")]
    columns += [Column("CREATED (UTC)", fixed=True), Column("ENDS (UTC)", fixed=True)]
    if wide:
        columns.append(Column("ID"))
    rows = []
    for p in principals:
        ends = p.revoked_at if p.revoked_at is not None else p.expires_at
        cells = [p.name, p.role, p.state(), iso_seconds(p.created_at), iso_seconds(ends)]
        rows.append(Row([*cells, p.principal_id] if wide else cells))
    echo_table(columns, rows, wide=wide)


@tokens.command(
    "revoke",
    short_help="Refuse a principal's token from now on.",
    epilog=epilog("toolkit-vault tokens revoke my-agent", "toolkit-vault tokens revoke 3f2a9c1e"),
)
@click.argument("name_or_id")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def tokens_revoke(name_or_id: str, as_json: bool) -> None:
    """Revoke a principal's token, by name, principal id or a unique prefix of it;
    revoking twice is harmless."""
    vault = open_for_operators(load_settings())
    chosen = resolve_principal(list_principals(vault.store), name_or_id)
    principal, changed = revoke(vault.store, chosen.principal_id, actor=shell_actor())
    if as_json:
        emit({**principal.as_json(), "revoked_now": changed})
    elif changed:
        click.echo(f"revoked {principal.name} ({principal.principal_id})")
    else:
        click.echo(f"{principal.name} ({principal.principal_id}) was already revoked")
