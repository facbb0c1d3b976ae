"""MCP bundle ``manifest.json`` (MCPB ``manifest_version`` 0.1-0.4, DXT ``dxt_version``).

A bundle declares its configuration in ``user_config`` and wires it into ``server.mcp_config``
(and its ``platform_overrides``) through ``${user_config.KEY}``; a key referenced from
``args`` is passed on the command line. ``uv`` and ``python`` bundles may omit ``mcp_config``
(the host runs the entry point itself): every declared key is then an input, none in argv.
A key is secret when marked ``sensitive``, when it fills an environment variable or argument
that names a credential, or by the fail-closed rules of ``classify``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from toolkit_package.argv import argv_credential
from toolkit_package.classify import TOKEN_SHAPE, Evidence, classify, credential_word
from toolkit_package.imported import (
    Collector,
    ConfigInput,
    DeclaredTool,
    EntryInvalid,
    ImportedServer,
    ValueType,
    name_of,
    pick,
    pick_string_map,
    pick_strings,
    pointer,
    public_default,
)
from toolkit_package.launch_recipe import bundle_recipe
from toolkit_package.model import StrategyKind

MAX_TOOL_DESCRIPTION = 2000

__all__ = ["parse_bundle_manifest"]

_USER_CONFIG_REF = re.compile(r"\$\{user_config\.([A-Za-z0-9_.-]{1,128})\}")
_USER_CONFIG_TYPES: dict[str, ValueType] = {"number": "number", "boolean": "boolean"}
_USER_CONFIG_KINDS = frozenset({"string", "number", "boolean", "directory", "file"})
_RUNS_ITSELF = frozenset({"uv", "python"})


def _wiring(config: dict[str, Any], scope: str) -> tuple[set[str], dict[str, str], set[str]]:
    """(keys in argv, key -> the credential it fills, every key referenced), all platforms."""
    if not isinstance(config.get("command"), str):
        raise EntryInvalid(pointer(scope, "command"), "expected a string")
    variants = [(config, scope)]
    overrides = pick(config, ("platform_overrides",), dict, scope) or {}
    for platform, override in overrides.items():
        oscope = pointer(scope, "platform_overrides", platform)
        if not isinstance(override, dict):
            raise EntryInvalid(oscope, "expected an object")
        variants.append((override, oscope))
    in_argv: set[str] = set()
    fills: dict[str, str] = {}
    referenced: set[str] = set()
    for variant, vscope in variants:
        for arg in pick_strings(variant, "args", vscope):
            refs = _USER_CONFIG_REF.findall(arg)
            in_argv.update(refs)
            if (word := credential_word(_USER_CONFIG_REF.sub(" ", arg))) is not None:
                fills.update(dict.fromkeys(refs, f"argument: {word}"))
        for env_name, value in pick_string_map(variant, "env", vscope).items():
            refs = _USER_CONFIG_REF.findall(value)
            referenced.update(refs)
            if credential_word(env_name) is not None:
                fills.update(dict.fromkeys(refs, f"env {env_name}"))
    return in_argv, fills, referenced | in_argv


def _bound(entry: dict[str, Any], key: str, scope: str) -> float | None:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        if value is not None:
            raise EntryInvalid(pointer(scope, key), "expected a number")
        return None
    return value


def _user_config(
    doc: dict[str, Any], in_argv: set[str], fills: dict[str, str]
) -> list[ConfigInput]:
    declared = pick(doc, ("user_config",), dict, "") or {}
    inputs = []
    for key, entry in declared.items():
        scope = pointer("/user_config", key)
        name_of(key, scope)
        if not isinstance(entry, dict):
            raise EntryInvalid(scope, "expected an object")
        kind = pick(entry, ("type",), str, scope)
        if kind not in _USER_CONFIG_KINDS:
            raise EntryInvalid(pointer(scope, "type"), "unknown user_config type")
        title = pick(entry, ("title",), str, scope) or ""
        description = pick(entry, ("description",), str, scope) or title
        sensitive = pick(entry, ("sensitive",), bool, scope)
        multiple = bool(pick(entry, ("multiple",), bool, scope))
        value_type: ValueType = "array" if multiple else _USER_CONFIG_TYPES.get(kind, "string")
        verdict = classify(
            Evidence(
                name=key,
                description=f"{title} {description}",
                marked="sensitive" if sensitive else None,
                marked_public="sensitive: false" if sensitive is False else None,
                fills=fills.get(key),
                value_type=_USER_CONFIG_TYPES.get(kind, "string"),
                path=kind in ("directory", "file"),
            )
        )
        secret = verdict.secret
        inputs.append(
            ConfigInput(
                name=key,
                description=description,
                required=bool(pick(entry, ("required",), bool, scope)),
                secret=secret,
                kind="user_config",
                location=scope,
                has_fixed_value=False,
                in_argv=key in in_argv,
                value_type=value_type,
                reason=verdict.reason,
                title=title,
                default=public_default(entry.get("default"), value_type, secret),
                format=kind if kind in ("directory", "file") else "",
                minimum=_bound(entry, "min", scope),
                maximum=_bound(entry, "max", scope),
            )
        )
    return inputs


def _hard_coded(config: dict[str, Any], scope: str, out: Collector) -> None:
    """A credential the manifest writes itself (not through ``${user_config.KEY}``) is
    reported where it is, never echoed: the bundle cannot be configured without it showing."""
    args = [a if isinstance(a, str) else "" for a in config.get("args") or []]
    for i, arg in enumerate(args):
        if not _USER_CONFIG_REF.search(arg) and (found := argv_credential(args, i)) is not None:
            out.note(
                "credential_in_manifest",
                pointer(scope, "args", i),
                f"the manifest writes a credential on the command line ({found[1]})",
            )
    env = config.get("env")
    for name, value in (env if isinstance(env, dict) else {}).items():
        if not isinstance(value, str) or _USER_CONFIG_REF.search(value) or "${" in value:
            continue
        if value.strip() and (credential_word(name) is not None or TOKEN_SHAPE.match(value)):
            out.note(
                "credential_in_manifest",
                pointer(scope, "env", name),
                "the manifest writes a credential into the environment itself",
            )


def _kind(server_type: str | None) -> str:
    return f"of type {server_type[:40]!r}" if server_type else "of no type"


def _bundle_server(doc: dict[str, Any], out: Collector) -> ImportedServer:
    name = name_of(doc.get("name"), "/name")
    server = pick(doc, ("server",), dict, "") or {}
    server_type = pick(server, ("type",), str, "/server")
    config = pick(server, ("mcp_config",), dict, "/server")
    if config is None and server_type not in _RUNS_ITSELF:
        raise EntryInvalid(
            "/server/mcp_config",
            "bundle declares no server.mcp_config, so nothing says how to run it (only uv and "
            f"python bundles may leave it out; this one is {_kind(server_type)})",
            "no_mcp_config",
        )
    wiring = _wiring(config, "/server/mcp_config") if config else (set(), {}, set())
    in_argv, fills, referenced = wiring
    inputs = _user_config(doc, in_argv, fills)
    for ref in sorted(referenced - {i.name for i in inputs}):
        out.note("undeclared_user_config", "/server/mcp_config", f"references undeclared {ref!r}")
    if config:
        _hard_coded(config, "/server/mcp_config", out)
    tools, details = [], []
    for i, tool in enumerate(pick(doc, ("tools",), list, "") or []):
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            tools.append(name_of(tool["name"], pointer("/tools", i, "name")))
            if (detail := _tool_detail(tool, tools[-1], pointer("/tools", i), out)) is not None:
                details.append(detail)
        else:
            out.note("invalid_tool", pointer("/tools", i), "tool entry ignored: no string name")
    return ImportedServer(
        name=name,
        strategy=StrategyKind.LOCAL_MCP,
        transport="stdio",
        inputs=tuple(inputs),
        title=pick(doc, ("display_name",), str, "") or "",
        description=pick(doc, ("description",), str, "") or "",
        version=pick(doc, ("version",), str, "") or "",
        registry="mcpb",
        tools=tuple(tools),
        tool_details=tuple(details),
        location="",
        launch=bundle_recipe(doc, tuple(inputs)),
    )


def _tool_detail(
    tool: dict[str, Any], name: str, scope: str, out: Collector
) -> DeclaredTool | None:
    """A tool's description and input schema (`inputSchema`, as MCP's tools/list spells it),
    None when it declares neither. A description is cut to `MAX_TOOL_DESCRIPTION`; a value
    of the wrong type is left out with a note, as the tool itself stays."""
    description = tool.get("description")
    if not isinstance(description, str):
        description = ""
    schema = tool.get("inputSchema")
    if schema is not None and not isinstance(schema, dict):
        out.note("invalid_tool", pointer(scope, "inputSchema"), "input schema is not an object")
        schema = None
    if not description and schema is None:
        return None
    text = "" if schema is None else json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return DeclaredTool(name, description[:MAX_TOOL_DESCRIPTION], text)


def parse_bundle_manifest(doc: dict[str, Any], max_servers: int) -> Collector:
    del max_servers  # a bundle is exactly one server
    out = Collector()
    try:
        out.servers.append(_bundle_server(doc, out))
    except EntryInvalid as exc:
        name = doc.get("name")
        out.skip(exc, name if isinstance(name, str) else "")
    return out
