"""A toolkit that signs in with OAuth, for the OAuth tests: its schema's `x-oauth` names
the loopback authorization server in `$TKV_OAUTH_ISSUER` (read when it is registered).

Each initialization writes proof of what it got into `$TKV_WEB_PROOF_DIR` (when set): the
SHA-256 of the canonical config and its keys, never a value.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

RESOURCE = "https://calendar.example.test/mcp"


def config_digest(config: dict[str, Any]) -> str:
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def schema(issuer: str) -> dict[str, Any]:
    return {
        "type": "object",
        "x-oauth": {
            "issuer": issuer,
            "client_id": "tkv-test-client",
            "scopes": ["calendar.read", "calendar.write"],
            "resource": RESOURCE,
            "token_field": "/access_token",
        },
        "properties": {
            "calendar": {"type": "string", "title": "Calendar"},
            "access_token": {"type": "string", "writeOnly": True, "title": "Access token"},
        },
        "required": ["calendar", "access_token"],
        "additionalProperties": False,
    }


class CalendarToolkit:
    def __init__(self) -> None:
        self.definition = {
            "name": "calendar",
            "description": "A calendar API that signs in with OAuth",
            "category": "productivity",
            "tags": ["test"],
            "schema": schema(os.environ.get("TKV_OAUTH_ISSUER", "http://127.0.0.1:9")),
            "tools": ["list_events"],
        }

    def initialize(self, config: dict[str, Any]) -> list[str] | None:
        where = os.environ.get("TKV_WEB_PROOF_DIR")
        if where:
            count = len(list(Path(where).glob("calendar-*.json")))
            proof = {"sha256": config_digest(config), "keys": sorted(config)}
            (Path(where) / f"calendar-{count + 1}.json").write_text(json.dumps(proof))
        return None


def confidential_schema(issuer: str, method: str) -> dict[str, Any]:
    """The calendar's schema for a confidential client: its secret is one more secret field."""
    found = schema(issuer)
    found["x-oauth"] = {
        **found["x-oauth"],
        "client_id": "tkv-confidential-client",
        "client_secret_field": "/client_secret",
        "token_endpoint_auth_method": method,
    }
    secret = {"type": "string", "writeOnly": True, "title": "Client secret"}
    found["properties"] = {**found["properties"], "client_secret": secret}
    found["required"] = [*found["required"], "client_secret"]
    return found


class TeamCalendarToolkit(CalendarToolkit):
    """The calendar as a confidential client (client_secret_basic)."""

    name, method = "teamcal", "client_secret_basic"

    def __init__(self) -> None:
        super().__init__()
        issuer = os.environ.get("TKV_OAUTH_ISSUER", "http://127.0.0.1:9")
        schema_ = confidential_schema(issuer, self.method)
        self.definition = {**self.definition, "name": self.name, "schema": schema_}


class TeamCalendarPostToolkit(TeamCalendarToolkit):
    """The calendar as a confidential client (client_secret_post)."""

    name, method = "teamcal-post", "client_secret_post"
