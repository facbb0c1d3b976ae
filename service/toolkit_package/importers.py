"""Importers for public MCP metadata, reduced to one neutral, value-free result.

Three formats are understood: the MCP registry ``server.json`` (camelCase and the older
snake_case schemas), the MCP bundle ``manifest.json`` and client configurations holding an
``mcpServers`` or ``servers`` map. Anything else is refused, never guessed. The result keeps
names, secrecy and placement of configuration inputs but no configuration value at all: no
command, argument, default, fixed value, header value or URL survives parsing, so nothing
downstream can leak one. An entry that is not fully understood is skipped with a diagnostic
rather than half-imported, because a half-read entry could lose a secret marking.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from . import formats
from .jsonbound import BoundsRefused, loads_bounded
from .model import StrategyKind

__all__ = [
    "MAX_SERVERS",
    "ConfigInput",
    "Format",
    "ImportDiagnostic",
    "ImportRefused",
    "ImportResult",
    "ImportedServer",
    "InputKind",
    "import_metadata",
]

MAX_SERVERS = 1000

Format = Literal["mcp_registry_server", "mcp_bundle_manifest", "client_config"]
InputKind = Literal["env", "header", "argument", "variable", "user_config"]


@dataclass(frozen=True)
class ConfigInput:
    """One configuration input. ``location`` is a JSON pointer into the source document.

    ``has_fixed_value`` inputs are set by the package itself and belong to no form; ``in_argv``
    inputs end up on a command line, where every local user can read them.
    """

    name: str
    description: str
    required: bool
    secret: bool
    kind: InputKind
    location: str
    has_fixed_value: bool
    in_argv: bool
    value_type: Literal["string", "number", "boolean"] = "string"


@dataclass(frozen=True)
class ImportedServer:
    name: str
    strategy: StrategyKind
    transport: str
    inputs: tuple[ConfigInput, ...]
    title: str = ""
    description: str = ""
    version: str = ""
    registry: str = ""
    tools: tuple[str, ...] = ()
    roles: tuple[str, ...] = ("service",)
    location: str = ""

    @property
    def configurable(self) -> tuple[ConfigInput, ...]:
        return tuple(i for i in self.inputs if not i.has_fixed_value)


@dataclass(frozen=True)
class ImportDiagnostic:
    """``scope`` is a JSON pointer; like names, it is untrusted public source text."""

    code: str
    scope: str
    message: str


@dataclass(frozen=True)
class ImportResult:
    format: Format
    servers: tuple[ImportedServer, ...]
    skipped: int
    diagnostics: tuple[ImportDiagnostic, ...]
    input_sha256: str


class ImportRefused(ValueError):
    """The whole input is refused; ``code`` and ``message`` never hold an input value."""

    def __init__(self, code: str, message: str, input_sha256: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.input_sha256 = input_sha256


def _detect(doc: Any) -> Format:
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
        or (isinstance(schema, str) and schema.endswith("server.schema.json"))
    ):
        hits.append("mcp_registry_server")
    if not hits:
        raise ImportRefused("unknown_format", "not a server.json, bundle manifest or client map")
    if len(hits) > 1:
        raise ImportRefused("ambiguous_format", "document matches more than one known format")
    return hits[0]


def _to_server(raw: formats.RawServer) -> ImportedServer:
    return ImportedServer(
        name=raw.name,
        strategy=StrategyKind(raw.strategy),
        transport=raw.transport,
        inputs=tuple(ConfigInput(**vars(i)) for i in raw.inputs),
        title=raw.title,
        description=raw.description,
        version=raw.version,
        registry=raw.registry,
        tools=raw.tools,
        location=raw.location,
    )


def import_metadata(data: bytes) -> ImportResult:
    """Parse untrusted bytes into an ``ImportResult`` or raise ``ImportRefused``."""
    digest = hashlib.sha256(data).hexdigest()
    try:
        doc = loads_bounded(data)
        fmt = _detect(doc)
        parsed = formats.PARSERS[fmt](doc, MAX_SERVERS)
    except BoundsRefused as exc:
        raise ImportRefused(exc.code, exc.message, digest) from None
    except formats.Refused as exc:
        raise ImportRefused(exc.code, exc.message, digest) from None
    except ImportRefused as exc:
        raise ImportRefused(exc.code, exc.message, digest) from None
    diagnostics = tuple(ImportDiagnostic(d.code, d.scope, d.message) for d in parsed.diagnostics)
    return ImportResult(
        format=fmt,
        servers=tuple(_to_server(s) for s in parsed.servers),
        skipped=parsed.skipped,
        diagnostics=diagnostics,
        input_sha256=digest,
    )
