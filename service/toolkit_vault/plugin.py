"""The spec's plugin contract: `A2EPlugin` and `ToolkitPlugin`, implemented as written.

A plugin answers the messages of its namespace by dispatching on the message type, and may
push server-initiated events through a callback the transport registers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from .protocol import (
    Message,
    ToolkitConfigureRequest,
    ToolkitConfigureResponse,
    ToolkitListRequest,
    ToolkitListResponse,
)

__all__ = ["A2EPlugin", "PushCallback", "ToolkitPlugin"]

PushCallback = Callable[[Message], None]


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
