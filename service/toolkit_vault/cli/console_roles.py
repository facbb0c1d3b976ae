"""`console-roles list|set|remove`: which claims of the identity provider's `id_token` give
a person which console role (`core.console_roles`), for `serve --oidc-issuer`.

Each change is audited (`console_role_mapped`, `console_role_unmapped`) and reaches every
replica through the audit chain; a removed mapping ends the role it gave at the person's
next request.
"""

from __future__ import annotations

import click

from toolkit_vault.actors import shell_actor
from toolkit_vault.cli.shell import KEY_ENV, emit, epilog, guarded, open_for_operators
from toolkit_vault.core.console_roles import (
    CONSOLE_ROLES,
    list_mappings,
    remove_mapping,
    set_mapping,
)
from toolkit_vault.settings import load_settings

__all__ = ["console_roles"]


def _claim_value(pair: str) -> tuple[str, str]:
    claim, sep, value = pair.partition("=")
    if not sep or not claim or not value:
        raise click.BadParameter("is not CLAIM=VALUE (groups=vault-operators)")
    return claim, value


@click.group("console-roles", short_help="Identity-provider claims mapped to console roles.")
def console_roles() -> None:
    """Which people may sign in to the console through the identity provider, and as what:
    a claim of their id_token (groups=vault-operators) mapped to operator or auditor."""


@console_roles.command(
    "list",
    short_help="Every mapping.",
    epilog=epilog("toolkit-vault console-roles list --json", env=KEY_ENV),
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def roles_list(as_json: bool) -> None:
    """Every mapping: claim, value, role."""
    found = list_mappings(open_for_operators(load_settings()).store)
    if as_json:
        emit({"mappings": [m.as_json() for m in found]})
        return
    for mapping in found:
        click.echo(f"{mapping.claim}={mapping.value}  {mapping.role}")


@console_roles.command(
    "set",
    short_help="Give people whose claim holds a value a console role.",
    epilog=epilog(
        "toolkit-vault console-roles set groups=vault-operators operator",
        "toolkit-vault console-roles set groups=security-auditors auditor",
        env=KEY_ENV,
    ),
)
@click.argument("pair", metavar="CLAIM=VALUE")
@click.argument("role", type=click.Choice(CONSOLE_ROLES))
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def roles_set(pair: str, role: str, as_json: bool) -> None:
    """People whose id_token has CLAIM holding VALUE (a string, or a list such as groups)
    sign in as ROLE; replaces any mapping of that CLAIM=VALUE. Audited as
    console_role_mapped."""
    claim, value = _claim_value(pair)
    made = set_mapping(open_for_operators(load_settings()).store, shell_actor(), claim, value, role)
    if as_json:
        emit(made.as_json())
    else:
        click.echo(f"{made} gives the console role {made.role}")


@console_roles.command(
    "remove",
    short_help="Remove a mapping.",
    epilog=epilog("toolkit-vault console-roles remove groups=vault-operators", env=KEY_ENV),
)
@click.argument("pair", metavar="CLAIM=VALUE")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def roles_remove(pair: str, as_json: bool) -> None:
    """Remove the mapping of CLAIM=VALUE: a person it let in loses that role at their next
    request. Audited as console_role_unmapped."""
    claim, value = _claim_value(pair)
    gone = remove_mapping(open_for_operators(load_settings()).store, shell_actor(), claim, value)
    if as_json:
        emit({**gone.as_json(), "removed": True})
    else:
        click.echo(f"{gone} no longer gives the console role {gone.role}")
