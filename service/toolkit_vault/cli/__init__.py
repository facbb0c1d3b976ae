"""`toolkit-vault`: the operator's command line, a thin shell over the service API.

Every command exits 0 on success, or non-zero with one clear line on stderr. `--json`
output is stable: documented in the README, keys only ever added.

This package only builds the `main` group; the commands live in `serving` (set up and
serve the vault), `toolkits` (list, show, import, remove) and `operators` (keys, audit,
history, purge, tokens), the helpers they share in `shell`, so no command module grows past
a readable size.
"""

from __future__ import annotations

import logging
import sys

import click

from .operators import audit, check, history_command, keys, purge_command, tokens
from .serving import init, serve, stdio
from .toolkits import toolkits

__all__ = ["main"]


@click.group()
@click.version_option(package_name="toolkit-vault")
def main() -> None:
    """Credential vault for A2E agent toolkits (home: $TOOLKIT_VAULT_HOME, default ./var)."""
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s"
    )


main.add_command(init)
main.add_command(stdio)
main.add_command(serve)
main.add_command(toolkits)
main.add_command(keys)
main.add_command(check)
main.add_command(history_command)
main.add_command(audit)
main.add_command(purge_command)
main.add_command(tokens)
