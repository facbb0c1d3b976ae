"""The tools an imported server's instance serves, local (`served`) or remote
(`remote_served`) alike: its `tools/list` taken whole (`take_listed`: every schema compiled,
the list shown to its pin), and that list less what the pin withholds (`PinnedTools`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit_vault.errors import SchemaRefused
from toolkit_vault.mcp_client import ToolDescription, pin_tools
from toolkit_vault.plugin import Tool
from toolkit_vault.schema import CompiledSchema, compile_schema
from toolkit_vault.toolkits.tool_pins import ToolPins

__all__ = ["Listed", "PinnedTools", "take_listed"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listed:
    """One `tools/list` of the server, taken whole: its tools, each one's pin digest and
    compiled input schema (swapped as one, so a reader never pairs one list's tools with
    another's digests), and the list they were made of."""

    tools: Mapping[str, Tool]
    digests: Mapping[str, str]
    schemas: Mapping[str, CompiledSchema]
    source: tuple[ToolDescription, ...] | None = None


def take_listed(
    label: str, described: tuple[ToolDescription, ...], pins: ToolPins | None
) -> Listed:
    """A server's `tools/list` as the tools it serves: a tool whose input schema, or output
    schema, does not compile is left out (logged), as no call of it could be checked; the
    list is shown to its pin first (`ToolPins.see`: pinned at first sight, a change
    audited). Local and remote servers both take their lists so."""
    schemas: dict[str, CompiledSchema] = {}
    kept: list[ToolDescription] = []
    for tool in described:
        try:
            if tool.output_schema is not None:
                compile_schema(tool.output_schema)  # its results are held to it (`output_check`)
            schemas[tool.name] = compile_schema(tool.input_schema)
        except SchemaRefused as exc:
            log.warning("a tool of %s is left out: %s", label, exc.message)
            continue
        kept.append(tool)
    digests = pin_tools(kept)
    if pins is not None:
        pins.see(digests)
    served = {t.name: Tool(t.name, t.description, t.input_schema) for t in kept}
    return Listed(served, digests, schemas, described)


class PinnedTools:
    """What a local and a remote server's instance serve alike: the server's own tools (its
    last `tools/list`, following its list changes), but those its pin withholds
    (`tool_pins`: changed or added since, not accepted). `_current` is each one's last list."""

    _pins: ToolPins | None  # None: nothing pins its tools (a listing without the store)

    def _current(self) -> Listed:
        raise NotImplementedError

    def served_tools(self) -> Mapping[str, Tool]:
        listed = self._current()
        withheld = self._withheld(listed)
        if not withheld:
            return listed.tools
        return {name: tool for name, tool in listed.tools.items() if name not in withheld}

    def withheld_tools(self) -> frozenset[str]:
        """The tools the server lists that its pin withholds until an operator accepts them."""
        return self._withheld(self._current())

    def _withheld(self, listed: Listed) -> frozenset[str]:
        return frozenset() if self._pins is None else self._pins.withheld(listed.digests)
