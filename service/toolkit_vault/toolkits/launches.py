"""The command line and environment an imported local server starts with, built from what
its publisher declared and the stored config.

Two shapes are stored at import (`x-toolkit-package.launch`): a client config's command as
written (`argv`, and each environment variable's field in `env`), or a recipe
(`toolkit_package.launch_recipe`): a registry package, pinned, or an MCPB bundle's
`mcp_config` (its `${__dirname}` the unpacked bundle whose manifest.json has the pinned name
and version), with its arguments and variables, each value a user fills named by its input.
A package runs from an install the operator made (`TOOLKIT_VAULT_PACKAGES`, `:`-separated:
Python virtual environments and npm prefixes), found by name and exact version, bound read-
only into the sandbox, so a launch needs no network and runs what was pinned. When none
holds it, the launch is refused and says what to install, unless the operator lets the
publisher's runner fetch it at launch (`TOOLKIT_VAULT_PACKAGE_RUNNERS=on`: `npx --yes
pkg@version`, `uvx pkg==version`, from the registry, each start): off by default, as code
fetched at launch is whatever the registry serves that day, and a configure should not wait
on a download.

Secrets go in the environment only. A recipe that puts a secret field on the command line
(where every local user can read it) is refused at import unless the operator allowed it
(`--allow-secret-argv`, audited), which the stored launch then records; a launch of such a
recipe without that mark is refused here too.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit_package.launch_recipe import DIRNAME
from toolkit_package.placeholders import fill
from toolkit_vault.errors import VaultError
from toolkit_vault.protocol import ToolkitDefinition

__all__ = [
    "PACKAGES_ENV",
    "RUNNERS_ENV",
    "SECRET_ARGV_ALLOWED",
    "Built",
    "LaunchRefused",
    "ServerCheckFailed",
    "allow_secret_argv",
    "build",
    "installed_package",
    "is_launch",
    "secret_argv_fields",
]

PACKAGES_ENV = "TOOLKIT_VAULT_PACKAGES"
RUNNERS_ENV = "TOOLKIT_VAULT_PACKAGE_RUNNERS"  # "on": npx/uvx may fetch a package at launch
SECRET_ARGV_ALLOWED = "secret_argv_allowed"  # noqa: S105 (a key, no value); the operator allowed it at import (audited)


class LaunchRefused(VaultError):
    """The server cannot be started from what was stored; the message names no value."""


class ServerCheckFailed(VaultError):
    """A configure's check of an imported server failed: it did not start, exited, or its
    remote answered 401. Written by the vault (no value), so the configure's error says it."""


@dataclass(frozen=True)
class Built:
    """What to start: argv, environment (secrets among them: never shown), the values to
    redact from its stderr, and the directories it must read (its installed package)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False)
    secrets: frozenset[str] = field(repr=False)
    read_only: tuple[Path, ...] = ()


def is_launch(found: Any) -> bool:
    """Whether a stored `launch` is one of the two shapes this module builds."""
    if not isinstance(found, Mapping):
        return False
    argv, env = found.get("argv"), found.get("env")
    if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        return isinstance(env, Mapping) and all(isinstance(f, str) for f in env.values())
    recipe, fields = found.get("recipe"), found.get("fields")
    return (
        isinstance(recipe, Mapping)
        and isinstance(recipe.get("package", recipe.get("bundle")), Mapping)
        and isinstance(fields, Mapping)
    )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _secret_fields(definition: ToolkitDefinition) -> set[str]:
    properties = definition.config_schema.get("properties", {})
    return {name for name, prop in properties.items() if prop.get("writeOnly")}


def _argv_inputs(recipe: Mapping[str, Any]) -> set[str]:
    found: set[str] = set()
    for group in (*recipe.get("runtime_args", ()), *recipe.get("package_args", ())):
        for part in group.get("parts", ()):
            if "input" in part:
                found.add(part["input"])
            found.update(part.get("inputs", ()))
    return found


def secret_argv_fields(schema: Mapping[str, Any]) -> list[str]:
    """The secret config fields a stored package recipe puts on the command line."""
    package = schema.get("x-toolkit-package")
    found = package.get("launch") if isinstance(package, Mapping) else None
    if not isinstance(found, Mapping) or not isinstance(found.get("recipe"), Mapping):
        return []
    fields: Mapping[str, str] = found.get("fields", {})
    properties = schema.get("properties", {})
    named = {fields.get(name, "") for name in _argv_inputs(found["recipe"])}
    return sorted(f for f in named if properties.get(f, {}).get("writeOnly"))


def allow_secret_argv(definition: dict[str, Any], allowed: bool, runs: bool = True) -> str | None:
    """At import: why a package whose recipe puts a secret field on the command line is
    refused (None when it does not, or the operator allowed it: the stored launch then
    records the permission, in `definition`, and the import's audit event says so). A
    vault that runs no server (`runs` False) only stores the config, as before: the
    import's argv warning is then the client's concern."""
    schema = definition.get("schema", {})
    fields = secret_argv_fields(schema)
    if not fields or not runs:
        return None
    if not allowed:
        return (
            f"its command line would carry the secret field(s) {', '.join(fields)[:200]}, "
            "visible to every local user: import it with --allow-secret-argv to run it anyway"
        )
    schema["x-toolkit-package"]["launch"][SECRET_ARGV_ALLOWED] = True
    return None


def build(
    launch: Mapping[str, Any],
    definition: ToolkitDefinition,
    config: Mapping[str, Any],
    packages: Sequence[Path] = (),
    runners: bool = False,
) -> Built:
    """The argv and environment of one launch (raises LaunchRefused). `packages`: the
    operator's installs; `runners`: whether npx/uvx may fetch a package not installed."""
    secret = _secret_fields(definition)
    if "recipe" not in launch:  # a client config's command, as written
        env_fields: Mapping[str, str] = launch["env"]
        env = {var: _text(config[f]) for var, f in env_fields.items() if f in config}
        secrets = frozenset(v for var, v in env.items() if env_fields[var] in secret)
        return Built(tuple(launch["argv"]), env, secrets)
    recipe, fields = launch["recipe"], launch["fields"]
    if secret_argv_fields(definition.config_schema) and not launch.get(SECRET_ARGV_ALLOWED):
        raise LaunchRefused(
            f"{definition.name[:80]}: its command line carries a secret field, which the "
            "operator did not allow at import (--allow-secret-argv)"
        )
    bundle = recipe.get("bundle")
    given: dict[str, str] = {}
    if isinstance(bundle, Mapping):
        where = installed_bundle(str(bundle["name"]), str(bundle["version"]), packages)
        given[DIRNAME] = str(where)
    values = Values(config, fields, secret, given)
    env = {}
    for var, part in recipe.get("environment", {}).items():
        value = values.part(part)
        if value is not None:
            env[var] = value[0] if len(value) == 1 else " ".join(value)
    runtime = [t for g in recipe.get("runtime_args", ()) for t in values.group(g)]
    arguments = [t for g in recipe.get("package_args", ()) for t in values.group(g)]
    if isinstance(bundle, Mapping):
        command = values.part(recipe["command"])
        if not command:
            raise LaunchRefused("the bundle's command has no value")
        return Built((*command, *arguments), env, frozenset(values.secrets), (where,))
    head, binds = _runner(recipe["package"], packages, bool(runtime), runners)
    argv = (*head[:1], *runtime, *head[1:], *arguments) if runtime else (*head, *arguments)
    return Built(tuple(argv), env, frozenset(values.secrets), binds)


class Values:
    """A recipe's parts filled from the config (a missing optional input drops its group)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        fields: Mapping[str, str],
        secret: set[str],
        given: Mapping[str, str] | None = None,
    ) -> None:
        self._config, self._fields, self._secret = config, fields, secret
        self._given = dict(given or {})  # values the launch supplies (a bundle's directory)
        self.secrets: set[str] = set()

    def _input(self, name: str, default: str | None = None) -> list[str] | None:
        field_name = self._fields.get(name)
        value = self._config.get(field_name) if field_name is not None else None
        if value is None:
            return None if default is None else [default]
        texts = [_text(v) for v in value] if isinstance(value, list) else [_text(value)]
        if field_name in self._secret:
            self.secrets.update(texts)
        return texts

    def part(self, part: Mapping[str, Any]) -> list[str] | None:
        if "text" in part:
            return [str(part["text"])]
        if "input" in part:
            return self._input(part["input"], part.get("default"))
        found: dict[str, str] = {**self._given, **part.get("fixed", {})}
        for name in part.get("inputs", ()):
            value = self._input(name)
            if value is None:
                return None
            found[name] = " ".join(value)
        try:
            return [fill(part["template"], found)]
        except KeyError:
            return None

    def group(self, group: Mapping[str, Any]) -> list[str]:
        tokens: list[str] = []
        for part in group.get("parts", ()):
            value = self.part(part)
            if value is None:
                if group.get("required"):
                    raise LaunchRefused("a required argument of the server has no value")
                return []
            tokens += value
        return tokens


_NORMALISE = re.compile(r"[-_.]+")


def _normal(name: str) -> str:
    return _NORMALISE.sub("-", name).lower()


def installed_package(
    registry: str, identifier: str, version: str, packages: Sequence[Path]
) -> tuple[list[str], Path] | None:
    """(argv, directory to bind) of an installed copy of the pinned package, or None."""
    for root in packages:
        found = (_npm if registry == "npm" else _pypi)(root, identifier, version)
        if found is not None:
            return found, root
    return None


def installed_bundle(name: str, version: str, packages: Sequence[Path]) -> Path:
    """The directory of an unpacked MCPB bundle of this name and version: one of the
    operator's `TOOLKIT_VAULT_PACKAGES`, or a directory in one, whose manifest.json says
    so (raises LaunchRefused when none does)."""
    for root in packages:
        for where in (root, *_children(root)):
            try:
                manifest = json.loads((where / "manifest.json").read_text())
            except (OSError, ValueError):
                continue
            if isinstance(manifest, dict) and (manifest.get("name"), manifest.get("version")) == (
                name,
                version,
            ):
                return where
    raise LaunchRefused(
        f"bundle {name[:120]} {version[:40]} is not unpacked in {PACKAGES_ENV} "
        "(a directory holding its manifest.json)"
    )


def _children(root: Path) -> list[Path]:
    try:
        return sorted(p for p in root.iterdir() if p.is_dir())[:1000]
    except OSError:
        return []


def _npm(root: Path, identifier: str, version: str) -> list[str] | None:
    base = root / "node_modules" / identifier
    try:
        manifest = json.loads((base / "package.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("version") != version:
        return None
    bins = manifest.get("bin")
    if isinstance(bins, str):
        entry = bins
    elif isinstance(bins, dict) and bins:
        short = identifier.rsplit("/", 1)[-1]
        chosen = bins.get(short, next(iter(bins.values())) if len(bins) == 1 else None)
        if not isinstance(chosen, str):
            return None
        entry = chosen
    else:
        return None
    node = shutil.which("node")
    path = (base / entry).resolve()
    if node is None or not path.is_relative_to(base.resolve()):
        return None
    return [node, str(path)]


def _pypi(root: Path, identifier: str, version: str) -> list[str] | None:
    wanted = _normal(identifier)
    for info in root.glob("lib/python3*/site-packages/*.dist-info"):
        name, _, found_version = info.name[: -len(".dist-info")].rpartition("-")
        if _normal(name) != wanted or found_version != version:
            continue
        scripts = _console_scripts(info / "entry_points.txt")
        chosen = identifier if identifier in scripts else None
        if chosen is None and len(scripts) == 1:
            chosen = scripts[0]
        script = root / "bin" / chosen if chosen else None
        if script is not None and script.is_file():
            return [str(script)]
    return None


def _console_scripts(path: Path) -> list[str]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    names, inside = [], False
    for line in (raw.strip() for raw in lines):
        if line.startswith("["):
            inside = line == "[console_scripts]"
        elif inside and "=" in line:
            names.append(line.split("=", 1)[0].strip())
    return names


def _runner(
    package: Mapping[str, Any], packages: Sequence[Path], runtime_args: bool, runners: bool
) -> tuple[list[str], tuple[Path, ...]]:
    registry, identifier = str(package["registry"]), str(package["identifier"])
    version = str(package["version"])
    if not runtime_args:
        found = installed_package(registry, identifier, version, packages)
        if found is not None:
            return found[0], (found[1],)
    if registry == "npm":
        program, tail = "npx", ["--yes", f"{identifier}@{version}"]
    else:
        program, tail = "uvx", [f"{identifier}=={version}"]
    path = shutil.which(program) if runners else None
    if path is None:
        why = "may not fetch it" if not runners else "is not on this machine"
        raise LaunchRefused(
            f"{registry} package {identifier[:120]} {version[:40]} is not installed in "
            f"{PACKAGES_ENV}, and {program} {why} ({RUNNERS_ENV})"
        )
    return [path, *tail], ()
