"""`tokens create|list|revoke`: principals and their bearer tokens, for operators.

A token is printed once, at creation, alone on stdout (for scripts); nothing else here ever
shows one or its hash. Principals are shown and typed by name; an id (or a unique prefix of
one) works too.
"""

from __future__ import annotations

import click

from toolkit_vault.access.principals import ROLES, create_token, list_principals, revoke
from toolkit_vault.bootstrap import open_store
from toolkit_vault.cli.ids import resolve_principal
from toolkit_vault.cli.operators import OPERATOR
from toolkit_vault.cli.shell import (
    STORE_ENV,
    emit,
    epilog,
    guarded,
    iso_seconds,
    open_for_operators,
)
from toolkit_vault.cli.tables import Column, Row, echo_table
from toolkit_vault.settings import load_settings

__all__ = ["tokens"]


@click.group(short_help="Principals and their bearer tokens.")
def tokens() -> None:
    """Principals and their bearer tokens (roles: agent, operator, auditor)."""


@tokens.command(
    "create",
    short_help="Create a principal; print its token once.",
    epilog=epilog(
        "toolkit-vault tokens create --role agent --name my-agent",
        "TOKEN=$(toolkit-vault tokens create --role auditor --name alice)",
        "toolkit-vault tokens create --role operator --name ops --json",
    ),
)
@click.option("--role", required=True, type=click.Choice(ROLES), help="The principal's role.")
@click.option("--name", required=True, help="A unique name for the principal.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output (includes the token).")
@guarded
def tokens_create(role: str, name: str, as_json: bool) -> None:
    """Create a principal and print its token: shown this once, stored only hashed."""
    vault = open_for_operators(load_settings())
    principal_id, token = create_token(vault.store, role, name, actor=OPERATOR)
    if as_json:
        emit({"principal_id": principal_id, "name": name, "role": role, "token": token})
        return
    click.echo(f"created {role} {name} ({principal_id}); store the token now:", err=True)
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
    """List principals: name, role, whether their token is active, when it was created
    and revoked. Needs no master key; never shows a token or its hash."""
    principals = list_principals(open_store(load_settings()))
    if as_json:
        emit({"principals": [p.as_json() for p in principals]})
        return
    columns = [Column("NAME"), Column("ROLE"), Column("TOKEN")]
    columns += [Column("CREATED (UTC)", fixed=True), Column("REVOKED (UTC)", fixed=True)]
    if wide:
        columns.append(Column("ID"))
    rows = []
    for p in principals:
        state = "revoked" if p.revoked_at is not None else "active" if p.has_token else "none"
        cells = [p.name, p.role, state, iso_seconds(p.created_at), iso_seconds(p.revoked_at)]
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
    principal, changed = revoke(vault.store, chosen.principal_id, actor=OPERATOR)
    if as_json:
        emit({**principal.as_json(), "revoked_now": changed})
    elif changed:
        click.echo(f"revoked {principal.name} ({principal.principal_id})")
    else:
        click.echo(f"{principal.name} ({principal.principal_id}) was already revoked")
