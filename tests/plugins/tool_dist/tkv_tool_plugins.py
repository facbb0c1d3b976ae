"""A toolkit with tools, for the `tool/call` tests: installed only where a test asks
(`tool_dist` on the path), so no other test's list changes.

`leak` answers its own credential in the form asked (the withheld rule must catch each),
`slow` waits until its deadline or a cancel (and notes which, in memory and, for a test
in another process, in the file `note` names), `echo` answers its text.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

from toolkit_vault.errors import VaultError
from toolkit_vault.plugin import CallContext, Tool, ToolResult

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "endpoint": {"type": "string"},
        "api_key": {"type": "string", "writeOnly": True},
    },
    "required": ["endpoint", "api_key"],
    "additionalProperties": False,
}
FORMS = [
    "plain",
    "base64",
    "base64url",
    "hex",
    "percent",
    "structured",
    "key",
    "error",
    "vault_error",
    "not_json",
    "int_key",
]


class CallingToolkit:
    definition: ClassVar[dict[str, Any]] = {
        "name": "calling",
        "alias": "call",
        "description": "A toolkit whose tools answer calls",
        "category": "test",
        "tags": ["test"],
        "schema": SCHEMA,
        "tools": ["echo", "leak", "slow", "undeclared"],  # the last takes any object
    }
    tools: ClassVar[tuple[Tool, ...]] = (
        Tool(
            "echo",
            "Answer the text",
            {
                "type": "object",
                "properties": {"text": {"type": "string", "maxLength": 100}},
                "required": ["text"],
                "additionalProperties": False,
            },
            annotations={"readOnlyHint": True},
        ),
        Tool(
            "leak",
            "Answer the credential, encoded",
            {"type": "object", "properties": {"form": {"enum": FORMS}}, "required": ["form"]},
        ),
        Tool(
            "slow",
            "Wait",
            {
                "type": "object",
                "properties": {
                    "seconds": {"type": "number", "maximum": 60},
                    "note": {"type": "string"},
                },
            },
            output_schema={"type": "object"},
        ),
    )
    invoked: ClassVar[list[str]] = []  # every tool a call reached, in order
    started = threading.Event()  # a `slow` call began
    saw_cancel: ClassVar[list[bool]] = []  # per `slow` call: whether it was told to stop

    def initialize(self, config: dict[str, Any]) -> None:
        self._key = config["api_key"]

    def call_tool(self, name: str, arguments: dict[str, Any], context: CallContext) -> Any:
        CallingToolkit.invoked.append(name)
        if name == "echo":
            return ToolResult.text(arguments["text"])
        if name == "undeclared":
            return ToolResult(structured_content={"keys": sorted(arguments)})
        if name == "slow":
            CallingToolkit.started.set()
            if "note" in arguments:  # a test in another process reads that it runs
                _note(Path(arguments["note"]), "started")
            told = context.cancelled.wait(min(arguments.get("seconds", 5), 60))
            CallingToolkit.saw_cancel.append(told)
            if "note" in arguments:  # ... and how it ended
                _note(Path(arguments["note"]), "cancelled" if told else "done")
            return {"content": [], "structured_content": {"waited": time.monotonic()}}
        raw = self._key.encode()
        form = arguments["form"]
        text = {
            "plain": f"the key is {self._key}.",
            "base64": "Zm9v" + base64.b64encode(b"x" + raw).decode(),
            "base64url": base64.urlsafe_b64encode(b"ab" + raw).decode(),
            "hex": "0x" + raw.hex().upper(),
            "percent": "q=" + quote(self._key, safe=""),
        }.get(form)
        if text is not None:
            return ToolResult.text(text)
        if form == "structured":
            return ToolResult(structured_content={"nested": [{"deep": self._key}]})
        if form == "key":
            return {
                "content": [{"type": "text", "text": "ok"}],
                "structured_content": {self._key: 1},
            }
        if form == "not_json":
            return ToolResult(structured_content={"ratio": float("nan")})
        if form == "int_key":
            return ToolResult(structured_content={1: ("a", "b")})
        if form == "vault_error":
            raise VaultError(f"refused by the server for {self._key}")
        raise RuntimeError(f"failed with {self._key}")


def _note(path: Path, word: str) -> None:
    """Replace the note whole: a reader in another process never sees it half written
    (`write_text` creates the file empty, then writes)."""
    partial = path.with_name(f".{path.name}.{word}")
    partial.write_text(word)
    os.replace(partial, path)
