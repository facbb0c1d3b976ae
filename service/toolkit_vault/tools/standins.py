"""Stand-ins for what the other parts of issue 50 provide, with the signatures agreed for
them, so the engine runs and is tested before they land. Each one is replaced at merge by
the real one and this module deleted:

- `as_tool_result` by `plugin.as_tool_result` (Part D);
- `declared_tool` by `RegisteredToolkit.tool(name)` (Part D);
- `invoke` by `instance.call_tool(name, arguments, context)` (Part D: the built-in
  filesystem's tools answer through `call_tool` there);
- `arguments_hmac` and `CALL_HMAC_LABEL` by `tools.call_audit`'s (Part B).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from toolkit_vault.canonical import canonical_json
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.plugin import CallContext, PluginAnswerRefused, Tool, ToolResult
from toolkit_vault.protocol import ToolCallResponse
from toolkit_vault.toolkits.filesystem import FilesystemToolkit
from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = ["CALL_HMAC_LABEL", "arguments_hmac", "as_tool_result", "declared_tool", "invoke"]

CALL_HMAC_LABEL = "tool-call-arguments"

_PATH = {"type": "string", "minLength": 1, "maxLength": 4096}
_FILESYSTEM_TOOLS = {
    "read_file": Tool(
        "read_file",
        "Read a UTF-8 text file under the root",
        {"type": "object", "properties": {"path": _PATH}, "required": ["path"]},
    ),
    "write_file": Tool(
        "write_file",
        "Write a UTF-8 text file under the root",
        {
            "type": "object",
            "properties": {"path": _PATH, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    ),
    "list_dir": Tool(
        "list_dir",
        "List a directory under the root",
        {"type": "object", "properties": {"path": _PATH}},
    ),
}


def as_tool_result(value: Any) -> ToolResult:
    """What a tool answered, as a `ToolResult`: one already, a `ToolCallResponse`, a text,
    or a mapping of MCP's result fields; anything else refused."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, ToolCallResponse):
        return ToolResult(value.content, value.structured_content, value.is_error)
    if isinstance(value, str):
        return ToolResult.text(value)
    if isinstance(value, Mapping):
        content = value.get("content", ())
        structured = value.get("structured_content", value.get("structuredContent"))
        is_error = value.get("is_error", value.get("isError", False))
        if (
            isinstance(content, list | tuple)
            and all(isinstance(block, Mapping) for block in content)
            and (structured is None or isinstance(structured, Mapping))
            and isinstance(is_error, bool)
        ):
            return ToolResult(tuple(content), structured, is_error)
    raise PluginAnswerRefused("the tool did not answer with a tool result")


def declared_tool(toolkit: RegisteredToolkit, name: str) -> Tool | None:
    """The tool `name` of `toolkit`, if its definition lists it: the `Tool` its plugin
    declares (a `tools` attribute of its factory), else one taking an object of any
    fields."""
    if name not in toolkit.definition.tools:
        return None
    if toolkit.factory is FilesystemToolkit:
        return _FILESYSTEM_TOOLS.get(name)
    for tool in getattr(toolkit.factory, "tools", ()) or ():
        if isinstance(tool, Tool) and tool.name == name:
            return tool
    return Tool(name)


def invoke(instance: Any, name: str, arguments: dict[str, Any], context: CallContext) -> Any:
    """Call the tool on the live instance: its `call_tool`, or the built-in filesystem's
    methods."""
    if isinstance(instance, FilesystemToolkit):
        if name == "read_file":
            return ToolResult.text(instance.read_file(arguments["path"]))
        if name == "write_file":
            instance.write_file(arguments["path"], arguments["content"])
            return ToolResult.text("written")
        return ToolResult(structured_content={"entries": instance.list_dir(**arguments)})
    call = getattr(instance, "call_tool", None)
    if not callable(call):
        raise PluginAnswerRefused("the toolkit answers no calls")
    return call(name, arguments, context)


def arguments_hmac(key: SecretBytes, arguments: Mapping[str, Any]) -> str:
    """HMAC-SHA256 (hex) of the canonical JSON of a call's arguments."""
    return hmac.new(key.reveal(), canonical_json(dict(arguments)), hashlib.sha256).hexdigest()
