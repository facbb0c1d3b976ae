"""What this build is: `toolkit-vault version` and `--version`, without touching a vault.

An operator comparing two hosts, or filing a bug, needs three facts: the package version,
the database schema revision it migrates to, and the A2E protocol it speaks. None of them
needs a home, a database or a key, so neither command opens one.

Nor does either import the models, messages or service that use those facts: they live in
`toolkit_vault.versions`, which imports nothing, so `version` starts as fast as click.
"""

from __future__ import annotations

from typing import Any

import click

from toolkit_vault.cli.shell import emit, epilog
from toolkit_vault.versions import CAPABILITIES, PROTOCOL_VERSION, SCHEMA_REVISION

__all__ = [
    "about",
    "print_version",
    "version_command",
]

PACKAGE = "toolkit-vault"


def about() -> dict[str, Any]:
    """The `version --json` shape (stable; keys are only ever added)."""
    from importlib.metadata import PackageNotFoundError, version  # only here: -h starts faster

    try:
        package_version = version(PACKAGE)
    except PackageNotFoundError:  # run from a source tree that was never installed
        package_version = "unknown"
    major = PROTOCOL_VERSION.split(".")[0]
    return {
        "package": PACKAGE,
        "version": package_version,
        "schema_revision": SCHEMA_REVISION,
        "protocol": {
            "version": PROTOCOL_VERSION,
            "accepts": f"{major}.x",
            "capabilities": list(CAPABILITIES),
        },
    }


def _lines(info: dict[str, Any]) -> list[str]:
    protocol = info["protocol"]
    return [
        f"{info['package']} {info['version']}",
        f"database schema revision {info['schema_revision']}",
        f"A2E protocol {protocol['version']} (accepts {protocol['accepts']}); "
        f"capabilities: {', '.join(protocol['capabilities'])}",
    ]


def print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """The `--version` flag's callback: print and stop before any command runs."""
    if not value or ctx.resilient_parsing:
        return
    click.echo("\n".join(_lines(about())))
    ctx.exit()


@click.command(
    "version",
    short_help="Package, database schema revision, A2E protocol.",
    epilog=epilog("toolkit-vault version", "toolkit-vault version --json", env=()),
)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
def version_command(as_json: bool) -> None:
    """Print the package version, the database schema revision it migrates to, and the A2E
    protocol versions and capabilities it speaks. Opens no vault."""
    info = about()
    if as_json:
        emit(info)
    else:
        click.echo("\n".join(_lines(info)))
