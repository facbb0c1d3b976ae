"""MCP bundle ``manifest.json`` and client configurations (``mcpServers`` / ``servers`` maps).

A bundle declares its configuration in ``user_config`` (``sensitive`` marks secrets) and wires
it into ``server.mcp_config`` through ``${user_config.KEY}``; a key referenced from ``args`` is
passed on the command line. A client configuration carries no secrecy marking at all, and its
``env`` and ``headers`` values are commonly credentials, so every one of them is treated as
secret (fail closed); its literal ``args`` are not inputs, only ``${input:ID}`` /
``${env:NAME}`` placeholders in them are. One invalid entry is skipped with a diagnostic.
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
    ValueType,
    name_of,
    pick,
    pointer,
)
from .model import StrategyKind

__all__ = ["parse_bundle_manifest", "parse_client_config"]

_USER_CONFIG_REF = re.compile(r"\$\{user_config\.([A-Za-z0-9_.-]{1,128})\}")
_CLIENT_REF = re.compile(r"\$\{(?:input:|env:)?([A-Za-z_][A-Za-z0-9_.-]{0,127})\}")
_USER_CONFIG_TYPES: dict[str, ValueType] = {"number": "number", "boolean": "boolean"}
_USER_CONFIG_KINDS = frozenset({"string", "number", "boolean", "directory", "file"})
_REMOTE_TYPES = {
    None: "streamable-http",
    "http": "streamable-http",
    "streamable-http": "streamable-http",
    "sse": "sse",
}


def _strings(obj: dict[str, Any], key: str, scope: str) -> list[str]:
    values = pick(obj, (key,), list, scope) or []
    if not all(isinstance(v, str) for v in values):
        raise EntryInvalid(pointer(scope, key), "expected a list of strings")
    return values


def _string_map(obj: dict[str, Any], key: str, scope: str) -> dict[str, str]:
    values = pick(obj, (key,), dict, scope) or {}
    if not all(isinstance(v, str) for v in values.values()):
        raise EntryInvalid(pointer(scope, key), "expected an object of strings")
    for k in values:
        name_of(k, pointer(scope, key, k))
    return values


def _bundle_server(doc: dict[str, Any], out: Collector) -> ImportedServer:
    name = name_of(doc.get("name"), "/name")
    server = pick(doc, ("server",), dict, "") or {}
    config = pick(server, ("mcp_config",), dict, "/server")
    if config is None:
        raise EntryInvalid("/server/mcp_config", "bundle declares no mcp_config")
    cscope = "/server/mcp_config"
    if not isinstance(config.get("command"), str):
        raise EntryInvalid(pointer(cscope, "command"), "expected a string")
    args = _strings(config, "args", cscope)
    env = _string_map(config, "env", cscope)
    in_argv = {ref for arg in args for ref in _USER_CONFIG_REF.findall(arg)}
    referenced = in_argv | {ref for v in env.values() for ref in _USER_CONFIG_REF.findall(v)}
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
        description = pick(entry, ("description",), str, scope)
        inputs.append(
            ConfigInput(
                name=key,
                description=description or pick(entry, ("title",), str, scope) or "",
                required=bool(pick(entry, ("required",), bool, scope)),
                secret=bool(pick(entry, ("sensitive",), bool, scope)),
                kind="user_config",
                location=scope,
                has_fixed_value=False,
                in_argv=key in in_argv,
                value_type=_USER_CONFIG_TYPES.get(kind, "string"),
            )
        )
    for ref in sorted(referenced - set(declared)):
        out.note("undeclared_user_config", cscope, f"references undeclared user_config {ref!r}")
    tools = []
    for i, tool in enumerate(pick(doc, ("tools",), list, "") or []):
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            tools.append(name_of(tool["name"], pointer("/tools", i, "name")))
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
        location="",
    )


def parse_bundle_manifest(doc: dict[str, Any], max_servers: int) -> Collector:
    del max_servers  # a bundle is exactly one server
    out = Collector()
    try:
        out.servers.append(_bundle_server(doc, out))
    except EntryInvalid as exc:
        out.skip(exc)
    return out


def _declared_inputs(doc: dict[str, Any], out: Collector) -> dict[str, tuple[str, bool]]:
    """VS Code style ``inputs``: id -> (description, password). Bad ones are just ignored."""
    declared: dict[str, tuple[str, bool]] = {}
    raw = doc.get("inputs")
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        ok = isinstance(item, dict) and isinstance(item.get("id"), str)
        if not ok or not isinstance(item.get("password", False), bool):
            out.note("invalid_input_declaration", pointer("/inputs", i), "ignored")
            continue
        desc = item.get("description")
        declared[item["id"]] = (desc if isinstance(desc, str) else "", item.get("password", False))
    return declared


def _client_entry(
    name: str, entry: Any, scope: str, declared: dict[str, tuple[str, bool]]
) -> ImportedServer:
    if not isinstance(entry, dict):
        raise EntryInvalid(scope, "expected an object")
    command = pick(entry, ("command",), str, scope)
    url = pick(entry, ("url",), str, scope)
    kind = pick(entry, ("type",), str, scope)
    if (command is None) == (url is None):
        raise EntryInvalid(scope, "needs exactly one of command and url")
    if command is not None and kind not in (None, "stdio"):
        raise EntryInvalid(pointer(scope, "type"), "a command entry uses the stdio transport")
    if url is not None and kind not in _REMOTE_TYPES:
        raise EntryInvalid(pointer(scope, "type"), "unknown remote transport")
    inputs = [
        ConfigInput(k, "", True, True, "env", pointer(scope, "env", k), False, False)
        for k in _string_map(entry, "env", scope)
    ]
    inputs += [
        ConfigInput(k, "", True, True, "header", pointer(scope, "headers", k), False, False)
        for k in _string_map(entry, "headers", scope)
    ]
    for i, arg in enumerate(_strings(entry, "args", scope)):
        for ref in dict.fromkeys(_CLIENT_REF.findall(arg)):
            desc, password = declared.get(ref, ("", True))
            loc = pointer(scope, "args", i)
            inputs.append(ConfigInput(ref, desc, True, password, "variable", loc, False, True))
    return ImportedServer(
        name=name,
        strategy=StrategyKind.LOCAL_MCP if command is not None else StrategyKind.REMOTE_MCP,
        transport="stdio" if command is not None else _REMOTE_TYPES[kind],
        inputs=tuple(inputs),
        location=scope,
    )


def parse_client_config(doc: dict[str, Any], max_servers: int) -> Collector:
    keys = [k for k in ("mcpServers", "servers") if k in doc]
    if len(keys) != 1:
        raise ImportRefused("ambiguous_format", "holds both mcpServers and servers")
    servers = doc[keys[0]]
    if not isinstance(servers, dict):
        raise ImportRefused("invalid_client_config", f"{keys[0]} is not an object")
    if len(servers) > max_servers:
        raise ImportRefused("too_many_servers", f"more than {max_servers} servers")
    out = Collector()
    declared = _declared_inputs(doc, out)
    for name, entry in servers.items():
        scope = pointer("", keys[0], name)
        try:
            out.servers.append(_client_entry(name_of(name, scope), entry, scope, declared))
        except EntryInvalid as exc:
            out.skip(exc)
    return out
