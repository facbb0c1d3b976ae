"""`toolkit-vault`: the operator's command line, a thin shell over the service API.

Exit status 0 on success, 1 on failure, 2 on a usage error, each failure with one clear line
on stderr. `--json` output is stable: documented in docs/, keys only ever added.

This package only builds the `main` group; the commands live in `serving` (set up and
serve the vault), `toolkits` (list, show, import, remove), `operators` (keys, audit,
history, purge), `trail` (audit list and tail), `tokens`, `allowances`, `templates` and
`about` (version), the helpers they share in `shell`, `tables` and `ids`, so no command
module grows past a readable size.
`main` imports a command's module only when that command is looked up (`lazy`), so
`--help`, `version` and completion never wait for SQLAlchemy, the service or the schema
compiler.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

import click

from toolkit_vault.actors import ACTOR_ENV
from toolkit_vault.cli.about import print_version
from toolkit_vault.cli.lazy import CommandEntry, LazyCommands
from toolkit_vault.cli.shell import ENVIRONMENT, EXIT_STATUS

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

__all__ = ["COMMANDS", "main"]

# Every command of `main`: where it lives, and the summary the top-level `--help` and
# completion show without importing it (tests/test_cli_startup.py holds each summary equal
# to the command's own `short_help`).
COMMANDS = {
    "init": CommandEntry(
        "toolkit_vault.cli.serving",
        "init",
        "Create or check the vault home; migrate the database.",
    ),
    "stdio": CommandEntry(
        "toolkit_vault.cli.serving", "stdio", "A2E as JSON lines on stdin/stdout."
    ),
    "clients": CommandEntry(
        "toolkit_vault.cli.clients", "clients", "Configs that point MCP clients at the vault."
    ),
    "mcp": CommandEntry(
        "toolkit_vault.cli.serving", "mcp", "MCP over stdio, for clients that launch servers."
    ),
    "serve": CommandEntry(
        "toolkit_vault.cli.serving", "serve", "HTTP + WebSocket A2E and the admin API."
    ),
    "toolkits": CommandEntry(
        "toolkit_vault.cli.toolkits",
        "toolkits",
        "Registered toolkits: list, show, import, remove.",
    ),
    "keys": CommandEntry(
        "toolkit_vault.cli.keys", "keys", "Master and vault keys: status, rotation, retirement."
    ),
    "check": CommandEntry(
        "toolkit_vault.cli.operators",
        "check",
        "Decrypt-verify every stored version; check every row and the chain.",
    ),
    "history": CommandEntry(
        "toolkit_vault.cli.operators",
        "history_command",
        "Every config version, with secret fingerprints.",
    ),
    "audit": CommandEntry("toolkit_vault.cli.operators", "audit", "The tamper-evident audit log."),
    "purge": CommandEntry(
        "toolkit_vault.cli.operators",
        "purge_command",
        "Crypto-shred a session's or a principal's stored configs.",
    ),
    "tokens": CommandEntry(
        "toolkit_vault.cli.tokens", "tokens", "Principals and their bearer tokens."
    ),
    "allowances": CommandEntry(
        "toolkit_vault.cli.allowances",
        "allowances",
        "Which toolkits and tools an agent may call.",
    ),
    "templates": CommandEntry(
        "toolkit_vault.cli.templates",
        "templates",
        "Environment templates: a toolkit's public values by name.",
    ),
    "console-roles": CommandEntry(
        "toolkit_vault.cli.console_roles",
        "console_roles",
        "Identity-provider claims mapped to console roles.",
    ),
    "backup": CommandEntry(
        "toolkit_vault.cli.backup",
        "backup",
        "Authenticated snapshots of the vault: create, verify.",
    ),
    "restore": CommandEntry(
        "toolkit_vault.cli.backup",
        "restore",
        "Restore a verified backup into an empty database (audited).",
    ),
    "version": CommandEntry(
        "toolkit_vault.cli.about",
        "version_command",
        "Package, database schema revision, A2E protocol.",
    ),
}


class UsageLine(click.ClickException):
    """A usage error said like every other error: one line on stderr, exit status 2."""

    exit_code = 2

    def __init__(self, error: click.UsageError) -> None:
        where = error.ctx.command_path if error.ctx else "toolkit-vault"
        text = " ".join(error.format_message().split())  # click may break a message in lines
        super().__init__(f"{text.rstrip('.')} (see '{where} --help')")

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"toolkit-vault: error: {self.format_message()}", err=True)


class VaultGroup(click.Group):
    """click's group, but a usage error anywhere below it is one line, not click's three.
    A group given no command still prints its whole help (exit status 2).

    Its commands are a `LazyCommands` table: listing them (its `--help`, completing a
    command name) shows the table's summaries and imports no command module."""

    commands: LazyCommands

    def __init__(
        self,
        name: str | None = None,
        commands: Mapping[str, CommandEntry] | None = None,
        **attrs: Any,
    ) -> None:
        super().__init__(name, **attrs)
        self.commands = LazyCommands(commands or {})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self.commands.short_help(name)) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        from click.shell_completion import CompletionItem

        names = [name for name in self.list_commands(ctx) if name.startswith(incomplete)]
        found = [CompletionItem(name, help=self.commands.short_help(name)) for name in names]
        return found + click.Command.shell_complete(self, ctx, incomplete)  # the options

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            raise UsageLine(error) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            raise UsageLine(error) from None


def assert_actor(_ctx: click.Context, _param: click.Parameter, name: str | None) -> None:
    """`--actor NAME` reaches every command the way TOOLKIT_VAULT_ACTOR does
    (`actors.shell_actor` reads it), so no command passes it along by hand."""
    if name:
        os.environ[ACTOR_ENV] = name


_WIDTH = max(len(name) for name in ENVIRONMENT)
EPILOG = "\n\n".join(
    [
        "\b\nExamples:\n"
        "  toolkit-vault init --key-provider file   # ./var, master key in a 0600 file\n"
        "  toolkit-vault serve                      # A2E and admin API on :8600\n"
        "  toolkit-vault tokens create --role agent --name my-agent\n"
        "  toolkit-vault history --since 2026-01-31\n"
        "  toolkit-vault COMMAND -h                 # its options and examples",
        "\b\nEnvironment:\n"
        + "\n".join(f"  {name.ljust(_WIDTH)}  {text}" for name, text in ENVIRONMENT.items()),
        "\b\nShell completion (add to your shell's start-up file):\n"
        '  bash: eval "$(_TOOLKIT_VAULT_COMPLETE=bash_source toolkit-vault)"\n'
        '  zsh:  eval "$(_TOOLKIT_VAULT_COMPLETE=zsh_source toolkit-vault)"\n'
        "  fish: _TOOLKIT_VAULT_COMPLETE=fish_source toolkit-vault | source",
        EXIT_STATUS,
    ]
)


@click.group(
    "toolkit-vault",
    cls=VaultGroup,
    commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=EPILOG,
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=print_version,
    help="Print the package, schema revision and protocol versions, and exit.",
)
@click.option(
    "--actor",
    metavar="NAME",
    expose_value=False,
    callback=assert_actor,
    help="Your name, recorded beside your OS user in the audit events this command writes "
    "(asserted, not proven; or TOOLKIT_VAULT_ACTOR).",
)
def main() -> None:
    """Credential vault for A2E agent toolkits.

    Agents configure toolkits over A2E (`serve`: HTTP and WebSocket; `stdio`); each
    config's secret fields are encrypted at rest and never come back out. Operators and
    auditors use the other commands. Every command takes -h for its options and examples.
    """
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s"
    )
    # At exit the interpreter walks every object the process made (SQLAlchemy's thousands
    # among them) for reference cycles to finalize, work a process that is ending has no
    # use for (issue 53): frozen, they are skipped. What a command keeps is written by the
    # exit hooks its store, witness and audit devices register as they open, which run
    # before this one (last registered, first run).
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
