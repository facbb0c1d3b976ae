"""Toolkits for the browser tests, installed through the real entry point group.

Each writes proof of what it was initialized with into `$TKV_WEB_PROOF_DIR` (when set):
the SHA-256 of the canonical config, never a value, so a test can check the toolkit got
exactly the config it expects while the canary scan of every file stays meaningful.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, ClassVar


def config_digest(config: dict[str, Any]) -> str:
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _prove(name: str, config: dict[str, Any]) -> None:
    where = os.environ.get("TKV_WEB_PROOF_DIR")
    if where:
        count = len(list(Path(where).glob(f"{name}-*.json")))
        proof = {"sha256": config_digest(config), "keys": sorted(config)}
        (Path(where) / f"{name}-{count + 1}.json").write_text(json.dumps(proof))


LEDGER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "endpoint": {
            "type": "string",
            "format": "uri",
            "title": "API endpoint",
            "description": "Base URL of the ledger API.",
        },
        "region": {"enum": ["eu", "us"], "title": "Region"},
        "api_key": {
            "type": "string",
            "writeOnly": True,
            "title": "API key",
            "description": "Issued in the ledger's admin page.",
        },
    },
    "required": ["endpoint", "api_key"],
    "additionalProperties": False,
}


class LedgerToolkit:
    definition: ClassVar[dict[str, Any]] = {
        "name": "ledger",
        "description": "A bookkeeping API that needs an API key",
        "category": "finance",
        "tags": ["test"],
        "schema": LEDGER_SCHEMA,
        "tools": ["post_entry", "balance"],
    }

    def initialize(self, config: dict[str, Any]) -> list[str] | None:
        _prove("ledger", config)
        return None


EVERYTHING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "port": {"type": "integer", "minimum": 1, "maximum": 65535, "title": "Port"},
    },
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Contact email"},
        "homepage": {"type": "string", "format": "uri", "title": "Homepage"},
        "account": {
            "type": "string",
            "pattern": "^acct-[0-9]{4}$",
            "title": "Account id",
            "description": "Looks like acct-1234.",
        },
        "plan": {"enum": ["free", "team", "enterprise"], "title": "Plan"},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1, "title": "Sampling ratio"},
        "port": {"$ref": "#/$defs/port"},
        "verbose": {"type": "boolean", "title": "Verbose logging"},
        "tags": {"type": "array", "items": {"type": "string"}, "title": "Tags"},
        "retries": {"type": "array", "items": {"type": "integer"}, "title": "Retry delays"},
        "database": {
            "type": "object",
            "title": "Database",
            "description": "Where the toolkit keeps its state.",
            "properties": {
                "host": {"type": "string", "title": "Database host"},
                "password": {"type": "string", "format": "password", "title": "Database password"},
            },
            "required": ["host", "password"],
        },
        "token": {"type": "string", "x-secret": True, "title": "Access token"},
        "signing_key": {"type": "string", "sensitive": True, "title": "Signing key"},
        "headers": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "title": "Extra headers",
        },
    },
    "required": ["email", "plan", "port", "database", "token"],
    "additionalProperties": False,
}


class EverythingToolkit:
    definition: ClassVar[dict[str, Any]] = {
        "name": "everything",
        "description": "A toolkit whose schema uses every kind of field the form supports",
        "category": "test",
        "tags": ["test"],
        "schema": EVERYTHING_SCHEMA,
        "tools": ["noop"],
    }

    def initialize(self, config: dict[str, Any]) -> list[str] | None:
        _prove("everything", config)
        return None
