"""Toolkit plugins used by the tests, installed through the real entry point group.

`conftest.py` puts this directory on the path together with a `.dist-info` that declares
them in `toolkit_vault.toolkits`, so discovery runs exactly as for a third-party plugin.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

SECRETIVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "endpoint": {"type": "string"},
        "mode": {"enum": ["ok", "partial", "fail"]},
        "api_key": {"type": "string", "writeOnly": True},
        "auth": {
            "type": "object",
            "properties": {
                "user": {"type": "string"},
                "password": {"type": "string", "format": "password"},
            },
        },
        "tokens": {"type": "array", "items": {"type": "string", "x-secret": True}},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["endpoint", "api_key"],
    "additionalProperties": False,
}


class SecretiveToolkit:
    """Records every config it is initialized with (in memory only) for assertions."""

    received: ClassVar[list[dict[str, Any]]] = []
    definition: ClassVar[dict[str, Any]] = {
        "name": "secretive",
        "alias": "sec",
        "description": "A toolkit whose config carries credentials",
        "category": "test",
        "tags": ["test", "secrets"],
        "schema": SECRETIVE_SCHEMA,
        "tools": ["call_api", "upload"],
    }

    def initialize(self, config: dict[str, Any]) -> list[str] | None:
        SecretiveToolkit.received.append(copy.deepcopy(config))
        mode = config.get("mode", "ok")
        if mode == "fail":
            raise RuntimeError(f"bad credentials {config['api_key']}")
        return ["upload", "not-a-tool"] if mode == "partial" else None


def broken_factory() -> Any:
    raise RuntimeError("this plugin cannot even be built")
