"""Importers for public MCP metadata, reduced to one neutral, value-free ``ImportResult``.

Three formats are understood: the MCP registry ``server.json`` (every published schema,
camelCase and the older snake_case), the MCP bundle ``manifest.json`` and client
configurations holding an ``mcpServers`` or ``servers`` map. The format is recognised by its
defining keys; a document matching none, or more than one, is refused rather than guessed.
Parsing is bounded (size, depth, string length, duplicate keys, server count): a hostile
document is an ``ImportRefused``, never a traceback.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from .clients import parse_bundle_manifest, parse_client_config
from .imported import (
    MAX_SERVERS,
    Collector,
    ConfigInput,
    Format,
    ImportDiagnostic,
    ImportedServer,
    ImportRefused,
    ImportResult,
    InputKind,
)
from .jsonbound import MAX_INPUT_BYTES, BoundsRefused, loads_bounded
from .registry import parse_server_json

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
    "detect_format",
    "import_metadata",
]

_PARSERS: dict[Format, Callable[[dict[str, Any], int], Collector]] = {
    "mcp_registry_server": parse_server_json,
    "mcp_bundle_manifest": parse_bundle_manifest,
    "client_config": parse_client_config,
}


def detect_format(doc: Any) -> Format:
    """Recognise a format by its defining keys; refuse none and refuse several."""
    if not isinstance(doc, dict):
        raise ImportRefused("unknown_format", "top-level JSON value is not an object")
    hits: list[Format] = []
    if "mcpServers" in doc or "servers" in doc:
        hits.append("client_config")
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
        raise ImportRefused("unknown_format", "not a server.json, bundle manifest or client map")
    if len(hits) > 1:
        raise ImportRefused("ambiguous_format", "document matches more than one known format")
    return hits[0]


def import_metadata(data: bytes) -> ImportResult:
    """Parse untrusted bytes into an ``ImportResult`` or raise ``ImportRefused``.

    ``input_sha256`` is the hex SHA-256 of exactly ``data``, refused or not.
    """
    digest = hashlib.sha256(data).hexdigest()
    try:
        doc = loads_bounded(data)
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
    )
