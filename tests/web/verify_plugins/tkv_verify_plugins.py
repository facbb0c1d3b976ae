"""A toolkit whose plugin checks the credential before the vault stores it (issue 41)."""

from __future__ import annotations

from typing import Any, ClassVar

GOOD = "tkv-canary-browser-good-71d3"


class CheckedToolkit:
    definition: ClassVar[dict[str, Any]] = {
        "name": "checked",
        "description": "A toolkit that checks its API key before it is saved",
        "schema": {
            "type": "object",
            "properties": {
                "api_key": {"type": "string", "writeOnly": True, "title": "API key"},
            },
            "required": ["api_key"],
        },
        "tools": ["ping"],
    }

    def initialize(self, config: dict[str, Any]) -> None:
        return None

    def verify(self, config: dict[str, Any]) -> bool:
        return bool(config.get("api_key") == GOOD)
