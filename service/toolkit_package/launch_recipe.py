"""How to start a registry server.json package, as its publisher declared it: the package
(registry, identifier, pinned version, runtime hint) and a recipe for its command line and
environment in which every value a user fills is a reference to its input, never a value.

A recipe part is one of:

- ``{"text": "stdio"}``: a literal the publisher fixed (public metadata for all to read);
- ``{"input": "NAME"}``: the value of the input NAME (``default`` when it has one);
- ``{"template": "--token={token}", "inputs": ["token"]}``: a value with placeholders.

An argument is a group of parts (``--port`` then its value) left out whole when an input it
needs has no value and it is not required. A fixed value that classifies as a credential
(a URL with a password in a published argument) makes no recipe: the vault would store a
credential in clear, so such a package is only stored, never launched.

The vault (`toolkits.launches`) turns the recipe into argv and environment with the
stored config, after mapping each input name to its config field.
"""

from __future__ import annotations

import json
import re
from typing import Any

from toolkit_package import placeholders
from toolkit_package.argv import argv_credential, url_credential
from toolkit_package.classify import TOKEN_SHAPE, credential_word
from toolkit_package.imported import ConfigInput

__all__ = [
    "DIRNAME",
    "REMOTE_TRANSPORTS",
    "RUNNABLE_REGISTRIES",
    "bundle_recipe",
    "package_recipe",
    "remote_recipe",
]

RUNNABLE_REGISTRIES = frozenset({"npm", "pypi"})
REMOTE_TRANSPORTS = frozenset({"streamable-http", "sse"})
DIRNAME = "__dirname"  # an MCPB bundle's own directory, where the vault finds it installed
_BUNDLE_REF = re.compile(r"\$\{(?:user_config\.([A-Za-z0-9_.-]{1,128})|(__dirname))\}")


class _NoRecipe(Exception):
    """The package cannot be launched from its declaration (it is still imported)."""


def _text(obj: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = obj.get(key)
        if isinstance(value, str):
            return value
    return None


def _value_part(
    obj: dict[str, Any], value: str, name: str, fixed_secret: set[str]
) -> dict[str, Any]:
    """A published value: a literal, or a template whose fixed variables are filled now
    (their values are public metadata) and whose other placeholders name inputs."""
    if name in fixed_secret or url_credential(name) or url_credential(value):
        raise _NoRecipe(name)
    found = placeholders.names(value)
    if not found:
        return {"text": value}
    variables = obj.get("variables") if isinstance(obj.get("variables"), dict) else {}
    fixed: dict[str, str] = {}
    for var in found:
        declared = (variables or {}).get(var)
        given = declared.get("value") if isinstance(declared, dict) else None
        if isinstance(given, str):
            if var in fixed_secret or url_credential(given):
                raise _NoRecipe(var)
            fixed[var] = given
    return {"template": value, "inputs": [v for v in found if v not in fixed], "fixed": fixed}


def _argument(arg: Any, index: int, fixed_secret: set[str], secret: set[str]) -> dict[str, Any]:
    if not isinstance(arg, dict):
        raise _NoRecipe("argument")
    kind = arg.get("type")
    value = _text(arg, "value")
    default = arg.get("default")
    required = bool(arg.get("isRequired", arg.get("is_required", False)))
    if kind == "named":
        name = _text(arg, "name")
        if not name:
            raise _NoRecipe("argument")
        head: list[dict[str, Any]] = [{"text": name}]
    elif kind == "positional":
        name = _text(arg, "valueHint", "value_hint") or f"argument-{index}"
        head = []
    else:
        raise _NoRecipe("argument")
    if value is not None:
        return {"parts": [*head, _value_part(arg, value, name, fixed_secret)], "required": True}
    return {"parts": [*head, _input(name, default, secret)], "required": required}


def _input(name: str, default: Any, secret: set[str]) -> dict[str, Any]:
    """An input's part; its published default kept only when it is public (a secret input
    keeps none, as its form field does not)."""
    part: dict[str, Any] = {"input": name}
    public = name not in secret and not isinstance(default, bool)
    if public and isinstance(default, str | int | float):
        part["default"] = str(default)
    return part


def _environment(
    entries: Any, fixed_secret: set[str], secret: set[str]
) -> dict[str, dict[str, Any]]:
    env: dict[str, dict[str, Any]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise _NoRecipe("environment")
        name = entry["name"]
        value = _text(entry, "value")
        if value is not None:
            env[name] = _value_part(entry, value, name, fixed_secret)
        else:
            env[name] = _input(name, entry.get("default"), secret)
    return env


def package_recipe(pkg: dict[str, Any], inputs: tuple[ConfigInput, ...]) -> str:
    """The canonical JSON of a package's launch recipe, or "" when the vault cannot run it
    (another registry than npm or PyPI, no pinned version, a transport other than stdio, a
    credential fixed by the publisher)."""
    registry = _text(pkg, "registryType", "registry_type", "registry_name") or ""
    identifier = _text(pkg, "identifier", "name") or ""
    version = _text(pkg, "version") or ""
    transport = pkg.get("transport") if isinstance(pkg.get("transport"), dict) else {}
    if registry not in RUNNABLE_REGISTRIES or not identifier or not version:
        return ""
    if (transport or {}).get("type", "stdio") != "stdio":
        return ""
    fixed_secret = {i.name for i in inputs if i.has_fixed_value and i.secret}
    secret = {i.name for i in inputs if i.secret}
    try:
        runtime = [
            _argument(a, i, fixed_secret, secret)
            for i, a in enumerate(pkg.get("runtimeArguments", pkg.get("runtime_arguments")) or [])
        ]
        package = [
            _argument(a, i, fixed_secret, secret)
            for i, a in enumerate(pkg.get("packageArguments", pkg.get("package_arguments")) or [])
        ]
        env = _environment(
            pkg.get("environmentVariables", pkg.get("environment_variables")), fixed_secret, secret
        )
    except _NoRecipe:
        return ""
    recipe = {
        "package": {
            "registry": registry,
            "identifier": identifier,
            "version": version,
            "runtime_hint": _text(pkg, "runtimeHint", "runtime_hint") or "",
        },
        "runtime_args": runtime,
        "package_args": package,
        "environment": env,
    }
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))


def remote_recipe(remote: dict[str, Any], inputs: tuple[ConfigInput, ...]) -> str:
    """The canonical JSON of a server.json remote's connection recipe (its transport, its
    URL as a template whose placeholders name inputs, its headers as parts), or "" when
    the vault cannot reach it (another transport, a credential fixed by the publisher)."""
    transport = _text(remote, "type", "transport_type") or ""
    url = _text(remote, "url") or ""
    if transport not in REMOTE_TRANSPORTS or not url:
        return ""
    fixed_secret = {i.name for i in inputs if i.has_fixed_value and i.secret}
    secret = {i.name for i in inputs if i.secret}
    try:
        address = _value_part(remote, url, "url", fixed_secret)
        headers = _environment(remote.get("headers"), fixed_secret, secret)
    except _NoRecipe:
        return ""
    recipe = {"remote": {"transport": transport, "url": address}, "headers": headers}
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))


def _bundle_part(text: str, secret: set[str]) -> dict[str, Any]:
    """A manifest's value: `${user_config.KEY}` names the input KEY, `${__dirname}` the
    bundle's directory; anything else is the publisher's literal."""
    inputs: list[str] = []

    def named(match: re.Match[str]) -> str:
        if match.group(2):
            return "{" + DIRNAME + "}"
        inputs.append(match.group(1))
        return "{" + match.group(1) + "}"

    template = _BUNDLE_REF.sub(named, text)
    if template == text and not inputs:
        return {"text": text}
    del secret
    return {"template": template, "inputs": list(dict.fromkeys(inputs)), "fixed": {}}


def bundle_recipe(doc: dict[str, Any], inputs: tuple[ConfigInput, ...]) -> str:
    """The canonical JSON of an MCPB bundle's launch recipe (its `server.mcp_config`
    command, args and env, each reference to `user_config` naming its input), or "" when
    it has none (a `uv` or `python` bundle the host runs itself, a value the recipe cannot
    hold). The bundle's name and version pin the installed copy the vault runs."""
    server = doc.get("server") if isinstance(doc.get("server"), dict) else {}
    config = (server or {}).get("mcp_config")
    name, version = doc.get("name"), doc.get("version")
    if not isinstance(config, dict) or not isinstance(name, str) or not isinstance(version, str):
        return ""
    command, args, env = config.get("command"), config.get("args") or [], config.get("env") or {}
    if not isinstance(command, str) or not isinstance(args, list) or not isinstance(env, dict):
        return ""
    if not all(isinstance(a, str) for a in args) or not all(
        isinstance(v, str) for v in env.values()
    ):
        return ""
    literal = [a if not _BUNDLE_REF.search(a) else "" for a in args]
    if any(argv_credential(literal, i) for i in range(len(args)) if literal[i]):
        return ""  # a credential the manifest writes itself: never kept
    for key, value in env.items():
        written = not _BUNDLE_REF.search(value) and value.strip()
        if written and (credential_word(key) is not None or TOKEN_SHAPE.match(value)):
            return ""
    secret = {i.name for i in inputs if i.secret}
    recipe = {
        "bundle": {"name": name, "version": version},
        "command": _bundle_part(command, secret),
        "package_args": [{"parts": [_bundle_part(a, secret)], "required": True} for a in args],
        "environment": {k: _bundle_part(v, secret) for k, v in env.items()},
    }
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))
