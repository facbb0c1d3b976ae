"""Client-config skeletons of a toolkit: what a person fills in to run it in a client.

`toolkits template NAME --format json|env|vscode|mcpb` prints one. Every field of the
toolkit's schema becomes a placeholder; a secret one is declared secret the way each
format says it (VS Code ``inputs`` with ``password: true``, an MCPB ``user_config`` entry
with ``sensitive: true``), a public one explicitly public, so importing the skeleton back
(`toolkits import`) marks the same fields secret. An object whose members the schema
declares is asked for member by member (``auth.user`` public, ``auth.password`` secret),
never as one prompt hiding its public members; one that admits members it does not name,
or a list, stays one field. A skeleton never holds a value: not a default, not a
template's, not a secret. The server's command is the one an import kept (``npx -y
@scope/server``); an A2E definition that does not say how its server starts gets a
placeholder.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["COMMAND", "FORMATS", "SkeletonField", "fields_of", "skeleton"]

FORMATS = ("json", "env", "vscode", "mcpb")
COMMAND = "REPLACE-WITH-THE-SERVER-COMMAND"
_ID = re.compile(r"[^A-Za-z0-9_.-]")
_ENV = re.compile(r"[^A-Za-z0-9]+")
_DEPTH = 4  # members of members are asked for one by one; deeper, an object is one field
Path = tuple[str, ...]


@dataclass(frozen=True)
class SkeletonField:
    """One field to fill in: its property name (`auth.user` for a member), whether the
    vault seals it, whether the schema requires it (and every object above it), its JSON
    type (`string`, `number`, `integer`, `boolean`, ...), a description, the environment
    variable an import named it after (if any), and its path from the root."""

    name: str
    secret: bool
    required: bool
    kind: str = "string"
    description: str = ""
    env: str = ""
    path: Path = ()

    @property
    def at(self) -> Path:
        return self.path or (self.name,)

    @property
    def ident(self) -> str:
        return _ID.sub("_", "_".join(self.at))[:128] or "field"

    @property
    def variable(self) -> str:
        return self.env or (_ENV.sub("_", "_".join(self.at)).strip("_").upper() or "FIELD")


def fields_of(
    schema: Mapping[str, Any], secret: Sequence[str] | Callable[[Path], bool]
) -> list[SkeletonField]:
    """The schema's properties as skeleton fields, an object's declared members each its
    own; `secret` names the secret top-level fields, or says of a path whether it is."""
    is_secret = secret if callable(secret) else (lambda path: path[0] in secret)
    return list(_fields(schema, (), True, is_secret))


def _fields(
    schema: Mapping[str, Any], above: Path, needed: bool, secret: Callable[[Path], bool]
) -> list[SkeletonField]:
    properties = schema.get("properties")
    required = schema.get("required")
    named = set(required) if isinstance(required, list) else set()
    out = []
    for name, prop in (properties if isinstance(properties, Mapping) else {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        path, must = (*above, str(name)), needed and name in named
        if _members_asked(prop, path, secret):
            out += _fields(prop, path, must, secret)
            continue
        kind = str(prop.get("type")) if isinstance(prop.get("type"), str) else "string"
        marks = prop.get("x-toolkit-input")
        env = ""
        if isinstance(marks, Mapping) and marks.get("kind") == "env":
            env = str(marks.get("name") or "")
        description = str(prop.get("description") or prop.get("title") or "")[:500]
        shown = ".".join(path)
        out.append(SkeletonField(shown, secret(path), must, kind, description, env, path))
    return out


def _members_asked(prop: Mapping[str, Any], path: Path, secret: Callable[[Path], bool]) -> bool:
    """Whether an object is asked for member by member: it names its members and is not
    deep. Members it admits without naming them are nobody's to prompt for."""
    members = prop.get("properties")
    return (
        prop.get("type") == "object"
        and isinstance(members, Mapping)
        and bool(members)
        and len(path) < _DEPTH
    )


def _vscode(name: str, fields: Sequence[SkeletonField], command: Sequence[str]) -> dict[str, Any]:
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
    run, *args = command or (COMMAND,)
    server = {"type": "stdio", "command": run, "args": args, "env": env}
    return {"inputs": inputs, "servers": {name: server}}


def _mcpb(
    name: str, description: str, fields: Sequence[SkeletonField], command: Sequence[str]
) -> dict[str, Any]:
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
    run, *args = command or (COMMAND,)
    return {
        "manifest_version": "0.3",
        "name": name,
        "version": "1.0.0",
        "description": description or name,
        "author": {"name": "REPLACE-WITH-THE-AUTHOR"},
        "server": {
            "type": "binary",
            "entry_point": run,
            "mcp_config": {"command": run, "args": args, "env": env},
        },
        "user_config": user_config,
    }


def skeleton(
    name: str,
    description: str,
    fields: Sequence[SkeletonField],
    fmt: str,
    command: Sequence[str] = (),
) -> str:
    """The skeleton as text in `fmt` (one of FORMATS); `command`: how the server starts,
    as an import kept it (argv), else a placeholder."""
    if fmt == "vscode":
        return json.dumps(_vscode(name, fields, command), indent=2) + "\n"
    if fmt == "mcpb":
        return json.dumps(_mcpb(name, description, fields, command), indent=2) + "\n"
    if fmt == "env":
        lines = [f"# {name}: fill in each variable; secret ones are marked"]
        for f in fields:
            marks = ", ".join(m for m, on in (("secret", f.secret), ("required", f.required)) if on)
            lines += [f"# {f.name}" + (f" ({marks})" if marks else ""), f"{f.variable}="]
        return "\n".join(lines) + "\n"
    if fmt == "json":
        config: dict[str, Any] = {}
        for f in fields:
            *above, last = f.at
            place = config
            for step in above:
                place = place.setdefault(step, {})
            place[last] = "${" + f.variable + "}"
        request = {"type": "toolkit/configure/req", "toolkit_name": name, "config": config}
        return json.dumps(request, indent=2) + "\n"
    raise ValueError(f"unknown skeleton format {fmt!r}: one of {', '.join(FORMATS)}")
