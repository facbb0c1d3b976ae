"""Helpers for the tests of spec-shaped plugins, toolkit push events and `tool/list`."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.plugin import PushCallback

SPEC_PLUGINS = Path(__file__).parent / "plugins" / "spec_dist"
AGENT = Principal("local", "agent")
CANARY = "tkv-canary-spec-4b8e1d"


def spec_module() -> ModuleType:
    """The plugin module, imported by file path: the distribution's entry points stay
    invisible to every test that does not install it (`spec_vault`, `spec_cli_env`)."""
    if "tkv_spec_plugins" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "tkv_spec_plugins", SPEC_PLUGINS / "tkv_spec_plugins.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["tkv_spec_plugins"] = module
        spec.loader.exec_module(module)
    return sys.modules["tkv_spec_plugins"]


def send(conn: A2EConnection, message: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in conn.handle_raw(json.dumps(message))]


def call_tool(conn: A2EConnection, toolkit: str, tool: str, **arguments: Any) -> dict[str, Any]:
    """One `tool/call/req` of `toolkit`'s `tool`, and its one answer."""
    message = {
        "type": "tool/call/req",
        "id": f"c-{time.monotonic_ns()}",
        "toolkit_name": toolkit,
        "tool_name": tool,
        "arguments": arguments,
    }
    (answer,) = send(conn, message)
    return answer


def result_text(answer: dict[str, Any]) -> str:
    """The text of a `tool/call/resp`'s content (asserting it is one)."""
    assert answer["type"] == "tool/call/resp", answer
    return "".join(block.get("text", "") for block in answer["content"])


def hello(
    vault: Vault,
    session_id: str | None = None,
    capabilities: tuple[str, ...] = ("toolkits",),
    push: PushCallback | None = None,
) -> tuple[A2EConnection, str]:
    conn = connect(vault, AGENT, push)
    message: dict[str, Any] = {"type": "handshake/req", "capabilities": list(capabilities)}
    if session_id:
        message["session_id"] = session_id
    response = send(conn, message)[0]
    assert response["type"] == "handshake/resp", response
    return conn, response["session_id"]


def configure(conn: A2EConnection, toolkit: str, config: dict[str, Any]) -> list[dict[str, Any]]:
    return send(conn, {"type": "toolkit/configure/req", "toolkit_name": toolkit, "config": config})


def mail_config(api_key: str = CANARY, **extra: Any) -> dict[str, Any]:
    return {"endpoint": "https://mail.example.test", "api_key": api_key, **extra}
