"""MCP registry ``server.json``: every published schema, camelCase and older snake_case.

A server.json describes one server with alternative ways to reach it: each ``packages`` entry
(``local_mcp``) and each ``remotes`` entry (``remote_mcp``) becomes its own imported server.
Inputs sit in environment variables, headers, runtime/package arguments, and in the
placeholders of a templated value (``--token={token}``, ``Bearer ${API_KEY}``). A placeholder
inherits the secrecy of the value it fills, an argument's placeholders land on the command
line (``in_argv``), and a placeholder sharing a name with another input is that input: one
input is one field. Secrecy is decided fail-closed by ``classify``.
"""

from __future__ import annotations

from typing import Any

from toolkit_package import placeholders
from toolkit_package.argv import url_credential
from toolkit_package.classify import Evidence, UrlPart, Verdict, classify, credential_word
from toolkit_package.imported import (
    Collector,
    ConfigInput,
    EntryInvalid,
    ImportedServer,
    ImportRefused,
    InputKind,
    ValueType,
    name_of,
    one_field_per_name,
    pick,
    pointer,
    public_default,
    string_choices,
)
from toolkit_package.launch_recipe import package_recipe, remote_recipe
from toolkit_package.model import StrategyKind

__all__ = ["parse_server_json"]

_VALUE_TYPES: dict[str, ValueType] = {"number": "number", "boolean": "boolean"}
_UNKNOWN = "nothing shows it is public"


def _marks(obj: dict[str, Any], scope: str) -> tuple[str | None, str | None]:
    """(secret mark, explicit public mark) the publisher gave this input, if any."""
    secret = pick(obj, ("isSecret", "is_secret"), bool, scope)
    if pick(obj, ("format",), str, scope) == "password":
        return "format: password", None
    return ("isSecret", None) if secret else (None, "isSecret: false" if secret is False else None)


def _example(obj: dict[str, Any], scope: str) -> str | None:
    """The publisher's example of a value (``default``, ``placeholder``), seen for its shape."""
    for key in ("default", "placeholder", "valueHint", "value_hint"):
        value = obj.get(key)
        if isinstance(value, str) and value.strip():
            return value
    del scope
    return None


def _input(
    obj: dict[str, Any],
    scope: str,
    name: str,
    kind: InputKind,
    *,
    fills: str | None = None,
    url_part: UrlPart | None = None,
    in_argv: bool,
    required: bool,
    fixed: bool,
) -> ConfigInput:
    description = pick(obj, ("description",), str, scope) or ""
    marked, marked_public = _marks(obj, scope)
    fmt = pick(obj, ("format",), str, scope) or ""
    value_type = _VALUE_TYPES.get(fmt, "string")
    verdict = classify(
        Evidence(
            name=name,
            description=description,
            header=kind == "header",
            marked=marked,
            marked_public=marked_public,
            fills=fills,
            value_type=value_type,
            url_part=url_part,
            path=fmt == "filepath",
            choices=bool(pick(obj, ("choices",), list, scope)),
            example=_example(obj, scope),
        )
    )
    if fixed and verdict.reason == _UNKNOWN:  # published in the metadata for all to read
        verdict = Verdict(False, "fixed by the package")
    secret = verdict.secret or fixed  # a fixed input is in no form: nothing about it to offer
    return ConfigInput(
        name=name,
        description=description,
        required=required,
        secret=verdict.secret,
        kind=kind,
        location=scope,
        has_fixed_value=fixed,
        in_argv=in_argv,
        value_type=value_type,
        reason=verdict.reason,
        default=public_default(obj.get("default"), value_type, secret),
        choices=string_choices(obj.get("choices"), secret),
        format=fmt if fmt not in ("", "string", "number", "boolean") else "",
    )


def _template_fields(
    value: str,
    variables: dict[str, Any],
    scope: str,
    parent: tuple[bool, str | None],
    in_argv: bool,
    out: Collector,
) -> list[ConfigInput]:
    """Form fields for the placeholders of a templated value.

    ``parent`` is (required, why secret or None) of the value being filled: a placeholder
    filling a secret value is secret, one filling a required value is required unless it has
    a default. A remote URL's placeholders are classified by the part they sit in.
    """
    parent_required, parent_fills = parent
    parts = placeholders.url_parts(value) if not in_argv and "://" in value else {}
    fields = []
    for var_name in placeholders.names(value, angled=bool(parts)):
        vscope = pointer(scope, "variables", var_name)
        var = variables.get(var_name, {})
        if var_name not in variables:
            out.note("undeclared_variable", vscope, "placeholder without a declared variable")
        if not isinstance(var, dict):
            raise EntryInvalid(vscope, "expected an object")
        fixed = pick(var, ("value",), str, vscope) is not None
        has_default = var.get("default") is not None
        required = bool(pick(var, ("isRequired", "is_required"), bool, vscope))
        fields.append(
            _input(
                var,
                vscope,
                var_name,
                "variable",
                fills=parent_fills,
                url_part=parts.get(var_name),
                in_argv=in_argv,
                required=required or (parent_required and not has_default and not fixed),
                fixed=fixed,
            )
        )
    return fields


def _inputs(
    obj: Any, scope: str, kind: InputKind, name: str, in_argv: bool, out: Collector
) -> list[ConfigInput]:
    """The form fields one Input/KeyValueInput/Argument contributes (maybe none)."""
    if not isinstance(obj, dict):
        raise EntryInvalid(scope, "expected an object")
    required = bool(pick(obj, ("isRequired", "is_required"), bool, scope))
    value = pick(obj, ("value",), str, scope)
    variables = pick(obj, ("variables",), dict, scope) or {}
    this = _input(obj, scope, name, kind, in_argv=in_argv, required=required, fixed=True)
    if value is not None and placeholders.names(value):
        word = credential_word(placeholders.strip(value))
        fills = this.reason if this.secret and this.reason != _UNKNOWN else None
        fills = fills or (f"template: {word}" if word else None)
        return _template_fields(value, variables, scope, (required, fills), in_argv, out)
    fixed = value is not None
    return [_input(obj, scope, name, kind, in_argv=in_argv, required=required, fixed=fixed)]


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
        value = pick(arg, ("value",), str, ascope) or ""
        found = url_credential(name) or url_credential(value)
        if found is not None:  # a published argument holding a credential: never its name
            name = name.split(" ", 1)[0] if name.startswith("-") else f"argument-{i}"
            out.note(
                "credential_in_argv",
                ascope,
                f"this argument carries a credential ({found[1]}) on the command line",
            )
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
    """(registry, transport, fields) of one package; its launch recipe is `launch_recipe`'s."""
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
    # The URL is a value: only its placeholders become (non-argv) form fields.
    variables = pick(remote, ("variables",), dict, scope) or {}
    fields = _template_fields(url, variables, scope, (True, None), False, out)
    fields += _key_values(remote, ("headers",), "header", scope, out)
    return "", transport, fields


def parse_server_json(doc: dict[str, Any], max_servers: int, base: str = "") -> Collector:
    """The servers of one server.json; ``base`` is its JSON pointer inside a listing."""
    out = Collector()
    try:
        name = name_of(doc.get("name"), pointer(base, "name"))
        packages = pick(doc, ("packages",), list, base) or []
        remotes = pick(doc, ("remotes",), list, base) or []
        description = pick(doc, ("description",), str, base) or ""
        title = pick(doc, ("title",), str, base) or ""
        version = pick(doc, ("version",), str, base)
        detail = pick(doc, ("version_detail",), dict, base) or {}
        version = version or pick(detail, ("version",), str, pointer(base, "version_detail"))
    except EntryInvalid as exc:
        raise ImportRefused("invalid_server_json", f"{exc.scope}: {exc.message}") from None
    if len(packages) + len(remotes) > max_servers:
        raise ImportRefused("too_many_servers", f"more than {max_servers} packages and remotes")
    if not packages and not remotes:
        message = "server.json offers no package and no remote: nothing to run or connect to"
        out.skip(EntryInvalid(base, message, "no_packages_or_remotes"), name)
    several = len(packages) + len(remotes) > 1
    entries = [("packages", i, e) for i, e in enumerate(packages)]
    entries += [("remotes", i, e) for i, e in enumerate(remotes)]
    for group, i, entry in entries:
        scope = pointer(base, group, i)
        local = group == "packages"
        try:
            registry, transport, fields = (_package if local else _remote)(entry, scope, out)
        except EntryInvalid as exc:
            out.skip(exc, f"{name}#{group[:-1]}-{i}" if several else name)
            continue
        inputs = one_field_per_name(fields)
        out.servers.append(
            ImportedServer(
                name=f"{name}#{group[:-1]}-{i}" if several else name,
                strategy=StrategyKind.LOCAL_MCP if local else StrategyKind.REMOTE_MCP,
                transport=transport,
                inputs=inputs,
                title=title,
                description=description,
                version=version or "",
                registry=registry,
                location=scope,
                launch=(package_recipe if local else remote_recipe)(entry, tuple(fields)),
            )
        )
    return out
