"""`tools/list` built once, served many times. An MCP client lists often (at start, after
each `list_changed`, some before every turn), and a vault lists hundreds of tools: made
afresh each time, the list was 200 `types.Tool` models built by us, dumped, validated
against the negotiated revision's schema and dumped again by the SDK per request, and the
pile of objects they left woke the garbage collector for pauses many times the list's own
cost.

So a list is kept (`McpLists`) on what it is made from: the catalogue tuple
`Vault.tool_catalogue` gives (the same object while the registry, the principal's
allowance and the session's unavailable tools stay the same; any change there is a new
tuple, so a new list) and, past the tool limit, which toolkits it shows. Its names
(`ToolNames`) are kept with it, for the calls that resolve them. Its wire form is made once
per protocol revision, by the SDK's own serializer for that revision
(`mcp_types.methods.serialize_server_result`), so each revision still gets exactly the
fields it defines.

The SDK validates and serializes whatever a handler returns; to hand it the wire form
made once, the handler returns an empty list and leaves the kept tools in a holder that
`PrebuiltLists`, a server middleware (the SDK's documented place to own a result), puts
into the result the SDK made. Everything else of the request (the handshake gate, params
validation, the 2026-07-28 envelope) stays the SDK's. The kept lists are shared between
requests and never changed after they are made.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from mcp import types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp_types.methods import serialize_server_result

from toolkit_vault.protocol import ToolInfo
from toolkit_vault.transports.mcp.names import ToolNames

__all__ = ["McpList", "McpLists", "PrebuiltLists", "hand_over"]

_KEPT = 64  # lists kept: a few per principal's allowance and per set of toolkits shown
_METHOD = "tools/list"
WireTools = list[dict[str, Any]]
# Where a `tools/list` handler leaves the wire tools for `PrebuiltLists` (one per request).
_HOLDER: ContextVar[list[WireTools] | None] = ContextVar("toolkit_vault_mcp_list", default=None)


@dataclass
class McpList:
    """One list as MCP shows it: the tools, their names, and its wire form per revision."""

    catalogue: tuple[ToolInfo, ...]  # what it was made from (kept while it is the same)
    tools: Sequence[ToolInfo]  # those listed (past the limit: of the toolkits shown)
    names: ToolNames
    limited: bool  # past the limit: the discovery tools are listed too
    extra: Sequence[types.Tool] = ()  # the discovery tools, when limited
    _wire: dict[str, WireTools] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def models(self) -> list[types.Tool]:
        """The list as the SDK's models (made each time: for a caller that needs them)."""
        return [_mcp_tool(self.names.name(t.toolkit, t.name), t) for t in self.tools] + list(
            self.extra
        )

    def wire(self, version: str) -> WireTools:
        """The tools as revision `version` has them on the wire: made once per revision."""
        with self._lock:
            found = self._wire.get(version)
        if found is None:
            dumped = types.ListToolsResult(tools=self.models()).model_dump(
                by_alias=True, mode="json", exclude_none=True
            )
            found = serialize_server_result(_METHOD, version, dumped)["tools"]
            with self._lock:
                found = self._wire.setdefault(version, found)
        return found


class McpLists:
    """The lists made lately, by catalogue and toolkits shown (the least recent dropped)."""

    def __init__(self, tool_limit: int, discovery: Sequence[types.Tool]) -> None:
        self.tool_limit = tool_limit
        self._discovery = tuple(discovery)
        self._kept: OrderedDict[tuple[int, frozenset[str] | None], McpList] = OrderedDict()
        self._lock = threading.Lock()

    def listing(
        self, catalogue: tuple[ToolInfo, ...], configured: set[str], shown: set[str]
    ) -> McpList:
        """The list of `catalogue`: all of it, or past the limit the tools of the
        configured toolkits and those `shown`, plus the discovery tools."""
        limited = len(catalogue) > self.tool_limit
        showing = frozenset(configured | shown) if limited else None
        key = (id(catalogue), showing)
        with self._lock:
            found = self._kept.get(key)
            if found is not None and found.catalogue is catalogue:
                self._kept.move_to_end(key)
                return found
        tools = [t for t in catalogue if t.toolkit in showing] if showing is not None else catalogue
        extra = self._discovery if limited else ()
        names = ToolNames(((t.toolkit, t.name) for t in tools), (x.name for x in extra))
        made = McpList(catalogue, tools, names, limited, extra)
        with self._lock:
            self._kept[key] = made  # holds the catalogue: its id stays its own
            while len(self._kept) > _KEPT:
                self._kept.popitem(last=False)
        return made


def hand_over(listed: McpList, version: str) -> types.ListToolsResult:
    """What a `tools/list` handler returns: when `PrebuiltLists` waits for the wire form,
    it gets it and the SDK an empty list to check; else (no middleware) the models."""
    holder = _HOLDER.get()
    if holder is None:
        return types.ListToolsResult(tools=listed.models())
    holder.append(listed.wire(version))
    return types.ListToolsResult(tools=[])


class PrebuiltLists:
    """Server middleware: a `tools/list` result gets the tools its handler handed over,
    in their wire form, in place of the empty list the SDK checked."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != _METHOD or ctx.request_id is None:
            return await call_next(ctx)
        holder: list[WireTools] = []
        token = _HOLDER.set(holder)
        try:
            result = await call_next(ctx)
        finally:
            _HOLDER.reset(token)
        if holder and isinstance(result, dict):
            return {**result, "tools": holder[0]}
        return result


def _mcp_tool(name: str, tool: ToolInfo) -> types.Tool:
    return types.Tool(
        name=name,
        title=f"{tool.toolkit}: {tool.name}",
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        annotations=_annotations(tool.annotations),
    )


def _annotations(annotations: dict[str, Any] | None) -> types.ToolAnnotations | None:
    return None if annotations is None else types.ToolAnnotations.model_validate(annotations)
