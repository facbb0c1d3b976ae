"""`allowances set|show|list|remove`: which toolkits and tools an agent may call, for
operators (`core.allowances`).

An agent nobody narrowed may call every tool configured for its session or itself; `set`
narrows it to whole toolkits (`--toolkit`) and single tools (`--tool TOOLKIT/TOOL`), and
`remove` widens it again. Its lists (`tool/list`, `toolkit/list`) show only what it may
call, and a call of anything else is refused (`not_allowed`). Principals are typed by name,
id or a unique id prefix, as `tokens revoke` takes them.
"""

from __future__ import annotations

import click

from toolkit_vault.access.allowances import parse_tool
from toolkit_vault.access.principals import list_principals
from toolkit_vault.actors import shell_actor
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.cli.ids import resolve_principal
from toolkit_vault.cli.shell import emit, epilog, guarded, open_for_operators
from toolkit_vault.cli.tables import Column, Row, echo_table
from toolkit_vault.core.allowances import (
    Narrowed,
    get_allowance,
    list_allowances,
    remove_allowance,
    set_allowance,
)
from toolkit_vault.errors import VaultError
from toolkit_vault.settings import load_settings
from toolkit_vault.store.storage import Store

__all__ = ["allowances"]


@click.group(short_help="Which toolkits and tools an agent may call.")
def allowances() -> None:
    """Allowances: narrow an agent to some toolkits and tools (its lists show only those,
    and a call of anything else is refused), or widen it again."""


def _principal_id(store: Store, typed: str) -> str:
    return resolve_principal(list_principals(store), typed).principal_id


def _said(narrowed: Narrowed) -> str:
    allowance = narrowed.allowance
    if allowance is None:
        return f"{narrowed.principal.name}: not narrowed (every tool configured for it)"
    return f"{narrowed.principal.name}: narrowed to {allowance.said()}"


@allowances.command(
    "set",
    short_help="Narrow an agent to these toolkits and tools.",
    epilog=epilog(
        "toolkit-vault allowances set my-agent --tool filesystem/read_file",
        "toolkit-vault allowances set my-agent --toolkit weather --tool fs/read_file",
        "toolkit-vault allowances set my-agent --none",
    ),
)
@click.argument("principal")
@click.option(
    "--toolkit", "toolkits", multiple=True, metavar="TOOLKIT", help="Every tool of TOOLKIT."
)
@click.option(
    "--tool", "tools", multiple=True, metavar="TOOLKIT/TOOL", help="One tool of a toolkit."
)
@click.option("--none", "nothing", is_flag=True, help="Narrow the agent to no tool at all.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def allowances_set(
    principal: str, toolkits: tuple[str, ...], tools: tuple[str, ...], nothing: bool, as_json: bool
) -> None:
    """Narrow the agent PRINCIPAL (name, id or unique id prefix) to every tool of each
    --toolkit and to each --tool, replacing what it was narrowed to before. Each name is
    checked against the registry. Audited as allowance_set."""
    if nothing == bool(toolkits or tools):
        raise VaultError("name what the agent may call (--toolkit, --tool), or give --none")
    vault = open_vault(load_settings())
    pairs = [parse_tool(tool) for tool in tools]
    target = _principal_id(vault.store, principal)
    narrowed = set_allowance(vault.store, shell_actor(), vault.toolkit, target, toolkits, pairs)
    if as_json:
        emit(narrowed.as_json())
    else:
        click.echo(_said(narrowed))


@allowances.command(
    "show",
    short_help="What one agent may call.",
    epilog=epilog("toolkit-vault allowances show my-agent --json"),
)
@click.argument("principal")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def allowances_show(principal: str, as_json: bool) -> None:
    """What PRINCIPAL may call: not narrowed, or the toolkits and tools it was narrowed to."""
    store = open_for_operators(load_settings()).store
    narrowed = get_allowance(store, _principal_id(store, principal))
    if as_json:
        emit(narrowed.as_json())
    else:
        click.echo(_said(narrowed))


@allowances.command(
    "list",
    short_help="Every narrowed agent.",
    epilog=epilog("toolkit-vault allowances list", "toolkit-vault allowances list --json"),
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def allowances_list(as_json: bool) -> None:
    """Every agent an operator narrowed, with what it may call; an agent not listed may
    call every tool configured for it."""
    every = list_allowances(open_for_operators(load_settings()).store)
    if as_json:
        emit({"allowances": [narrowed.as_json() for narrowed in every]})
        return
    rows = [Row([n.principal.name, n.allowance.said() if n.allowance else ""]) for n in every]
    echo_table([Column("NAME"), Column("MAY CALL")], rows, wide=False)


@allowances.command(
    "remove",
    short_help="Widen an agent again: every tool configured for it.",
    epilog=epilog("toolkit-vault allowances remove my-agent"),
)
@click.argument("principal")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def allowances_remove(principal: str, as_json: bool) -> None:
    """Widen PRINCIPAL again: it may call every tool configured for it. Removing twice is
    harmless. Audited as allowance_removed."""
    store = open_for_operators(load_settings()).store
    narrowed, changed = remove_allowance(store, shell_actor(), _principal_id(store, principal))
    if as_json:
        emit({**narrowed.as_json(), "removed_now": changed})
    elif changed:
        click.echo(f"{narrowed.principal.name}: no longer narrowed")
    else:
        click.echo(f"{narrowed.principal.name} was not narrowed")
