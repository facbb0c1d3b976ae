"""Client-config skeletons of a toolkit: what a person fills in to run it in a client.

`toolkits template NAME --format json|env|vscode|mcpb` prints one. Every field of the
toolkit's schema root becomes a placeholder; a secret one is declared secret the way each
format says it (VS Code ``inputs`` with ``password: true``, an MCPB ``user_config`` entry
with ``sensitive: true``), a public one explicitly public, so importing the skeleton back
(`toolkits import`) marks the same fields secret. A skeleton never holds a value: not a
default, not a template's, not a secret. The server's command is a placeholder too (an
A2E definition does not say how its server is started).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["COMMAND", "FORMATS", "SkeletonField", "fields_of", "skeleton"]

FORMATS = ("json", "env", "vscode", "mcpb")
COMMAND = "REPLACE-WITH-THE-SERVER-COMMAND"
_ID = re.compile(r"[^A-Za-z0-9_.-]")
_ENV = re.compile(r"[^A-Za-z0-9]+")


@dataclass(frozen=True)
class SkeletonField:
    """One top-level field: its property name, whether the vault seals it, whether the
    schema requires it, its JSON type (`string`, `number`, `integer`, `boolean`, ...), a
    description, and the environment variable an import named it after (if any)."""

    name: str
    secret: bool
    required: bool
    kind: str = "string"
    description: str = ""
    env: str = ""

    @property
    def ident(self) -> str:
        return _ID.sub("_", self.name)[:128] or "field"

    @property
    def variable(self) -> str:
        return self.env or (_ENV.sub("_", self.name).strip("_").upper() or "FIELD")


def fields_of(schema: Mapping[str, Any], secret: Sequence[str]) -> list[SkeletonField]:
    """The root's properties as skeleton fields; `secret` names the secret ones."""
    properties = schema.get("properties")
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    out = []
    for name, prop in (properties if isinstance(properties, Mapping) else {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        kind = str(prop.get("type")) if isinstance(prop.get("type"), str) else "string"
        marks = prop.get("x-toolkit-input")
        env = ""
        if isinstance(marks, Mapping) and marks.get("kind") == "env":
            env = str(marks.get("name") or "")
        description = prop.get("description") or prop.get("title") or ""
        out.append(
            SkeletonField(name, name in secret, name in needed, kind, str(description)[:500], env)
        )
    return out


def _vscode(name: str, fields: Sequence[SkeletonField]) -> dict[str, Any]:
    inputs = [
        {
            "type": "promptString",
            "id": f.ident,
            "description": f.description or f.name,
            "password": f.secret,
        }
        for f in fields
    ]
    env = {f.variable: "${input:" + f.ident + "}" for f in fields}
    server = {"type": "stdio", "command": COMMAND, "args": [], "env": env}
    return {"inputs": inputs, "servers": {name: server}}


def _mcpb(name: str, description: str, fields: Sequence[SkeletonField]) -> dict[str, Any]:
    kinds = {"number": "number", "integer": "number", "boolean": "boolean"}
    user_config = {
        f.ident: {
            "type": kinds.get(f.kind, "string"),
            "title": f.name,
            "description": f.description or f.name,
            "sensitive": f.secret,
            "required": f.required,
        }
        for f in fields
    }
    env = {f.variable: "${user_config." + f.ident + "}" for f in fields}
    return {
        "manifest_version": "0.3",
        "name": name,
        "version": "1.0.0",
        "description": description or name,
        "author": {"name": "REPLACE-WITH-THE-AUTHOR"},
        "server": {
            "type": "binary",
            "entry_point": COMMAND,
            "mcp_config": {"command": COMMAND, "args": [], "env": env},
        },
        "user_config": user_config,
    }


def skeleton(name: str, description: str, fields: Sequence[SkeletonField], fmt: str) -> str:
    """The skeleton as text in `fmt` (one of FORMATS)."""
    if fmt == "vscode":
        return json.dumps(_vscode(name, fields), indent=2) + "\n"
    if fmt == "mcpb":
        return json.dumps(_mcpb(name, description, fields), indent=2) + "\n"
    if fmt == "env":
        lines = [f"# {name}: fill in each variable; secret ones are marked"]
        for f in fields:
            marks = ", ".join(m for m, on in (("secret", f.secret), ("required", f.required)) if on)
            lines += [f"# {f.name}" + (f" ({marks})" if marks else ""), f"{f.variable}="]
        return "\n".join(lines) + "\n"
    if fmt == "json":
        config = {f.name: "${" + f.variable + "}" for f in fields}
        request = {"type": "toolkit/configure/req", "toolkit_name": name, "config": config}
        return json.dumps(request, indent=2) + "\n"
    raise ValueError(f"unknown skeleton format {fmt!r}: one of {', '.join(FORMATS)}")
