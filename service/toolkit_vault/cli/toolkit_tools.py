"""`toolkits tools show|accept`: an imported server's pinned tools, and an operator
accepting the ones it changed or added (`core.tool_pins`).

The vault pins the first `tools/list` of a server it runs; a later list whose tool changed
its name, description or schema, or that adds a tool, has that tool withheld (not listed,
a call refused `not_accepted`) until it is accepted here. Tool names and digests are the
server's text and the vault's hashes: shown as plain text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from toolkit_vault.actors import shell_actor
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.cli.shell import emit, epilog, guarded
from toolkit_vault.cli.tables import Column, Row, echo_table
from toolkit_vault.settings import load_settings
from toolkit_vault.terminal import printable

if TYPE_CHECKING:  # `toolkits list` loads this group too: its commands import their own
    from toolkit_vault.toolkits.tool_pins import PinnedTools

__all__ = ["tools"]


@click.group(short_help="An imported server's pinned tools: show, accept.")
def tools() -> None:
    """An imported server's tools as the vault pinned them at first sight, those a later
    list changed or added (withheld), and accepting them."""


def _echo(pinned: PinnedTools) -> None:
    shown = pinned.as_json()
    if not shown["pinned"]:
        click.echo(f"{printable(pinned.toolkit)}: not pinned yet (its server has not run)")
        return
    rows = [
        Row(
            [
                printable(str(tool["name"])),
                str(tool["state"]),
                str(tool["pinned"] or "-")[:12],
                str(tool["seen"] or "-")[:12] if tool["state"] != "pinned" else "",
            ]
        )
        for tool in shown["tools"]
    ]
    echo_table([Column(h) for h in ("TOOL", "STATE", "PINNED", "SEEN")], rows)
    waiting = [t["name"] for t in shown["tools"] if t["state"] != "pinned"]
    if waiting:
        click.echo(
            f"withheld until accepted: {printable(', '.join(waiting))} "
            f"(toolkit-vault toolkits tools accept {printable(pinned.toolkit)!r})"
        )


@tools.command(
    "show",
    short_help="Pinned tools, and those changed or added since.",
    epilog=epilog(
        "toolkit-vault toolkits tools show weather",
        "toolkit-vault toolkits tools show weather --json",
    ),
)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def tools_show(name: str, as_json: bool) -> None:
    """The tools of imported toolkit NAME's server as pinned (`pinned`), and each one a
    later list changed (`changed`) or added (`added`): those are withheld until accepted."""
    from toolkit_vault.core.tool_pins import show_tools

    vault = open_vault(load_settings())
    pinned = show_tools(vault.store, vault.toolkit(name))
    if as_json:
        emit(pinned.as_json())
    else:
        _echo(pinned)


@tools.command(
    "accept",
    short_help="Accept changed or added tools: they are listed and called again.",
    epilog=epilog(
        "toolkit-vault toolkits tools accept weather",
        "toolkit-vault toolkits tools accept weather --tool forecast",
    ),
)
@click.argument("name")
@click.option(
    "--tool", "chosen", multiple=True, metavar="TOOL", help="Accept only this tool (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def tools_accept(name: str, chosen: tuple[str, ...], as_json: bool) -> None:
    """Accept the changed or added tools of imported toolkit NAME's server, as they were
    seen (every waiting one, or each --tool): the pin takes them, and they are listed and
    called again in every process. Audited as tools_accepted."""
    from toolkit_vault.core.tool_pins import accept_tools

    vault = open_vault(load_settings())
    pinned = accept_tools(vault.store, shell_actor(), vault.toolkit(name), chosen)
    if as_json:
        emit(pinned.as_json())
    else:
        _echo(pinned)
