"""The spec's plugin contract: `A2EPlugin` and `ToolkitPlugin`, implemented as written, and the
adapter that runs one toolkit of a third-party `ToolkitPlugin` inside the vault.

A plugin answers the messages of its namespace by dispatching on the message type, and may
push server-initiated events through a callback the host registers. Plugin authors import
`ToolkitPlugin` and the message models from here and from `toolkit_vault.protocol`.
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from toolkit_vault.errors import VaultError
from toolkit_vault.protocol import (
    Message,
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
    ToolkitDefinition,
    ToolkitListRequest,
    ToolkitListResponse,
)

__all__ = [
    "A2EPlugin",
    "CallContext",
    "PluginAnswerRefused",
    "PushCallback",
    "SpecToolkit",
    "Tool",
    "ToolResult",
    "ToolkitPlugin",
    "ToolkitReportedError",
    "is_spec_plugin",
    "listed_definitions",
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


@dataclass(frozen=True)
class CallContext:
    """What a tool is told of the call it answers: when it must end (`deadline`, on
    `time.monotonic`'s clock) and whether it was cancelled (a purge, a revocation, the
    caller gone). A tool that runs long should look at `cancelled` now and then: the vault
    answers a cancelled or late call at once, but cannot stop a thread that does not."""

    deadline: float
    cancelled: threading.Event = field(default_factory=threading.Event)


class A2EPlugin(ABC):
    """A capability handler: `handle` dispatches one parsed request to its method."""

    name: str = "a2e_plugin"
    capability: str = ""

    @abstractmethod
    def handle(self, msg: Message) -> Message:
        """Answer one request of this plugin's namespace."""


class ToolkitPlugin(A2EPlugin):
    """The toolkits capability (`toolkit/*`): list and configure, with push events."""

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
        raise TypeError(f"{type(msg).__name__} is not a toolkit message")


class PluginAnswerRefused(VaultError):
    """A plugin answered with something that is not the spec's message for the request."""


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


class SpecToolkit:
    """One toolkit of a spec `ToolkitPlugin`, in the single-toolkit shape the vault runs.

    Each instance builds its own plugin (one per session initialization, like any toolkit),
    so a plugin instance only ever holds one session's config for one toolkit. The config
    reaches the plugin in `initialize`, through `_configure_toolkit`, and nowhere else. The
    plugin's answer is mapped to the design's statuses; its `message` is never forwarded
    (it may quote the config): only the names of its own tools are read from it.
    """

    def __init__(self, plugin_factory: Callable[[], Any], definition: ToolkitDefinition) -> None:
        self.definition = definition
        self._plugin = plugin_factory()
        check = getattr(self._plugin, "verify", None)
        if callable(check):  # optional: the credential check before a version is stored
            self.verify = check

    def initialize(self, config: dict[str, Any]) -> list[str] | None:
        name = self.definition.name
        request = ToolkitConfigureRequest(toolkit_name=name, config=config)
        answer = _answer(ToolkitConfigureResponse, self._plugin._configure_toolkit(request))
        if answer.toolkit_name not in ("", name):
            raise PluginAnswerRefused("the plugin answered for another toolkit")
        if answer.status == "error":
            raise ToolkitReportedError
        if answer.status == "ok":
            return None
        named = [t for t in self.definition.tools if _names(answer.message or "", t)]
        return named or list(self.definition.tools)  # partial, unnamed: fail closed

    def set_push_callback(self, fn: PushCallback | None) -> None:
        bind = getattr(self._plugin, "set_push_callback", None)
        if callable(bind):
            bind(fn)

    def __repr__(self) -> str:
        return f"SpecToolkit({self.definition.name!r})"


def _names(message: str, tool: str) -> bool:
    """True when `tool` appears in `message` as a whole name (not inside a longer name)."""
    return re.search(rf"(?<![\w-]){re.escape(tool)}(?![\w-])", message) is not None
