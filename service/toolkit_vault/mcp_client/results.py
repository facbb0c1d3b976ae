"""A `tools/call` answer as the vault takes it: the SDK's checked wire result, as plain
JSON, with the two checks of `ClientSession.call_tool` that the vault keeps.

The session sends the call with `ClientSession.send_request`, which validates the result
against the negotiated revision's schema (`mcp_types.methods.validate_server_result`: every
content block, `isError`, `structuredContent`, `resultType`), and asks it back as the JSON
it checked (`RawResult`) rather than parsed again into `CallToolResult` and dumped once more
to JSON. What `call_tool` adds on top is done here, the same way:

- a result that asks for input (2026-07-28's `InputRequiredResult`) fails the call: the
  vault has no person to ask in the middle of a call;
- a result that is not an error, of a tool that declares an output schema, must carry
  structured content that schema accepts (MCP: clients SHOULD validate it). The schema is
  the one of the session's last `tools/list`, the list the vault serves and pins, compiled
  at its first use by the check the host was given (`OutputCheck`): the vault's own
  schema compiler, bounded and with a linear-time regex engine, since the schema is the
  server's text and runs on the loop thread every upstream session shares (the SDK's
  `jsonschema` with Python's `re` let a `pattern` take minutes on a short string).

The rest of a result's checks are the tool engine's (`plugin.as_tool_result`: content blocks
of the types MCP defines, a boolean `isError`, structured content an object; the result's
size and the scope's secrets), on what is sent, so they are not repeated here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import RootModel

from .descriptions import ToolDescription
from .errors import UpstreamFailed

__all__ = ["OutputCheck", "OutputSchemas", "RawResult", "tool_result"]

OutputCheck = Callable[[dict[str, Any]], Callable[[Any], bool]]
"""A tool's output schema -> whether a structured result fits it (raises for a schema it
refuses). The vault's is `schema.output_check`, given by the layer above."""


class RawResult(RootModel[dict[str, Any]]):
    """`send_request`'s result type for a call: the result object as checked, unparsed."""


class OutputSchemas:
    """The output schemas of one list of tools, each compiled at its first use."""

    def __init__(self, tools: Iterable[ToolDescription], compile: OutputCheck) -> None:
        self._schemas = {t.name: t.output_schema for t in tools if t.output_schema is not None}
        self._compile = compile
        self._fits: dict[str, Callable[[Any], bool]] = {}

    def check(self, label: str, name: str, structured: Any, present: bool) -> None:
        """Raise `UpstreamFailed` unless `structured` fits `name`'s output schema (none: it
        fits). `present`: whether the result carried `structuredContent` at all."""
        schema = self._schemas.get(name)
        if schema is None:
            return
        if not present:
            raise UpstreamFailed(f"{label}: the tool's result lacks its structured content")
        try:
            valid = self._fit(name, schema)(structured)
        except Exception:  # an invalid schema, a `$ref` that does not resolve: the server's
            raise UpstreamFailed(f"{label}: the tool's output schema cannot be used") from None
        if not valid:
            raise UpstreamFailed(f"{label}: the tool's structured content fails its schema")

    def _fit(self, name: str, schema: dict[str, Any]) -> Callable[[Any], bool]:
        fit = self._fits.get(name)
        if fit is None:
            fit = self._fits[name] = self._compile(schema)
        return fit


def tool_result(
    label: str, name: str, raw: dict[str, Any], outputs: OutputSchemas
) -> dict[str, Any]:
    """The call's result as plain JSON (`content`, `structuredContent`, `isError`, as the
    server sent them), or `UpstreamFailed`."""
    if raw.get("resultType") == "input_required":
        raise UpstreamFailed(f"{label}: the tool asked for input")
    if raw.get("isError") is not True:
        outputs.check(label, name, raw.get("structuredContent"), "structuredContent" in raw)
    raw.setdefault("isError", False)
    return raw
