"""An upstream server's tools as the vault keeps them: its `tools/list` entries made safe
to show and to store. Everything in them is untrusted text written by a server the vault
did not write, and a model reads it (a description is where a prompt injection hides):
texts are bounded and stripped of control characters (terminal escapes, NULs, bidi
overrides are not text a person or a model needs), and schemas are kept as data, never
interpreted here, but bounded in size.

A tool whose name is not a plain, bounded name, or whose schema is not a JSON object
within the bound, is left out (with a log line naming neither its text nor its schema):
calling a tool needs its exact name, and a schema the vault cannot hold whole cannot check
arguments.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit_vault.canonical import canonical_json

if TYPE_CHECKING:
    import mcp_types as types

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_SCHEMA_BYTES",
    "MAX_TOOLS",
    "ToolDescription",
    "describe_tools",
]

logger = logging.getLogger(__name__)

MAX_NAME_CHARS = 128
MAX_TITLE_CHARS = 256
MAX_DESCRIPTION_CHARS = 8192
MAX_SCHEMA_BYTES = 64 * 1024  # canonical JSON of one schema
MAX_TOOLS = 1000  # of one server
# Control characters (C0 but tab and newline, DEL, C1), and the invisible format
# characters that reorder or hide text (bidi embeddings, overrides and isolates, zero
# widths, the BOM).
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)
_NAME = re.compile(rf"[A-Za-z0-9_.\-/]{{1,{MAX_NAME_CHARS}}}")


@dataclass(frozen=True)
class ToolDescription:
    """One tool of an upstream server, sanitized; `input_schema` and `output_schema` are
    JSON data as the server sent them (within their bound)."""

    name: str
    title: str | None
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None

    def as_json(self) -> dict[str, Any]:
        """The tool as plain JSON (snake_case keys, the A2E wire's spelling)."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "annotations": self.annotations,
        }


def clean_text(text: str | None, limit: int) -> str:
    """`text` without control or invisible format characters, cut to `limit` characters."""
    return _CONTROL.sub("", text or "")[:limit]


def _bounded_schema(schema: Any) -> dict[str, Any] | None:
    """The schema as plain JSON if it is an object within the bound, else None."""
    if not isinstance(schema, dict):
        return None
    try:
        if len(canonical_json(schema)) > MAX_SCHEMA_BYTES:
            return None
    except (ValueError, TypeError, RecursionError):
        return None
    return schema


def describe_tools(tools: list[types.Tool]) -> tuple[ToolDescription, ...]:
    """The server's tools, sanitized, in its order; the left-out ones are logged by
    position only. Duplicate names keep the first."""
    kept: dict[str, ToolDescription] = {}
    for position, tool in enumerate(tools):
        if len(kept) >= MAX_TOOLS:
            logger.warning("upstream tools past %d left out", MAX_TOOLS)
            break
        dumped = tool.model_dump(by_alias=True, mode="json", exclude_none=True)
        name = dumped.get("name")
        input_schema = _bounded_schema(dumped.get("inputSchema"))
        output_schema = _bounded_schema(dumped.get("outputSchema"))
        annotations = _bounded_schema(dumped.get("annotations"))
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in kept:
            logger.warning(
                "upstream tool at position %d left out: its name is not usable", position
            )
            continue
        if input_schema is None or ("outputSchema" in dumped and output_schema is None):
            logger.warning("upstream tool %s left out: a schema is not a bounded object", name)
            continue
        title = dumped.get("title")
        kept[name] = ToolDescription(
            name=name,
            title=clean_text(title, MAX_TITLE_CHARS) if isinstance(title, str) else None,
            description=clean_text(dumped.get("description"), MAX_DESCRIPTION_CHARS),
            input_schema=input_schema,
            output_schema=output_schema,
            annotations=annotations,
        )
    return tuple(kept.values())
