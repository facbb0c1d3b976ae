"""The spec's plugin contract: `A2EPlugin` and `ToolkitPlugin`, implemented as written, and the
adapter that runs one toolkit of a third-party `ToolkitPlugin` inside the vault.

A plugin answers the messages of its namespace by dispatching on the message type, and may
push server-initiated events through a callback the host registers. Plugin authors import
`ToolkitPlugin` and the message models from here and from `toolkit_vault.protocol`.

Tools (the `tool/call` extension, docs/plugins.md): a toolkit declares `Tool`s with input
schemas and answers calls on the instance `initialize` (or `_configure_toolkit`) set up.
Whatever a tool answers passes `as_tool_result` first, so the vault only ever handles a
result of MCP's shape made of plain JSON values.
"""

from __future__ import annotations

import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard, TypeVar

from pydantic import BaseModel, ValidationError

from toolkit_vault.errors import VaultError
from toolkit_vault.protocol import (
    Message,
    ToolCallRequest,
    ToolCallResponse,
    ToolInfo,
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
    ToolkitDefinition,
    ToolkitListRequest,
    ToolkitListResponse,
    ToolListRequest,
    ToolListResponse,
)

__all__ = [
    "A2EPlugin",
    "CallContext",
    "PluginAnswerRefused",
    "Progress",
    "PushCallback",
    "ResultRefused",
    "SpecToolkit",
    "Tool",
    "ToolResult",
    "ToolkitPlugin",
    "ToolkitReportedError",
    "answers_calls",
    "as_tool",
    "as_tool_result",
    "declared_tools",
    "is_spec_plugin",
    "listed_definitions",
    "plain_json",
]

PushCallback = Callable[[Message], None]
_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True)
class Tool:
    """A tool a toolkit declares: MCP's tool fields. `input_schema` is the JSON Schema a
    call's arguments are checked against before the tool sees them (the same checks and
    limits as a config schema); `output_schema` and `annotations` where the tool has them.

    A single toolkit declares its tools as a `tools` attribute (a sequence of `Tool`) and
    answers calls with `call_tool(name, arguments, context)`; a spec `ToolkitPlugin` with
    `_call_tool` (docs/plugins.md). A name the definition's `tools` lists with no `Tool`
    takes an object of any fields."""

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    output_schema: Mapping[str, Any] | None = None
    annotations: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ToolResult:
    """What a tool answers, MCP's `tools/call` result: content blocks (`{"type": "text",
    "text": ...}` and the rest of MCP's kinds), structured content, and whether the tool
    itself failed (`is_error`: the agent sees the failure; the vault refused nothing)."""

    content: Sequence[Mapping[str, Any]] = ()
    structured_content: Mapping[str, Any] | None = None
    is_error: bool = False

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolResult:
        return cls(content=({"type": "text", "text": text},), is_error=is_error)


Progress = Callable[[float, float | None, str | None], None]  # progress, total, message


@dataclass(frozen=True)
class CallContext:
    """What a tool is told of the call it answers: when it must end (`deadline`, on
    `time.monotonic`'s clock) and whether it was cancelled (a purge, a revocation, the
    caller gone). A tool that runs long should look at `cancelled` now and then: the vault
    answers a cancelled or late call at once, but cannot stop a thread that does not.
    `progress`, when someone listens (an MCP client that asked for progress), takes how far
    the call got (MCP's progress, total and message), from any thread; None otherwise."""

    deadline: float
    cancelled: threading.Event = field(default_factory=threading.Event)
    progress: Progress | None = None


MAX_RESULT_DEPTH = 64  # nesting of a result's JSON; the engine bounds its size
# MCP's content block kinds, and the fields each must carry
_CONTENT_FIELDS: dict[str, dict[str, type]] = {
    "text": {"text": str},
    "image": {"data": str, "mimeType": str},
    "audio": {"data": str, "mimeType": str},
    "resource_link": {"uri": str, "name": str},
    "resource": {"resource": Mapping},
}


class PluginAnswerRefused(VaultError):
    """A plugin answered with something that is not the spec's message for the request."""


class ResultRefused(PluginAnswerRefused):
    """A tool answered with something that is not a result; the message holds no value."""


def as_tool_result(value: object) -> ToolResult:
    """What a tool answered, as a `ToolResult` of plain JSON values: a `ToolResult`, a
    `ToolCallResponse` (ours, or another library's model re-validated through ours), a
    string (one text block), or a mapping with `content` and/or structured content (and no
    other message `type`), in our snake_case or MCP's camelCase
    (`structuredContent`, `isError`). Anything else, a content block MCP does not define, a
    value JSON cannot carry, or nesting deeper than `MAX_RESULT_DEPTH` is `ResultRefused`
    (naming the field, never a value). The copy is the plugin's no longer: what the engine
    checks for secrets is what it sends."""
    fields: Mapping[str, Any]
    # a plain dict (an imported server's result, most plugins') is told at once: the
    # checks by `isinstance` below go through the ABCs' machinery, a call's hot path
    mapping = type(value) is dict or isinstance(value, Mapping)
    if type(value) is dict:
        if value.get("type", "tool/call/resp") != "tool/call/resp":
            raise ResultRefused("the tool did not answer with a result")
        fields = value
    elif isinstance(value, str):
        return ToolResult.text(value)
    elif isinstance(value, ToolResult):
        fields = {
            "content": value.content,
            "structured_content": value.structured_content,
            "is_error": value.is_error,
        }
    elif isinstance(value, BaseModel):
        try:
            fields = _answer(ToolCallResponse, value).model_dump()
        except PluginAnswerRefused:
            raise ResultRefused("the tool did not answer with a tool/call/resp message") from None
    elif isinstance(value, Mapping) and value.get("type", "tool/call/resp") == "tool/call/resp":
        fields = value
    else:
        raise ResultRefused("the tool did not answer with a result")
    content = _one_of(fields, "content", "content", ())
    structured = _one_of(fields, "structured_content", "structuredContent", None)
    is_error = _one_of(fields, "is_error", "isError", False)
    if mapping and "content" not in fields and structured is None:
        raise ResultRefused("the tool's result holds neither content nor structured content")
    if not isinstance(content, (list, tuple)):
        raise ResultRefused("the tool's result: content is not a list of content blocks")
    if (
        structured is not None
        and type(structured) is not dict
        and not isinstance(structured, Mapping)
    ):
        raise ResultRefused("the tool's result: structured content is not an object")
    if not isinstance(is_error, bool):
        raise ResultRefused("the tool's result: is_error is not true or false")
    blocks = tuple(_content_block(block, n) for n, block in enumerate(content))
    plain = None if structured is None else plain_json(structured, "/structured_content")
    return ToolResult(content=blocks, structured_content=plain, is_error=is_error)


def _one_of(fields: Mapping[str, Any], ours: str, mcp: str, default: Any) -> Any:
    if ours != mcp and ours in fields and mcp in fields:
        raise ResultRefused(f"the tool's result has both {ours} and {mcp}")
    return fields.get(ours, fields.get(mcp, default))


def _content_block(block: object, n: int) -> dict[str, Any]:
    where = f"/content/{n}"
    if type(block) is not dict and not isinstance(block, Mapping):
        raise ResultRefused(f"the tool's result: {where} is not a content block")
    kind = block.get("type")
    required = _CONTENT_FIELDS.get(kind) if isinstance(kind, str) else None
    if required is None:
        raise ResultRefused(f"the tool's result: {where} is not a content type MCP defines")
    for name, kind_of in required.items():
        if not isinstance(block.get(name), kind_of):
            raise ResultRefused(f"the tool's result: {where}/{name} is missing or mistyped")
    plain: dict[str, Any] = plain_json(block, where)
    return plain


def plain_json(value: Any, where: str = "", depth: int = 0) -> Any:
    """`value` copied as plain JSON (dict, list, str, int, finite float, bool, None), or
    `ResultRefused` saying where it is not (list indices; a key stands as `*`, for a key is
    the tool's own text and could be a value)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if depth < MAX_RESULT_DEPTH:  # a plain dict or list, told by its type: the hot path
        if kind is dict and all(type(key) is str for key in value):
            inner = f"{where}/*"
            return {key: plain_json(item, inner, depth + 1) for key, item in value.items()}
        if kind is list:
            return [plain_json(v, f"{where}/{i}", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise ResultRefused(f"the tool's result: {where or '/'} is not a finite number")
    if depth >= MAX_RESULT_DEPTH:
        raise ResultRefused(f"the tool's result nests deeper than {MAX_RESULT_DEPTH} levels")
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise ResultRefused(f"the tool's result: {where or '/'} has a key that is not text")
        return {k: plain_json(v, f"{where}/*", depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v, f"{where}/{i}", depth + 1) for i, v in enumerate(value)]
    raise ResultRefused(f"the tool's result: {where or '/'} is not a JSON value")


class A2EPlugin(ABC):
    """A capability handler: `handle` dispatches one parsed request to its method."""

    name: str = "a2e_plugin"
    capability: str = ""

    @abstractmethod
    def handle(self, msg: Message) -> Message:
        """Answer one request of this plugin's namespace."""


class ToolkitPlugin(A2EPlugin):
    """The toolkits capability (`toolkit/*`): list and configure, with push events.

    Optional (the `tool/call` extension): `_list_tools(msg: ToolListRequest) ->
    ToolListResponse` declares tools with input schemas (each entry's `toolkit` names its
    toolkit), and `_call_tool(msg: ToolCallRequest) -> ToolCallResponse` answers a call on
    the instance `_configure_toolkit` configured. A plugin without them keeps the spec's
    shape: its tools take any object and answer no call.
    """

    name = "toolkit_plugin"
    capability = "toolkits"

    def __init__(self) -> None:
        self._push: PushCallback | None = None

    @abstractmethod
    def _list_toolkits(self, msg: ToolkitListRequest) -> ToolkitListResponse:
        """Must return toolkit list. Override in subclass."""

    @abstractmethod
    def _configure_toolkit(self, msg: ToolkitConfigureRequest) -> ToolkitConfigureResponse:
        """Configure a specific toolkit. Override in subclass."""

    def set_push_callback(self, fn: PushCallback | None) -> None:
        """Register push callback for toolkit-initiated events."""
        self._push = fn

    def emit_event(self, event: Message) -> None:
        """Emit a push event to the agent (dropped when no callback is registered)."""
        if self._push is not None:
            self._push(event)

    def handle(self, msg: Message) -> Message:
        if isinstance(msg, ToolkitListRequest):
            return self._list_toolkits(msg)
        if isinstance(msg, ToolkitConfigureRequest):
            return self._configure_toolkit(msg)
        optional = {ToolListRequest: "_list_tools", ToolCallRequest: "_call_tool"}
        method = getattr(self, optional.get(type(msg), ""), None)
        if callable(method):
            answer: Message = method(msg)
            return answer
        raise TypeError(f"{type(msg).__name__} is not a toolkit message")


class ToolkitReportedError(Exception):
    """A spec plugin answered a configure with `status: "error"` (its message is not kept)."""


def is_spec_plugin(value: object) -> bool:
    """The spec's shape: a `ToolkitPlugin`, or any object with both of its abstract methods
    (a plugin written against another library's `ToolkitPlugin` base)."""
    return isinstance(value, ToolkitPlugin) or (
        callable(getattr(value, "_list_toolkits", None))
        and callable(getattr(value, "_configure_toolkit", None))
    )


def _answer(model: type[_M], value: object) -> _M:
    """`value` as our model: ours as is, another library's pydantic model or a mapping
    re-validated (strict) through ours, anything else refused."""
    if isinstance(value, model):
        return value
    try:
        if isinstance(value, BaseModel):
            return model.model_validate(value.model_dump(by_alias=True))
        if isinstance(value, Mapping):
            return model.model_validate(dict(value))
    except (ValidationError, ValueError, TypeError):
        pass
    expected = model.model_fields["type"].default
    raise PluginAnswerRefused(f"the plugin did not answer with a {expected} message")


def listed_definitions(plugin: Any) -> list[ToolkitDefinition]:
    """The definitions a spec plugin lists (`_list_toolkits`, no filter, no config)."""
    return _answer(ToolkitListResponse, plugin._list_toolkits(ToolkitListRequest())).toolkits


def as_tool(value: object) -> Tool:
    """A declared tool as a `Tool`: ours, the wire's `ToolInfo`, a mapping in MCP's shape
    (`inputSchema`) or ours (`input_schema`), or a bare name (a toolkit whose `tools`
    attribute lists names declares nothing more). Its schemas are checked at registration."""
    if isinstance(value, Tool):
        tool = value
    elif isinstance(value, str):  # a name alone, as the definition's `tools` lists them
        tool = Tool(value)
    elif isinstance(value, (ToolInfo, Mapping)):
        fields = value.model_dump() if isinstance(value, ToolInfo) else value
        tool = Tool(
            name=fields.get("name"),  # type: ignore[arg-type]  # checked just below
            description=fields.get("description") or "",
            input_schema=_either(fields, "input_schema", "inputSchema", {"type": "object"}),
            output_schema=_either(fields, "output_schema", "outputSchema", None),
            annotations=fields.get("annotations"),
        )
    else:
        raise PluginAnswerRefused("a declared tool is not a Tool or a mapping of its fields")
    if not (isinstance(tool.name, str) and tool.name):
        raise PluginAnswerRefused("a declared tool has no name")
    if not isinstance(tool.description, str):
        raise PluginAnswerRefused(f"tool {tool.name[:80]!r}: description is not text")
    for label, schema in (
        ("input_schema", tool.input_schema),
        ("output_schema", tool.output_schema),
    ):
        if schema is not None and not isinstance(schema, Mapping):
            raise PluginAnswerRefused(f"tool {tool.name[:80]!r}: {label} is not an object")
    if tool.annotations is not None and not isinstance(tool.annotations, Mapping):
        raise PluginAnswerRefused(f"tool {tool.name[:80]!r}: annotations is not an object")
    return tool


def _either(fields: Mapping[str, Any], ours: str, mcp: str, default: Any) -> Any:
    if ours in fields and mcp in fields:
        raise PluginAnswerRefused(f"a declared tool has both {ours} and {mcp}")
    return fields.get(ours, fields.get(mcp, default))


def declared_tools(plugin: Any) -> dict[str, list[Tool]]:
    """The tools a spec plugin declares (`_list_tools`), by toolkit name; none without it."""
    list_tools = getattr(plugin, "_list_tools", None)
    if not callable(list_tools):
        return {}
    declared: dict[str, list[Tool]] = {}
    for info in _answer(ToolListResponse, list_tools(ToolListRequest())).tools:
        declared.setdefault(info.toolkit, []).append(as_tool(info))
    return declared


class AnswersCalls(Protocol):
    """A toolkit instance that answers calls of its tools."""

    def call_tool(self, name: str, arguments: dict[str, Any], context: CallContext) -> object: ...


def answers_calls(toolkit: object) -> TypeGuard[AnswersCalls]:
    """Whether a toolkit instance answers `call_tool` (an imported toolkit, or a spec plugin
    without `_call_tool`, lists its tools but answers no call)."""
    return callable(getattr(toolkit, "call_tool", None))


class SpecToolkit:
    """One toolkit of a spec `ToolkitPlugin`, in the single-toolkit shape the vault runs.

    Each instance builds its own plugin (one per session initialization, like any toolkit),
    so a plugin instance only ever holds one session's config for one toolkit. The config
    reaches the plugin in `initialize`, through `_configure_toolkit`, and nowhere else. The
    plugin's answer is mapped to the design's statuses; its `message` is never forwarded
    (it may quote the config): only the names of its own tools are read from it.

    `tools` are the ones the registry checked (one per listed name), passed in so a
    session's initialization asks nothing; built outside the registry, what the plugin
    declares for this toolkit (`_list_tools`). With `_call_tool`, `call_tool` answers a
    call on this instance's plugin, once configured; the plugin's answer must be for this
    toolkit and tool, and is re-validated and copied by `as_tool_result`.
    """

    def __init__(
        self,
        plugin_factory: Callable[[], Any],
        definition: ToolkitDefinition,
        tools: Sequence[Tool] | None = None,
    ) -> None:
        self.definition = definition
        self._plugin = plugin_factory()
        self._configured = False
        if tools is None:
            tools = declared_tools(self._plugin).get(definition.name, [])
        self.tools: tuple[Tool, ...] = tuple(tools)
        check = getattr(self._plugin, "verify", None)
        if callable(check):  # optional: the credential check before a version is stored
            self.verify = check
        if callable(getattr(self._plugin, "_call_tool", None)):  # optional: answers calls
            self.call_tool = self._call

    def initialize(self, config: dict[str, Any]) -> list[str] | None:
        name = self.definition.name
        request = ToolkitConfigureRequest(toolkit_name=name, config=config)
        answer = _answer(ToolkitConfigureResponse, self._plugin._configure_toolkit(request))
        if answer.toolkit_name not in ("", name):
            raise PluginAnswerRefused("the plugin answered for another toolkit")
        if answer.status == "error":
            raise ToolkitReportedError
        self._configured = True
        if answer.status == "ok":
            return None
        named = [t for t in self.definition.tools if _names(answer.message or "", t)]
        return named or list(self.definition.tools)  # partial, unnamed: fail closed

    def _call(self, name: str, arguments: Mapping[str, Any], context: CallContext) -> ToolResult:
        """Ask the plugin (`_call_tool`); the spec's request has no room for `context`, so the
        vault's deadline and cancellation bound the call from outside."""
        del context
        if not self._configured:
            raise VaultError("the toolkit is not configured")
        toolkit = self.definition.name
        request = ToolCallRequest(toolkit_name=toolkit, tool_name=name, arguments=dict(arguments))
        answer = self._plugin._call_tool(request)
        if isinstance(answer, ToolCallResponse):
            named = (answer.toolkit_name, answer.tool_name)
        elif isinstance(answer, BaseModel):
            named = (getattr(answer, "toolkit_name", ""), getattr(answer, "tool_name", ""))
        elif isinstance(answer, Mapping):
            named = (answer.get("toolkit_name", ""), answer.get("tool_name", ""))
        else:
            raise PluginAnswerRefused("the plugin did not answer with a tool/call/resp message")
        if named[0] not in ("", toolkit) or named[1] not in ("", name):
            raise PluginAnswerRefused("the plugin answered for another toolkit or tool")
        return as_tool_result(answer)

    def set_push_callback(self, fn: PushCallback | None) -> None:
        bind = getattr(self._plugin, "set_push_callback", None)
        if callable(bind):
            bind(fn)

    def __repr__(self) -> str:
        return f"SpecToolkit({self.definition.name!r})"


def _names(message: str, tool: str) -> bool:
    """True when `tool` appears in `message` as a whole name (not inside a longer name)."""
    return re.search(rf"(?<![\w-]){re.escape(tool)}(?![\w-])", message) is not None
