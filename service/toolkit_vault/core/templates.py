"""Environment templates: an operator's named public values for one toolkit (`dev`,
`staging`, `prod`, any name), so a configure naming one sends only the secrets.

A template holds public top-level fields only, each checked against the toolkit's schema
when it is set (a secret field, an undeclared one, or a value the schema refuses is
refused then, not at the next configure). Templates are kept as audit events alone
(`template_set`, `template_removed`): the verified chain is their store, so each process
reads them from its authenticated `ChainState`, an edited or deleted event breaks the
chain instead of steering a configure, and every change has its actor and time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from toolkit_package.skeletons import fields_of, skeleton
from toolkit_vault.errors import ConfigInvalid, VaultError
from toolkit_vault.schema.values import escape
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = [
    "TEMPLATE_NAME",
    "TemplateNotFound",
    "apply_template",
    "get_template",
    "list_templates",
    "remove_template",
    "set_template",
    "skeleton_of",
]

TEMPLATE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
INVALID = "template does not match the toolkit schema"


class TemplateNotFound(VaultError):
    """No template of that name for that toolkit."""


def _name(name: str) -> str:
    if not TEMPLATE_NAME.match(name):
        raise VaultError(
            "a template name is 1 to 63 lowercase letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_template(toolkit: RegisteredToolkit, values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` as a template of `toolkit`, or ConfigInvalid naming each refused field by
    pointer and keyword (never the value): a field the schema's root does not declare, a
    secret one, or one whose value the schema refuses."""
    if not isinstance(values, Mapping) or not values:
        raise ConfigInvalid(INVALID, details=[{"pointer": "", "keyword": "type"}])
    schema = toolkit.schema
    properties = schema.schema.get("properties")
    declared = set(properties) if isinstance(properties, Mapping) else set()
    details: list[dict[str, Any]] = []
    for key in values:
        pointer = "/" + escape(key)
        if key not in declared:
            details.append({"pointer": pointer, "keyword": "x-template-undeclared"})
        elif schema.is_secret_at([key]):
            details.append({"pointer": pointer, "keyword": "x-template-secret"})
    if not details:
        try:
            schema.validate(dict(values))
        except ConfigInvalid as exc:  # a missing field is for the configure to give
            details = [
                d
                for d in exc.details
                if not (d.get("keyword") == "required" and d.get("pointer", "")[1:] not in values)
            ]
    if not details:  # a secret inside a public field (a map of headers, a list of tokens)
        public = schema.public_half(dict(values))
        details = [
            {"pointer": "/" + escape(key), "keyword": "x-template-secret"}
            for key in values
            if key not in public or public[key] != values[key]
        ]
    if details:
        raise ConfigInvalid(INVALID, details=details)
    return dict(values)


def set_template(
    store: Store, actor: str, toolkit: RegisteredToolkit, name: str, values: Mapping[str, Any]
) -> dict[str, Any]:
    """Check and store (replace) a template; audited as `template_set` with its values."""
    checked = check_template(toolkit, values)
    details = {"name": _name(name), "values": checked}
    store.record_attempt(
        AuditDraft(actor, AuditAction.TEMPLATE_SET, None, toolkit.definition.name, None, details)
    )
    return checked


def remove_template(store: Store, actor: str, toolkit_name: str, name: str) -> None:
    get_template(store, toolkit_name, name)
    details = {"name": name}
    store.record_attempt(
        AuditDraft(actor, AuditAction.TEMPLATE_REMOVED, None, toolkit_name, None, details)
    )


def list_templates(store: Store, toolkit_name: str | None = None) -> dict[str, dict[str, Any]]:
    """toolkit -> name -> values, as the verified chain has them (one toolkit's if named)."""
    every = store.chain_state().templates
    names = [toolkit_name] if toolkit_name is not None else sorted(every)
    return {t: dict(sorted(every.get(t, {}).items())) for t in names if every.get(t)}


def get_template(store: Store, toolkit_name: str, name: str) -> dict[str, Any]:
    found = store.chain_state().templates.get(toolkit_name, {}).get(name)
    if found is None:
        raise TemplateNotFound(f"toolkit {toolkit_name} has no template {name!r}")
    return dict(found)


def apply_template(
    store: Store, toolkit: RegisteredToolkit, name: str, config: Mapping[str, Any]
) -> dict[str, Any]:
    """The full config: the template's values and the fields sent (the secrets). A field
    sent that the template sets to another value is refused: the template decides."""
    values = get_template(store, toolkit.definition.name, name)
    clashes = [k for k, v in values.items() if k in config and config[k] != v]
    if clashes:
        details = [{"pointer": "/" + escape(k), "keyword": "x-template"} for k in clashes]
        raise ConfigInvalid(f"the template {name} sets these fields already", details=details)
    return {**values, **config}


def skeleton_of(toolkit: RegisteredToolkit, fmt: str) -> str:
    """A client-config skeleton of the toolkit (`toolkit_package.skeletons`): a placeholder
    for every field (an object's declared members each their own), each secret one
    declared secret as the format says, never a value; the server's command as its import
    kept it. A field holding any secret (a list of tokens, an object admitting members it
    does not name) is secret."""
    schema = toolkit.schema
    definition = toolkit.definition

    def secret(path: tuple[str, ...]) -> bool:
        return bool(schema.is_secret_at(list(path))) or _holds_secrets(schema, path)

    fields = fields_of(schema.schema, secret)
    command = _command(definition.config_schema)
    return skeleton(definition.name, definition.description, fields, fmt, command)


def _command(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The argv an import kept for its local server (`toolkits.served`), if any."""
    package = schema.get("x-toolkit-package")
    launch = package.get("launch") if isinstance(package, Mapping) else None
    argv = launch.get("argv") if isinstance(launch, Mapping) else None
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return tuple(argv)
    return ()


def _holds_secrets(schema: Any, path: tuple[str, ...]) -> bool:
    """Whether a secret can sit inside the field at `path`: an array whose items are
    secret, an object with a secret member or one that admits undeclared members (sealed:
    `split`)."""
    prop: Any = schema.schema
    for step in path:
        prop = prop.get("properties", {}).get(step) if isinstance(prop, Mapping) else None
    if not isinstance(prop, Mapping):
        return False
    if prop.get("type") == "array":
        return bool(schema.is_secret_at([*path, 0]))
    if prop.get("type") != "object":
        return False
    members = prop.get("properties")
    declared = list(members) if isinstance(members, Mapping) else []
    return prop.get("additionalProperties") is not False or any(
        schema.is_secret_at([*path, member]) for member in declared
    )
