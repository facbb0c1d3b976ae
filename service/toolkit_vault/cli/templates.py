"""`templates set|show|list|remove`: an operator's environment templates, the public values
a configure naming the template does not have to send (`core.templates`).

A template holds public fields only: a secret field, an undeclared one or a value the
toolkit's schema refuses is refused when it is set, naming the field, never the value.
"""

from __future__ import annotations

import json
from typing import Any

import click

from toolkit_vault.actors import shell_actor
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.cli.shell import emit, epilog, guarded
from toolkit_vault.core.templates import (
    get_template,
    list_templates,
    remove_template,
    set_template,
)
from toolkit_vault.errors import ConfigInvalid
from toolkit_vault.settings import load_settings

__all__ = ["templates"]


@click.group(short_help="Environment templates: a toolkit's public values by name.")
def templates() -> None:
    """Environment templates: per toolkit, named public values (dev, staging, prod) that a
    configure naming the template (`"template": "prod"`) does not send again."""


def _values(fields: tuple[str, ...], as_json_text: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if as_json_text is not None:
        try:
            loaded = json.loads(as_json_text)
        except ValueError:
            raise click.BadParameter("is not JSON", param_hint="--values") from None
        if not isinstance(loaded, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--values")
        values.update(loaded)
    for field in fields:
        name, sep, text = field.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{field!r} is not FIELD=VALUE", param_hint="FIELD=VALUE")
        try:
            values[name] = json.loads(text)  # 8080, true, ["a"]; anything else is text
        except ValueError:
            values[name] = text
    return values


def _refused(exc: ConfigInvalid) -> str:
    fields = ", ".join(f"{d.get('pointer') or '/'} ({d.get('keyword')})" for d in exc.details)
    return f"{exc.message}: {fields}"


@templates.command(
    "set",
    short_help="Set (or replace) a toolkit's template.",
    epilog=epilog(
        "toolkit-vault templates set weather prod region=eu port=443",
        """toolkit-vault templates set weather dev --values '{"region": "us"}'""",
    ),
)
@click.argument("toolkit")
@click.argument("name")
@click.argument("fields", nargs=-1, metavar="[FIELD=VALUE]...")
@click.option("--values", "values_json", metavar="JSON", help="The values as a JSON object.")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def templates_set(
    toolkit: str, name: str, fields: tuple[str, ...], values_json: str | None, as_json: bool
) -> None:
    """Set the template NAME of TOOLKIT to these public values (a VALUE is read as JSON
    when it is JSON, else as text), replacing any before; audited as template_set."""
    vault = open_vault(load_settings())
    try:
        values = set_template(
            vault.store, shell_actor(), vault.toolkit(toolkit), name, _values(fields, values_json)
        )
    except ConfigInvalid as exc:
        raise click.ClickException(_refused(exc)) from None
    if as_json:
        emit({"toolkit": toolkit, "name": name, "values": values})
    else:
        click.echo(f"template {name} of {toolkit} set: {', '.join(sorted(values))}")


@templates.command(
    "show",
    short_help="One template's values.",
    epilog=epilog("toolkit-vault templates show weather prod"),
)
@click.argument("toolkit")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def templates_show(toolkit: str, name: str, as_json: bool) -> None:
    """The public values of one template."""
    values = get_template(open_vault(load_settings()).store, toolkit, name)
    if as_json:
        emit({"toolkit": toolkit, "name": name, "values": values})
        return
    for key, value in sorted(values.items()):
        click.echo(f"{key} = {json.dumps(value)}")


@templates.command(
    "list",
    short_help="Every template, or one toolkit's.",
    epilog=epilog("toolkit-vault templates list", "toolkit-vault templates list weather --json"),
)
@click.argument("toolkit", required=False)
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def templates_list(toolkit: str | None, as_json: bool) -> None:
    """Templates by toolkit, with the fields each sets."""
    every = list_templates(open_vault(load_settings()).store, toolkit)
    if as_json:
        emit({"templates": every})
        return
    for name, named in every.items():
        for template, values in named.items():
            click.echo(f"{name} {template}: {', '.join(sorted(values))}")


@templates.command(
    "remove",
    short_help="Remove a template.",
    epilog=epilog("toolkit-vault templates remove weather dev"),
)
@click.argument("toolkit")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Stable JSON output.")
@guarded
def templates_remove(toolkit: str, name: str, as_json: bool) -> None:
    """Remove a template; a configure naming it is refused from now on. Audited as
    template_removed."""
    remove_template(open_vault(load_settings()).store, shell_actor(), toolkit, name)
    if as_json:
        emit({"toolkit": toolkit, "name": name, "removed": True})
    else:
        click.echo(f"template {name} of {toolkit} removed")
