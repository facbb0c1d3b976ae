"""Client configurations: Claude Desktop ``mcpServers``, VS Code ``servers`` (``.vscode/mcp.json``)
and the ``mcp`` block of a VS Code ``settings.json``.

A client entry carries values, not declarations: each ``env`` variable and each header is one
input, named by its key; placeholders (``${input:ID}``, ``${env:NAME}``, ``${NAME}``) in
``args`` and in the ``url`` are inputs too, and one sharing a name with an env variable is that
variable (one input, one field). Nothing marks secrecy except VS Code ``inputs`` declared with
``password``, so ``classify`` decides fail-closed from names, descriptions and the *shape* of
the value (a number, a path, a URL with or without credentials); the value itself is never
kept. The literal ``args`` are not inputs. One invalid entry is skipped with a diagnostic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit_package import placeholders
from toolkit_package.argv import argv_credential, url_credential
from toolkit_package.classify import Evidence, UrlPart, classify
from toolkit_package.imported import (
    Collector,
    ConfigInput,
    EntryInvalid,
    ImportedServer,
    ImportRefused,
    InputKind,
    name_of,
    one_field_per_name,
    pick,
    pick_string_map,
    pick_strings,
    pointer,
    public_default,
    string_choices,
)
from toolkit_package.model import StrategyKind

__all__ = ["client_servers", "parse_client_config"]

_REMOTE_TYPES = {
    None: "streamable-http",
    "http": "streamable-http",
    "streamable-http": "streamable-http",
    "sse": "sse",
}


@dataclass(frozen=True)
class _Declared:
    """A VS Code ``inputs`` entry: what the publisher of the config says about one input."""

    description: str
    password: bool | None
    options: Any = None
    default: Any = None


Declared = dict[str, _Declared]


def client_servers(doc: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """(JSON pointer, servers map, the object holding ``inputs``) of a client config."""
    block = doc.get("mcp")
    if isinstance(block, dict) and "servers" in block and not {"mcpServers", "servers"} & set(doc):
        return "/mcp/servers", block["servers"], block
    keys = [k for k in ("mcpServers", "servers") if k in doc]
    if len(keys) != 1:
        raise ImportRefused("ambiguous_format", "holds both mcpServers and servers")
    return "/" + keys[0], doc[keys[0]], doc


def _declared_inputs(block: dict[str, Any], base: str, out: Collector) -> Declared:
    """VS Code ``inputs``: id -> (description, password). Bad ones are just ignored."""
    declared: Declared = {}
    raw = block.get("inputs")
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        ok = isinstance(item, dict) and isinstance(item.get("id"), str)
        if not ok or not isinstance(item.get("password", False), bool):
            out.note("invalid_input_declaration", pointer(base, "inputs", i), "ignored")
            continue
        desc = item.get("description")
        declared[item["id"]] = _Declared(
            desc if isinstance(desc, str) else "",
            item.get("password"),
            item.get("options") if item.get("type") == "pickString" else None,
            item.get("default"),
        )
    return declared


def _field(
    name: str,
    kind: InputKind,
    location: str,
    declared: Declared,
    *,
    literal: str | None = None,
    in_argv: bool = False,
    url_part: UrlPart | None = None,
) -> ConfigInput:
    refs = placeholders.names(literal or "") if kind != "variable" else [name]
    described = [declared[r] for r in refs if r in declared]
    description = " ".join(d.description for d in described if d.description)
    password = [d.password for d in described]
    plain = literal if literal is not None and not refs else None
    # Only an input that is exactly one declared placeholder offers that input's choices and
    # default; the config's own literal value is never kept.
    whole = None
    if len(described) == 1 and (kind == "variable" or (literal or "").strip() == _ref(refs[0])):
        whole = described[0]
    verdict = classify(
        Evidence(
            name=name,
            description=description,
            header=kind == "header",
            marked="password input" if any(password) else None,
            marked_public="password: false"
            if password and all(p is False for p in password)
            else None,
            url_part=url_part,
            literal=plain,
            choices=bool(whole and string_choices(whole.options, False)),
        )
    )
    return ConfigInput(
        name=name,
        description=description,
        required=True,
        secret=verdict.secret,
        kind=kind,
        location=location,
        has_fixed_value=False,
        in_argv=in_argv,
        reason=verdict.reason,
        default=public_default(whole.default, "string", verdict.secret) if whole else None,
        choices=string_choices(whole.options, verdict.secret) if whole else (),
    )


def _ref(ref: str) -> str:
    return "${input:" + ref + "}"


def _moved(
    found: tuple[str, str], location: str, kind: InputKind, out: Collector, *, in_argv: bool
) -> ConfigInput:
    """A credential written into the config becomes a secret field the vault holds; the
    report names where it was and why, never the value."""
    name, why = found
    out.note(
        "credential_in_config",
        location,
        f"a credential is written here ({why}); it was not imported: the vault holds it as "
        f"the secret field {name!r}; take it out of the file",
    )
    return ConfigInput(
        name=name,
        description=f"The credential the config wrote in place ({why})",
        required=True,
        secret=True,
        kind=kind,
        location=location,
        has_fixed_value=False,
        in_argv=in_argv,
        reason=f"credential in the config: {why}",
    )


def _client_entry(
    name: str, entry: Any, scope: str, declared: Declared, out: Collector
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
        _field(k, "env", pointer(scope, "env", k), declared, literal=v)
        for k, v in pick_string_map(entry, "env", scope).items()
    ]
    inputs += [
        _field(k, "header", pointer(scope, "headers", k), declared, literal=v)
        for k, v in pick_string_map(entry, "headers", scope).items()
    ]
    args = pick_strings(entry, "args", scope)
    for i, arg in enumerate(args):
        loc = pointer(scope, "args", i)
        for ref in placeholders.names(arg):
            inputs.append(_field(ref, "variable", loc, declared, in_argv=True))
        if (found := argv_credential(args, i)) is not None:
            inputs.append(_moved(found, loc, "argument", out, in_argv=True))
    if url is not None and (found := url_credential(url)) is not None:
        inputs.append(_moved(found, pointer(scope, "url"), "variable", out, in_argv=False))
    for ref, part in placeholders.url_parts(url or "").items():
        inputs.append(_field(ref, "variable", pointer(scope, "url"), declared, url_part=part))
    return ImportedServer(
        name=name,
        strategy=StrategyKind.LOCAL_MCP if command is not None else StrategyKind.REMOTE_MCP,
        transport="stdio" if command is not None else _REMOTE_TYPES[kind],
        inputs=one_field_per_name(inputs),
        location=scope,
        command=_command_line(command, args, inputs),
    )


def _command_line(
    command: str | None, args: list[str], inputs: list[ConfigInput]
) -> tuple[str, ...]:
    """The entry's command line, kept to run it, unless an argument carries an input (a
    placeholder or a credential written in place: argv is readable by every local user)."""
    if command is None or any(item.in_argv for item in inputs):
        return ()
    return (command, *args)


def parse_client_config(doc: dict[str, Any], max_servers: int) -> Collector:
    base, servers, block = client_servers(doc)
    if not isinstance(servers, dict):
        raise ImportRefused("invalid_client_config", f"{base.lstrip('/')} is not an object")
    if len(servers) > max_servers:
        raise ImportRefused("too_many_servers", f"more than {max_servers} servers")
    out = Collector()
    declared = _declared_inputs(block, base.rsplit("/", 1)[0], out)
    for name, entry in servers.items():
        scope = pointer(base, name)
        try:
            out.servers.append(_client_entry(name_of(name, scope), entry, scope, declared, out))
        except EntryInvalid as exc:
            out.skip(exc, name)
    return out
