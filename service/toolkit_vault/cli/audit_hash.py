"""`audit hash`: the `arguments_hmac` a `tool_called` event carries for given arguments.

As HashiCorp Vault's `sys/audit-hash`: the trail never holds a call's arguments, only their
HMAC under a subkey of the audit key, so an auditor who holds a value computes its HMAC
here and looks for it in `audit list --action tool_called --json`. The audit key is stored
wrapped by the master key, so this opens the vault as `audit verify` does.
"""

from __future__ import annotations

import sys

import click

from toolkit_vault.cli.shell import emit, epilog, guarded, open_for_operators
from toolkit_vault.settings import load_settings
from toolkit_vault.tools.call_audit import MAX_ARGUMENTS_BYTES, BadArguments, parse_arguments

__all__ = ["audit_hash"]


@click.command(
    "hash",
    short_help="The arguments_hmac of a call's arguments (JSON on stdin).",
    epilog=epilog(
        "toolkit-vault audit hash < arguments.json",
        """echo '{"path": "notes.txt"}' | toolkit-vault audit hash --json""",
        """toolkit-vault audit hash '{"path": "notes.txt"}'""",
    ),
)
@click.argument("arguments", required=False, default="-", metavar="[ARGUMENTS]")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def audit_hash(arguments: str, as_json: bool) -> None:
    """Print the arguments_hmac that a tool_called event carries for a call with these
    arguments: a JSON object, read from stdin unless given as ARGUMENTS (a value on the
    command line stays in the shell's history and shows in `ps`: prefer stdin).

    Equal JSON values hash alike however they are written (key order, spaces, 1.0 or 1).
    The value is never printed, logged or stored. Needs the master key, as `audit verify`
    does (the HMAC's key is derived from the audit key).
    """
    text: str | bytes = arguments
    if arguments == "-":
        if sys.stdin.isatty():
            click.echo("reading the arguments (a JSON object) from stdin; Ctrl-D ends", err=True)
        text = sys.stdin.buffer.read(MAX_ARGUMENTS_BYTES + 1)
    try:
        parsed = parse_arguments(text)
    except BadArguments as exc:
        where = "stdin" if arguments == "-" else "ARGUMENTS"
        raise BadArguments(f"{where}: {exc.message}") from None
    hashed = open_for_operators(load_settings()).upkeep.hash_arguments(parsed)
    if as_json:
        emit({"arguments_hmac": hashed})
    else:
        click.echo(hashed)
