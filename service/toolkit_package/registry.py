"""MCP registry ``server.json``: every published schema, camelCase and older snake_case.

A server.json describes one server with alternative ways to reach it: each ``packages`` entry
(``local_mcp``) and each ``remotes`` entry (``remote_mcp``) becomes its own imported server.
Secrets may sit in environment variables, headers, runtime/package arguments, and in the
``variables`` of a templated value (``--token={token}``): a variable inherits the secrecy of
the value it fills, and an argument's variables land on the command line (``in_argv``).
"""

from __future__ import annotations

import re
from typing import Any

from .imported import (
    Collector,
    ConfigInput,
    EntryInvalid,
    ImportedServer,
    ImportRefused,
    InputKind,
    ValueType,
    name_of,
    pick,
    pointer,
)
from .model import StrategyKind

__all__ = ["parse_server_json"]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.-]{0,127})\}")
_VALUE_TYPES: dict[str, ValueType] = {"number": "number", "boolean": "boolean"}


def _value_type(obj: dict[str, Any], scope: str) -> ValueType:
    return _VALUE_TYPES.get(pick(obj, ("format",), str, scope) or "", "string")


def _template_fields(
    value: str,
    variables: dict[str, Any],
    scope: str,
    parent: tuple[bool, bool],
    in_argv: bool,
    out: Collector,
) -> list[ConfigInput]:
    """Form fields for the ``{name}`` placeholders of a templated value.

    ``parent`` is (required, secret) of the value being filled: a variable filling a secret
    value is secret, and one filling a required value is required unless it has a default.
    """
    parent_required, parent_secret = parent
    fields = []
    for var_name in dict.fromkeys(_PLACEHOLDER.findall(value)):
        vscope = pointer(scope, "variables", var_name)
        var = variables.get(var_name)
        if var is None:
            out.note("undeclared_variable", vscope, "placeholder without a declared variable")
            fields.append(ConfigInput(var_name, "", True, True, "variable", vscope, False, in_argv))
            continue
        if not isinstance(var, dict):
            raise EntryInvalid(vscope, "expected an object")
        fixed = pick(var, ("value",), str, vscope) is not None
        has_default = var.get("default") is not None
        fields.append(
            ConfigInput(
                name=var_name,
                description=pick(var, ("description",), str, vscope) or "",
                required=bool(pick(var, ("isRequired", "is_required"), bool, vscope))
                or (parent_required and not has_default and not fixed),
                secret=bool(pick(var, ("isSecret", "is_secret"), bool, vscope)) or parent_secret,
                kind="variable",
                location=vscope,
                has_fixed_value=fixed,
                in_argv=in_argv,
                value_type=_value_type(var, vscope),
            )
        )
    return fields


def _inputs(
    obj: Any, scope: str, kind: InputKind, name: str, in_argv: bool, out: Collector
) -> list[ConfigInput]:
    """The form fields one Input/KeyValueInput/Argument contributes (maybe none)."""
    if not isinstance(obj, dict):
        raise EntryInvalid(scope, "expected an object")
    description = pick(obj, ("description",), str, scope) or ""
    required = bool(pick(obj, ("isRequired", "is_required"), bool, scope))
    secret = bool(pick(obj, ("isSecret", "is_secret"), bool, scope))
    value = pick(obj, ("value",), str, scope)
    variables = pick(obj, ("variables",), dict, scope) or {}
    if value is not None and _PLACEHOLDER.search(value):
        return _template_fields(value, variables, scope, (required, secret), in_argv, out)
    fixed = value is not None
    vtype = _value_type(obj, scope)
    return [ConfigInput(name, description, required, secret, kind, scope, fixed, in_argv, vtype)]


def _list(obj: dict[str, Any], keys: tuple[str, ...], scope: str) -> tuple[str, list[Any]]:
    present = next((k for k in keys if k in obj), keys[0])
    return pointer(scope, present), pick(obj, keys, list, scope) or []


def _arguments(
    pkg: dict[str, Any], keys: tuple[str, str], scope: str, out: Collector
) -> list[ConfigInput]:
    base, args = _list(pkg, keys, scope)
    fields: list[ConfigInput] = []
    for i, arg in enumerate(args):
        ascope = pointer(base, i)
        if not isinstance(arg, dict):
            raise EntryInvalid(ascope, "expected an object")
        arg_type = pick(arg, ("type",), str, ascope)
        if arg_type == "named":
            name = name_of(arg.get("name"), pointer(ascope, "name"))
        elif arg_type == "positional":
            hint = pick(arg, ("valueHint", "value_hint"), str, ascope)
            name = name_of(hint, ascope) if hint else f"argument-{i}"
        else:
            raise EntryInvalid(pointer(ascope, "type"), "expected 'named' or 'positional'")
        fields += _inputs(arg, ascope, "argument", name, True, out)
    return fields


def _key_values(
    obj: dict[str, Any], keys: tuple[str, ...], kind: InputKind, scope: str, out: Collector
) -> list[ConfigInput]:
    base, entries = _list(obj, keys, scope)
    fields: list[ConfigInput] = []
    for i, entry in enumerate(entries):
        escope = pointer(base, i)
        if not isinstance(entry, dict):
            raise EntryInvalid(escope, "expected an object")
        name = name_of(entry.get("name"), pointer(escope, "name"))
        fields += _inputs(entry, escope, kind, name, False, out)
    return fields


def _package(pkg: Any, scope: str, out: Collector) -> tuple[str, str, list[ConfigInput]]:
    if not isinstance(pkg, dict):
        raise EntryInvalid(scope, "expected an object")
    registry = pick(pkg, ("registryType", "registry_type", "registry_name"), str, scope) or ""
    transport = pick(pkg, ("transport",), dict, scope) or {}
    tscope = pointer(scope, "transport")
    transport_type = pick(transport, ("type",), str, tscope) or "stdio"
    fields = _arguments(pkg, ("runtimeArguments", "runtime_arguments"), scope, out)
    fields += _arguments(pkg, ("packageArguments", "package_arguments"), scope, out)
    fields += _key_values(pkg, ("environmentVariables", "environment_variables"), "env", scope, out)
    fields += _key_values(transport, ("headers",), "header", tscope, out)
    return registry, transport_type, fields


def _remote(remote: Any, scope: str, out: Collector) -> tuple[str, str, list[ConfigInput]]:
    if not isinstance(remote, dict):
        raise EntryInvalid(scope, "expected an object")
    transport = pick(remote, ("type", "transport_type"), str, scope)
    url = pick(remote, ("url",), str, scope)
    if not transport or not url:
        raise EntryInvalid(scope, "a remote needs a transport type and a url")
    # The URL is a value: only its template variables become (non-argv) form fields.
    variables = pick(remote, ("variables",), dict, scope) or {}
    fields = _template_fields(url, variables, scope, (True, False), False, out)
    fields += _key_values(remote, ("headers",), "header", scope, out)
    return "", transport, fields


def parse_server_json(doc: dict[str, Any], max_servers: int) -> Collector:
    out = Collector()
    try:
        name = name_of(doc.get("name"), "/name")
        packages = pick(doc, ("packages",), list, "") or []
        remotes = pick(doc, ("remotes",), list, "") or []
        description = pick(doc, ("description",), str, "") or ""
        title = pick(doc, ("title",), str, "") or ""
        version = pick(doc, ("version",), str, "")
        detail = pick(doc, ("version_detail",), dict, "") or {}
        version = version or pick(detail, ("version",), str, "/version_detail") or ""
    except EntryInvalid as exc:
        raise ImportRefused("invalid_server_json", f"{exc.scope}: {exc.message}") from None
    if len(packages) + len(remotes) > max_servers:
        raise ImportRefused("too_many_servers", f"more than {max_servers} packages and remotes")
    if not packages and not remotes:
        out.note("no_packages_or_remotes", "", "server.json offers no package and no remote")
    several = len(packages) + len(remotes) > 1
    entries = [("packages", i, e) for i, e in enumerate(packages)]
    entries += [("remotes", i, e) for i, e in enumerate(remotes)]
    for group, i, entry in entries:
        scope = pointer("", group, i)
        local = group == "packages"
        try:
            registry, transport, fields = (_package if local else _remote)(entry, scope, out)
        except EntryInvalid as exc:
            out.skip(exc)
            continue
        out.servers.append(
            ImportedServer(
                name=f"{name}#{group[:-1]}-{i}" if several else name,
                strategy=StrategyKind.LOCAL_MCP if local else StrategyKind.REMOTE_MCP,
                transport=transport,
                inputs=tuple(fields),
                title=title,
                description=description,
                version=version,
                registry=registry,
                location=scope,
            )
        )
    return out
