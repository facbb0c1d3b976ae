"""Third-party toolkit plugins in a distribution of their own (`tkv-spec-plugins`).

`SuitePlugin` is written to the spec's `ToolkitPlugin` shape and serves two toolkits;
`PushingToolkit` is the single-toolkit shape (`definition` + `initialize`) with
`set_push_callback`. They import only what a plugin author imports: `toolkit_vault.plugin`
and the message models of `toolkit_vault.protocol`. Only tests that put this directory on
the path discover them (the dist-info beside this file), through `importlib.metadata` entry
points like any third party's. Class-level lists record in memory what instances were given.

A `spec-mail` toolkit whose config names a `watch` directory polls it for `*.json` files,
each an event to emit (`{"message": ..., "leak": true?, "toolkit_name"?, "session_id"?}`):
`{endpoint}` in the message becomes the configured endpoint, and `leak` appends the
configured `api_key`, as a careless toolkit would.

Tools (the `tool/call` extension): `_list_tools` declares `spec-mail`'s `search` with an
input schema (its other tools take any object), and `_call_tool` answers on the configured
instance, naming the configured endpoint.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from toolkit_vault.plugin import ToolkitPlugin
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
    ToolkitStatusEvent,
    ToolListRequest,
    ToolListResponse,
)

MODES = ["ok", "partial", "partial-unnamed", "error", "raise", "other-name", "not-a-response"]
MAIL = ToolkitDefinition(
    name="spec-mail",
    alias="mail",
    description="Mail, from a spec-shaped plugin",
    category="messaging",
    tags=["spec", "mail"],
    schema={
        "type": "object",
        "properties": {
            "endpoint": {"type": "string"},
            "api_key": {"type": "string", "writeOnly": True},
            "mode": {"enum": MODES},
            "watch": {"type": "string"},
        },
        "required": ["endpoint", "api_key"],
        "additionalProperties": False,
    },
    tools=["send", "read", "search"],
)
CALENDAR = ToolkitDefinition(
    name="spec-calendar",
    category="time",
    tags=["spec"],
    schema={
        "type": "object",
        "properties": {
            "calendar": {"type": "string"},
            "token": {"type": "string", "x-secret": True},
        },
        "required": ["calendar", "token"],
    },
    tools=["list_events", "create_event"],
)

SEARCH = ToolInfo(
    name="search",
    toolkit="spec-mail",
    description="Search the mailbox",
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1}},
        "required": ["query"],
        "additionalProperties": False,
    },
    annotations={"readOnlyHint": True},
)


class SuitePlugin(ToolkitPlugin):
    name = "spec_suite"
    received: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    seen_messages: ClassVar[list[str]] = []  # the type of every message any method was given
    instances: ClassVar[list[SuitePlugin]] = []

    def __init__(self) -> None:
        super().__init__()
        self.config: dict[str, Any] | None = None
        SuitePlugin.instances.append(self)

    def _list_toolkits(self, msg: ToolkitListRequest) -> ToolkitListResponse:
        SuitePlugin.seen_messages.append(msg.type)
        return ToolkitListResponse(req_id=msg.id, toolkits=[MAIL, CALENDAR])

    def _configure_toolkit(self, msg: ToolkitConfigureRequest) -> Any:
        SuitePlugin.seen_messages.append(msg.type)
        SuitePlugin.received.append((msg.toolkit_name, copy.deepcopy(msg.config)))
        self.config = copy.deepcopy(msg.config)
        secret = str(msg.config.get("api_key") or msg.config.get("token"))
        mode = msg.config.get("mode", "ok")
        if mode == "raise":
            raise RuntimeError(f"cannot log in with {secret}")
        if mode == "not-a-response":
            return ToolkitListResponse(req_id=msg.id)
        status, message = {
            "ok": ("ok", f"configured for {msg.config.get('endpoint', '')}"),
            "partial": ("partial", "send is unavailable (research scope missing)"),
            "partial-unnamed": ("partial", "some features are off"),
            "error": ("error", f"the service refused {secret}"),
            "other-name": ("ok", "fine"),
        }[mode]
        name = "spec-calendar" if mode == "other-name" else msg.toolkit_name
        if msg.config.get("watch"):
            watch = Path(msg.config["watch"])
            threading.Thread(target=self._watch, args=(watch,), daemon=True).start()
        return ToolkitConfigureResponse(
            req_id=msg.id, toolkit_name=name, status=status, message=message
        )

    def _list_tools(self, msg: ToolListRequest) -> ToolListResponse:
        return ToolListResponse(req_id=msg.id, tools=[SEARCH])

    def _call_tool(self, msg: ToolCallRequest) -> ToolCallResponse:
        endpoint = (self.config or {}).get("endpoint", "")
        text = f"{msg.tool_name}: nothing found at {endpoint}"
        return ToolCallResponse(
            req_id=msg.id,
            toolkit_name=msg.toolkit_name,
            tool_name=msg.tool_name,
            content=[{"type": "text", "text": text}],
        )

    def _watch(self, directory: Path) -> None:
        seen: set[str] = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and directory.is_dir():
            if self._push is not None:  # the host has bound its callback
                for path in sorted(directory.glob("*.json")):
                    if path.name not in seen:
                        seen.add(path.name)
                        self.emit_event(self._event(json.loads(path.read_text())))
            time.sleep(0.05)

    def _event(self, spec: dict[str, Any]) -> Message:
        config = self.config or {}
        message = spec["message"].replace("{endpoint}", config.get("endpoint", ""))
        if spec.get("leak"):
            message += " " + config.get("api_key", "")
        return ToolkitStatusEvent(
            session_id=spec.get("session_id", ""),
            toolkit_name=spec.get("toolkit_name", ""),
            configured=False,
            status="error",
            message=message,
        )

    def __repr__(self) -> str:
        return "SuitePlugin()"


class PushingToolkit:
    """The single-toolkit shape (`definition` + `initialize`) that also takes a push callback."""

    instances: ClassVar[list[PushingToolkit]] = []
    definition: ClassVar[dict[str, Any]] = {
        "name": "spec-pager",
        "schema": {
            "type": "object",
            "properties": {"pager_key": {"type": "string", "writeOnly": True}},
            "required": ["pager_key"],
        },
        "tools": ["page"],
    }

    def __init__(self) -> None:
        self.callback: Any = None
        PushingToolkit.instances.append(self)

    def initialize(self, config: dict[str, Any]) -> None:
        return None

    def set_push_callback(self, fn: Any) -> None:
        self.callback = fn

    def emit(self, event: Any) -> None:
        if self.callback is not None:
            self.callback(event)
