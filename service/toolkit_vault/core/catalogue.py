"""The tool catalogue: every tool a principal may call, as `ToolInfo`s, kept while what it
is made of stays the same, so an MCP client listing hundreds of tools again and again
(`transports.mcp`) neither rebuilds them nor makes the garbage collector walk a fresh
pile of objects per list.

A catalogue is made of the registry's toolkits (the table `load_imported` swaps whole: a
toolkit imported, removed or changed is a new object), the principal's allowance as the
chain has it now, and the tools a session's live instances do not serve. Those three are
the key; a hit gives the very tuple the first build gave, so a caller may cache what it
derives from it on that tuple's identity. The key holds the toolkits themselves, never
their ids alone, so an id cannot be reused while its entry lives.

May import: `access`, `protocol`, `toolkits` (and what `listing` gives it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from toolkit_vault.access.allowances import ToolAllowance
from toolkit_vault.protocol import ToolInfo
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = ["ToolCatalogues"]

_ENTRIES = 64  # principals' allowances and sessions' unavailable tools: a few kinds each

Unavailable = tuple[tuple[str, frozenset[str]], ...]  # toolkit -> tools its instance lacks
_Key = tuple[tuple[int, ...], ToolAllowance | None, Unavailable]


class ToolCatalogues:
    """The catalogues built lately, by what they were built from (least recent dropped)."""

    def __init__(self, info: Callable[[RegisteredToolkit, str], ToolInfo]) -> None:
        self._info = info
        self._built: OrderedDict[_Key, tuple[Sequence[RegisteredToolkit], tuple[ToolInfo, ...]]]
        self._built = OrderedDict()
        self._lock = threading.Lock()

    def catalogue(
        self,
        toolkits: Sequence[RegisteredToolkit],
        allowance: ToolAllowance | None,
        unavailable: Unavailable,
    ) -> tuple[ToolInfo, ...]:
        """Every tool of `toolkits` that `allowance` permits and no instance lacks: the
        same tuple as before while all three are the same."""
        key = (tuple(map(id, toolkits)), allowance, unavailable)
        with self._lock:
            found = self._built.get(key)
            if found is not None:
                self._built.move_to_end(key)
                return found[1]
        lacking = dict(unavailable)
        tools = tuple(
            self._info(toolkit, tool)
            for toolkit in toolkits
            for tool in toolkit.definition.tools
            if (allowance is None or allowance.permits(toolkit.definition.name, tool))
            and tool not in lacking.get(toolkit.definition.name, ())
        )
        with self._lock:
            self._built[key] = (tuple(toolkits), tools)  # holds the toolkits: ids stay theirs
            while len(self._built) > _ENTRIES:
                self._built.popitem(last=False)
        return tools
