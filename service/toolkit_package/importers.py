"""Importers for public MCP metadata, reduced to one neutral, value-free ``ImportResult``.

Formats: the MCP registry ``server.json`` (every published schema, camelCase and the older
snake_case), a registry listing (``{"servers": [...]}``, the shape of its list API, whose
items may wrap the server.json in ``{"server": ...}``) or a bare JSON list of server.json
objects, the MCP bundle ``manifest.json`` (MCPB and DXT), and client configurations: an
``mcpServers`` or ``servers`` map, or the ``mcp`` block of a VS Code ``settings.json``. The
format is recognised by its defining keys; a document matching none, or more than one, is
refused rather than guessed. Input is JSONC (comments and trailing commas, as VS Code writes
it); parsing is bounded (size, depth, string length, duplicate keys, server count), so a
hostile document is an ``ImportRefused``, never a traceback. A listing imports entry by
entry: an invalid entry is skipped with a diagnostic, never the whole listing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from toolkit_package.bundles import parse_bundle_manifest
from toolkit_package.clients import parse_client_config
from toolkit_package.imported import (
    MAX_SERVERS,
    Collector,
    ConfigInput,
    EntryInvalid,
    Format,
    ImportDiagnostic,
    ImportedServer,
    ImportRefused,
    ImportResult,
    InputKind,
    SkippedServer,
    pointer,
)
from toolkit_package.jsonbound import MAX_INPUT_BYTES, BoundsRefused, loads_bounded
from toolkit_package.server_json import parse_server_json

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_SERVERS",
    "ConfigInput",
    "Format",
    "ImportDiagnostic",
    "ImportRefused",
    "ImportResult",
    "ImportedServer",
    "InputKind",
    "SkippedServer",
    "detect_format",
    "import_metadata",
]


def _listing(doc: Any) -> tuple[str, list[Any]] | None:
    """(JSON pointer, items) when ``doc`` is a registry listing or a bare list."""
    if isinstance(doc, list):
        return "", doc
    if isinstance(doc, dict) and isinstance(doc.get("servers"), list):
        return "/servers", doc["servers"]
    return None


def parse_listing(doc: Any, max_servers: int) -> Collector:
    base, items = _listing(doc) or ("", [])
    out = Collector()
    for i, item in enumerate(items):
        scope = pointer(base, i)
        wrapped = isinstance(item, dict) and isinstance(item.get("server"), dict)
        entry, escope = (item["server"], pointer(scope, "server")) if wrapped else (item, scope)
        name = entry.get("name") if isinstance(entry, dict) else None
        try:
            if not isinstance(entry, dict):
                raise ImportRefused("invalid_server_json", f"{escope}: expected an object")
            parsed = parse_server_json(entry, max_servers - len(out.servers), escope)
        except ImportRefused as exc:
            if exc.code == "too_many_servers":
                raise ImportRefused(exc.code, f"more than {max_servers} servers") from None
            out.skip(
                EntryInvalid(escope, exc.message, exc.code), name if isinstance(name, str) else ""
            )
            continue
        out.extend(parsed)
    latest = {server.name: n for n, server in enumerate(out.servers)}
    for n, server in enumerate(out.servers):
        if latest[server.name] != n:
            message = "a later entry of this listing has the same name"
            out.skip(EntryInvalid(server.location, message, "superseded"), server.name)
    out.servers = [s for n, s in enumerate(out.servers) if latest[s.name] == n]
    return out


_PARSERS: dict[Format, Callable[[Any, int], Collector]] = {
    "mcp_registry_server": lambda doc, limit: parse_server_json(doc, limit),
    "mcp_registry_list": parse_listing,
    "mcp_bundle_manifest": parse_bundle_manifest,
    "client_config": parse_client_config,
    "vscode_settings": parse_client_config,
}


def _looks_listed(item: Any) -> bool:
    return isinstance(item, dict) and (isinstance(item.get("server"), dict) or "name" in item)


def detect_format(doc: Any) -> Format:
    """Recognise a format by its defining keys; refuse none and refuse several."""
    if isinstance(doc, list):
        if doc and all(_looks_listed(item) for item in doc):
            return "mcp_registry_list"
        raise ImportRefused("unknown_format", "a top-level list that holds no server.json")
    if not isinstance(doc, dict):
        raise ImportRefused("unknown_format", "top-level JSON value is not an object")
    hits: list[Format] = []
    if isinstance(doc.get("servers"), list):
        hits.append("mcp_registry_list")
    elif "mcpServers" in doc or "servers" in doc:
        hits.append("client_config")
    elif isinstance(doc.get("mcp"), dict) and "servers" in doc["mcp"]:
        hits.append("vscode_settings")
    if ("manifest_version" in doc or "dxt_version" in doc) and "server" in doc:
        hits.append("mcp_bundle_manifest")
    schema = doc.get("$schema")
    if (
        "packages" in doc
        or "remotes" in doc
        or (isinstance(schema, str) and schema.endswith("/server.schema.json"))
    ):
        hits.append("mcp_registry_server")
    if not hits:
        raise ImportRefused(
            "unknown_format", "not a server.json, registry listing, bundle manifest or client map"
        )
    if len(hits) > 1:
        raise ImportRefused("ambiguous_format", "document matches more than one known format")
    return hits[0]


def import_metadata(data: bytes, *, max_bytes: int = MAX_INPUT_BYTES) -> ImportResult:
    """Parse untrusted bytes (at most ``max_bytes``) into an ``ImportResult`` or raise
    ``ImportRefused``. ``input_sha256`` is the hex SHA-256 of exactly ``data``, refused or not.
    """
    digest = hashlib.sha256(data).hexdigest()
    try:
        doc = loads_bounded(data, max_bytes=max_bytes, jsonc=True)
        fmt = detect_format(doc)
        parsed = _PARSERS[fmt](doc, MAX_SERVERS)
    except BoundsRefused as exc:
        raise ImportRefused(exc.code, exc.message, digest) from None
    except ImportRefused as exc:
        raise ImportRefused(exc.code, exc.message, digest) from None
    return ImportResult(
        format=fmt,
        servers=tuple(parsed.servers),
        skipped=parsed.skipped,
        diagnostics=tuple(parsed.diagnostics),
        input_sha256=digest,
        skipped_servers=tuple(parsed.skipped_servers),
    )
