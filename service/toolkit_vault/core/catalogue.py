"""The tool catalogue: every tool a principal may call, as `ToolInfo`s, kept while what it
is made of stays the same, so an MCP client listing hundreds of tools again and again
(`transports.mcp`) neither rebuilds them nor makes the garbage collector walk a fresh
pile of objects per list.

A catalogue is made of the registry's toolkits (the table `load_imported` swaps whole: a
toolkit imported, removed or changed is a new object), the principal's allowance as the
chain has it now, the tools a session's live instances do not serve, and the tools an
imported server serves itself (its own `tools/list`, in place of a definition's names).
Those are the key; a hit gives the very tuple the first build gave, so a caller may cache
what it derives from it on that tuple's identity. An entry holds the toolkits and served
tools themselves, never their ids alone, so an id cannot be reused while its entry lives.

May import: `access`, `protocol`, `toolkits` (and what `listing` gives it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from toolkit_vault.access.allowances import ToolAllowance
from toolkit_vault.plugin import Tool
from toolkit_vault.protocol import ToolInfo
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = ["ToolCatalogues"]

_ENTRIES = 64  # principals' allowances and sessions' unavailable tools: a few kinds each

Unavailable = tuple[tuple[str, frozenset[str]], ...]  # toolkit -> tools its instance lacks
Served = tuple[tuple[str, tuple[Tool, ...]], ...]  # toolkit -> the tools its server serves
_Key = tuple[
    tuple[int, ...], ToolAllowance | None, Unavailable, tuple[tuple[str, tuple[int, ...]], ...]
]


class ToolCatalogues:
    """The catalogues built lately, by what they were built from (least recent dropped)."""

    def __init__(
        self, info: Callable[[RegisteredToolkit, str, Mapping[str, Tool] | None], ToolInfo]
    ) -> None:
        self._info = info
        self._built: OrderedDict[_Key, tuple[object, tuple[ToolInfo, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def catalogue(
        self,
        toolkits: Sequence[RegisteredToolkit],
        allowance: ToolAllowance | None,
        unavailable: Unavailable,
        served: Served = (),
    ) -> tuple[ToolInfo, ...]:
        """Every tool of `toolkits` (a server's own where it serves them) that `allowance`
        permits and no instance lacks: the same tuple as before while all are the same."""
        by_server = tuple((name, tuple(map(id, tools))) for name, tools in served)
        key = (tuple(map(id, toolkits)), allowance, unavailable, by_server)
        with self._lock:
            found = self._built.get(key)
            if found is not None:
                self._built.move_to_end(key)
                return found[1]
        lacking = dict(unavailable)
        serving = {name: {tool.name: tool for tool in tools} for name, tools in served}
        tools = tuple(
            self._info(toolkit, tool, serving.get(toolkit.definition.name))
            for toolkit in toolkits
            for tool in serving.get(toolkit.definition.name, toolkit.definition.tools)
            if (allowance is None or allowance.permits(toolkit.definition.name, tool))
            and tool not in lacking.get(toolkit.definition.name, ())
        )
        with self._lock:
            self._built[key] = ((tuple(toolkits), served), tools)  # ids stay theirs
            while len(self._built) > _ENTRIES:
                self._built.popitem(last=False)
        return tools
