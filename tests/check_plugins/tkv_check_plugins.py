"""A toolkit whose schema's `x-verify` sends the key as a query parameter (issue 48): the
request's URL holds the secret. Installed only where a test puts this directory on
PYTHONPATH, so no other test's toolkit list changes."""

from __future__ import annotations

from typing import Any, ClassVar


class QueryChecked:
    definition: ClassVar[dict[str, Any]] = {
        "name": "query-checked",
        "description": "A toolkit whose key is checked by GET {base_url}/v1/me?key=KEY",
        "schema": {
            "type": "object",
            "properties": {
                "base_url": {"type": "string"},
                "api_key": {"type": "string", "writeOnly": True, "title": "API key"},
            },
            "required": ["base_url", "api_key"],
            "x-verify": {"url": "{base_url}/v1/me", "secret": "api_key", "query": "key"},
        },
        "tools": ["ping"],
    }

    def initialize(self, config: dict[str, Any]) -> None:
        return None
