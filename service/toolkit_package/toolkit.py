"""Turn an accepted import into A2E ``ToolkitDefinition`` fields for the vault.

Each imported server becomes one definition whose JSON Schema (Draft 2020-12) has one property
per configurable input. Secret inputs carry ``"writeOnly": true`` so the vault encrypts them,
and every property records its secrecy and the reason under ``x-toolkit-input``; inputs the
package fixes itself stay out of the form; ``additionalProperties: false`` keeps unknown (and
therefore unclassified) fields out. The source digest, strategy and format are recorded at the
schema root under ``x-toolkit-package``. The source digest is taken over the value-free
server description, never over the input bytes: a client config holds its user's own values,
and a stored hash of them would let anyone guess a weak one offline. A secret that reaches a
command line is flagged, because argv is visible to every local user.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from toolkit_package.imported import ConfigInput, DeclaredTool, ImportedServer, ImportResult
from toolkit_package.labels import readable

__all__ = [
    "DEFINITION_FIELDS",
    "ImportedToolkit",
    "property_names",
    "source_digest",
    "to_toolkit_definition",
    "to_toolkit_definitions",
]

DEFINITION_FIELDS = (
    "name",
    "alias",
    "description",
    "category",
    "tags",
    "icon_svg",
    "schema",
    "tools",
    "version",
)
_NOT_IDENT = re.compile(r"[^a-z0-9]+")
_MAX_PROPERTY = 64


@dataclass(frozen=True)
class ImportedToolkit:
    definition: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    # What the package says of its tools beyond their names, in MCP's tool shape
    # (`name`, `description`, `inputSchema`): none for most packages.
    tools: list[dict[str, Any]] = field(default_factory=list)


def _identifier(name: str) -> str:
    base = _NOT_IDENT.sub("_", name.lower()).strip("_")
    if not base or not base[0].isalpha():
        base = f"field_{base}".rstrip("_")
    return base[:_MAX_PROPERTY].rstrip("_")


def property_names(inputs: Iterable[ConfigInput]) -> list[str]:
    """Safe ``[a-z][a-z0-9_]*`` names, deduplicated in input order (``token``, ``token_2``)."""
    taken: set[str] = set()
    names = []
    for item in inputs:
        base = candidate = _identifier(item.name)
        n = 1
        while candidate in taken:
            n += 1
            suffix = f"_{n}"
            candidate = base[: _MAX_PROPERTY - len(suffix)] + suffix
        taken.add(candidate)
        names.append(candidate)
    return names


_SCHEMA_FORMATS = frozenset(
    {"uri", "uri-reference", "email", "hostname", "ipv4", "ipv6", "date", "date-time", "uuid"}
)


def _property(item: ConfigInput, order: int) -> dict[str, Any]:
    """One form field: the publisher's title (else the input's name made readable: `SSL_MODE`
    is "SSL mode"; an HTTP header keeps its own), description, choices
    (``enum``), default, bounds and format, and ``x-order``, its place in the source (a stored
    schema's key order is not kept by every database)."""
    label = item.name if item.kind == "header" else readable(item.name)  # a header's own name
    prop: dict[str, Any] = {"type": item.value_type, "title": item.title or label}
    if item.value_type == "array":
        prop["items"] = {"type": "string"}
    if item.description:
        prop["description"] = item.description
    if item.choices and item.value_type == "string":
        prop["enum"] = list(item.choices)
    if item.default is not None and not item.secret:
        default = list(item.default) if isinstance(item.default, tuple) else item.default
        if not item.choices or default in item.choices:
            prop["default"] = default
    if item.format in _SCHEMA_FORMATS:
        prop["format"] = item.format
    if item.value_type == "number":
        if item.minimum is not None:
            prop["minimum"] = item.minimum
        if item.maximum is not None:
            prop["maximum"] = item.maximum
    if item.secret:
        prop["writeOnly"] = True
    prop["x-order"] = order
    prop["x-toolkit-input"] = {
        "kind": item.kind,
        "name": item.name,
        "in_argv": item.in_argv,
        "secret": item.secret,
        "reason": item.reason,
    }
    if item.format:
        prop["x-toolkit-input"]["format"] = item.format
    return prop


def _relative(location: str, base: str) -> str:
    return location[len(base) :] if base and location.startswith(base) else location


def source_digest(server: ImportedServer) -> str:
    """``sha256:`` over the canonical JSON of the value-free server description.

    Locations count relative to the server's own entry, so the digest depends on the server,
    not on the document wrapping it: a bare registry list, ``{"servers": [...]}`` and the
    server.json alone give the same digest."""
    base = server.location
    inputs = [dataclasses.replace(i, location=_relative(i.location, base)) for i in server.inputs]
    server = dataclasses.replace(server, location="", inputs=tuple(inputs))
    fields = dataclasses.asdict(server)
    if not fields["launch"]:
        del fields["launch"]  # digests of servers the vault does not launch stay as they were
    described = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(described.encode()).hexdigest()


def _warnings(server: ImportedServer) -> list[str]:
    return [
        f"{server.name}: secret {item.kind} {item.name!r} is passed on the command line; "
        "argv is visible to every local user"
        for item in server.inputs
        if item.secret and item.in_argv
    ]


def to_toolkit_definition(server: ImportedServer, fmt: str) -> ImportedToolkit:
    """One server as A2E definition fields; ``fmt`` is the input's format, for the record."""
    inputs = server.configurable
    names = property_names(inputs)
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            name: _property(item, n)
            for n, (name, item) in enumerate(zip(names, inputs, strict=True))
        },
        "required": [name for name, item in zip(names, inputs, strict=True) if item.required],
        "additionalProperties": False,
        "x-toolkit-package": {
            "digest": source_digest(server),
            "strategy": server.strategy.value,
            "format": fmt,
        },
    }
    if server.command:  # what `toolkits.served` runs: the command, each variable's field
        env = {i.name: n for n, i in zip(names, inputs, strict=True) if i.kind == "env"}
        schema["x-toolkit-package"]["launch"] = {"argv": list(server.command), "env": env}
    elif server.launch:  # a registry package or remote: its recipe, and each input's field
        recipe = json.loads(server.launch)
        key = "connect" if "remote" in recipe else "launch"
        fields = {i.name: n for n, i in zip(names, inputs, strict=True)}
        schema["x-toolkit-package"][key] = {"recipe": recipe, "fields": fields}
    tags = list(dict.fromkeys(t for t in (fmt, server.transport, server.registry) if t))
    definition = {
        "name": server.name,
        "alias": server.name.rsplit("/", 1)[-1].split("#", 1)[0][:64],
        "description": server.description or server.title,
        "category": server.strategy.value,
        "tags": tags,
        "icon_svg": None,
        "schema": schema,
        "tools": list(server.tools),
        "version": server.version or "1.0.0",
    }
    tools = [_tool(detail) for detail in server.tool_details]
    return ImportedToolkit(definition=definition, warnings=_warnings(server), tools=tools)


def _tool(detail: DeclaredTool) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": detail.name, "description": detail.description}
    if detail.input_schema:
        tool["inputSchema"] = json.loads(detail.input_schema)
    return tool


def to_toolkit_definitions(result: ImportResult) -> list[ImportedToolkit]:
    """One toolkit per accepted server, in document order."""
    return [to_toolkit_definition(server, result.format) for server in result.servers]
