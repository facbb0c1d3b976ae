"""The neutral, value-free shape every importer produces, and the typed readers they share.

The types hold names, secrecy and placement of configuration inputs, never a configuration
value: no command, argument, fixed value, header value or URL survives parsing, so nothing
downstream (the inspect report, a toolkit definition) can leak one. What a publisher declares
*about* a public input is kept (its title, choices, format, bounds, and a default that is not a
placeholder: ``public_default``); a secret input keeps none of it. The readers turn a
wrong type into ``EntryInvalid`` so one bad entry is skipped, with a diagnostic naming only
its JSON pointer, and never half-imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from jsonpointer import JsonPointer

from toolkit_package.strategy import StrategyKind

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_SERVERS",
    "Collector",
    "ConfigInput",
    "DeclaredTool",
    "EntryInvalid",
    "Format",
    "ImportDiagnostic",
    "ImportRefused",
    "ImportResult",
    "ImportedServer",
    "InputKind",
    "SkippedServer",
    "ValueType",
    "name_of",
    "one_field_per_name",
    "pick",
    "pick_string_map",
    "pick_strings",
    "pointer",
    "public_default",
    "string_choices",
]

MAX_SERVERS = 5000
MAX_NAME_CHARS = 256

Format = Literal[
    "mcp_registry_server",
    "mcp_registry_list",
    "mcp_bundle_manifest",
    "client_config",
    "vscode_settings",
]
InputKind = Literal["env", "header", "argument", "variable", "user_config"]
ValueType = Literal["string", "number", "boolean", "array"]
Scalar = str | int | float | bool
T = TypeVar("T")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class ConfigInput:
    """One configuration input; ``location`` is a JSON pointer into the source document.

    ``has_fixed_value`` inputs are set by the package itself and belong to no form; ``in_argv``
    inputs end up on a command line, where every local user can read them. ``reason`` says why
    the input is secret or public (``classify``), in words, never with a value.
    """

    name: str
    description: str
    required: bool
    secret: bool
    kind: InputKind
    location: str
    has_fixed_value: bool
    in_argv: bool
    value_type: ValueType = "string"
    reason: str = ""
    title: str = ""
    default: Scalar | tuple[str, ...] | None = None
    choices: tuple[str, ...] = ()
    format: str = ""
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class DeclaredTool:
    """What a package says of one of its tools beyond its name: a description, and an input
    schema where the publisher wrote one (MCPB manifests list names and descriptions; MCP's
    ``inputSchema`` is read when present). The schema is kept as canonical JSON text, so the
    server stays immutable; it is untrusted, and the vault checks it before storing it."""

    name: str
    description: str = ""
    input_schema: str = ""  # canonical JSON of the object, or "" when none was declared


@dataclass(frozen=True)
class ImportedServer:
    """One activation option: a client entry, a bundle, or one package/remote of a server.json."""

    name: str
    strategy: StrategyKind
    transport: str
    inputs: tuple[ConfigInput, ...]
    title: str = ""
    description: str = ""
    version: str = ""
    registry: str = ""
    tools: tuple[str, ...] = ()
    tool_details: tuple[DeclaredTool, ...] = ()  # the tools of `tools` that say more
    roles: tuple[str, ...] = ("service",)
    location: str = ""
    # A local client entry's command line (command, then args), the one value kept: the
    # vault runs it (`toolkits.served`). Kept only when no argument carries an input, so it
    # holds a program and its fixed arguments, never a credential; empty otherwise.
    command: tuple[str, ...] = ()
    # A registry package's launch recipe (`launch_recipe`, canonical JSON): inputs named,
    # values never; "" when the vault cannot run the package.
    launch: str = ""

    @property
    def configurable(self) -> tuple[ConfigInput, ...]:
        return tuple(i for i in self.inputs if not i.has_fixed_value)


@dataclass(frozen=True)
class ImportDiagnostic:
    """``scope`` is a JSON pointer; like every name, it is untrusted public source text."""

    code: str
    scope: str
    message: str


@dataclass(frozen=True)
class SkippedServer:
    """A server left out and why: ``name`` is its name when the entry had a usable one."""

    name: str
    code: str
    scope: str
    message: str


@dataclass(frozen=True)
class ImportResult:
    format: Format
    servers: tuple[ImportedServer, ...]
    skipped: int
    diagnostics: tuple[ImportDiagnostic, ...]
    input_sha256: str
    skipped_servers: tuple[SkippedServer, ...] = ()


class ImportRefused(ValueError):
    """The whole input is refused; ``code`` and ``message`` never hold an input value."""

    def __init__(self, code: str, message: str, input_sha256: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.input_sha256 = input_sha256


class EntryInvalid(ValueError):
    """One entry is not understood; it is skipped, its siblings are not."""

    def __init__(self, scope: str, message: str, code: str = "invalid_entry") -> None:
        super().__init__(message)
        self.scope = scope
        self.message = message
        self.code = code


@dataclass
class Collector:
    servers: list[ImportedServer] = field(default_factory=list)
    diagnostics: list[ImportDiagnostic] = field(default_factory=list)
    skipped_servers: list[SkippedServer] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.skipped_servers)

    def note(self, code: str, scope: str, message: str) -> None:
        self.diagnostics.append(ImportDiagnostic(code, scope, message))

    def skip(self, exc: EntryInvalid, name: str = "") -> None:
        self.skipped_servers.append(SkippedServer(name, exc.code, exc.scope, exc.message))
        self.note(exc.code, exc.scope, exc.message)

    def extend(self, other: Collector) -> None:
        self.servers += other.servers
        self.diagnostics += other.diagnostics
        self.skipped_servers += other.skipped_servers


def pointer(base: str, *parts: str | int) -> str:
    """Append RFC 6901 reference tokens to ``base``."""
    return base + JsonPointer.from_parts(parts).path


def pick(obj: dict[str, Any], keys: tuple[str, ...], kind: type[T], scope: str) -> T | None:
    """The value under any of ``keys`` (schema spellings of one field), type-checked.

    Two spellings with different values are ambiguous and refused, not resolved.
    """
    present = [k for k in keys if k in obj]
    if not present:
        return None
    values = [obj[k] for k in present]
    if any(v != values[0] for v in values[1:]):
        raise EntryInvalid(pointer(scope, present[0]), f"conflicting spellings {present}")
    value = values[0]
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise EntryInvalid(pointer(scope, present[0]), f"expected {kind.__name__}")
    return value


def name_of(value: Any, scope: str) -> str:
    """A usable public name: a non-empty, bounded string without control characters."""
    if not isinstance(value, str) or not value.strip():
        raise EntryInvalid(scope, "name must be a non-empty string")
    if len(value) > MAX_NAME_CHARS or _CONTROL.search(value):
        raise EntryInvalid(scope, f"name longer than {MAX_NAME_CHARS} or holds control chars")
    return value


def pick_strings(obj: dict[str, Any], key: str, scope: str) -> list[str]:
    """`pick` of a list of strings (an argv, say); absent is empty."""
    values = pick(obj, (key,), list, scope) or []
    if not all(isinstance(v, str) for v in values):
        raise EntryInvalid(pointer(scope, key), "expected a list of strings")
    return values


def pick_string_map(obj: dict[str, Any], key: str, scope: str) -> dict[str, str]:
    """`pick` of an object of strings under usable names (an environment, headers)."""
    values = pick(obj, (key,), dict, scope) or {}
    if not all(isinstance(v, str) for v in values.values()):
        raise EntryInvalid(pointer(scope, key), "expected an object of strings")
    for k in values:
        name_of(k, pointer(scope, key, k))
    return values


_PLACEHOLDER_DEFAULT = re.compile(
    r"<[^<>]+>|^your[_ -]|\$\{(?:input|env|user_config)[:.]|^x{3,}$|\.\.\.$", re.I
)


def public_default(value: Any, value_type: ValueType, secret: bool) -> Any:
    """A publisher's default as the form should offer it, or None: never for a secret input,
    never a placeholder (``<YOUR_ID>``, ``your-team``), and typed (``"8080"`` for a number is
    8080; one that does not parse is dropped)."""
    if secret or value is None:
        return None
    if value_type == "array":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(value) if ok else None
    if value_type == "boolean":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        return {"true": True, "false": False}.get(text)
    if value_type == "number":
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            return value
        try:
            number = float(str(value))
        except ValueError:
            return None
        return int(number) if number.is_integer() else number
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return None
    text = str(value)
    return None if _PLACEHOLDER_DEFAULT.search(text) or len(text) > 1024 else text


def string_choices(value: Any, secret: bool) -> tuple[str, ...]:
    """Declared choices as strings (a VS Code ``{label, value}`` option gives its value)."""
    if secret or not isinstance(value, list):
        return ()
    out = []
    for item in value:
        if isinstance(item, dict):
            item = item.get("value")
        if isinstance(item, str | int | float) and not isinstance(item, bool):
            out.append(str(item)[:256])
    return tuple(dict.fromkeys(out))[:256]


def _merge(first: ConfigInput, other: ConfigInput) -> ConfigInput:
    if first.has_fixed_value and not other.has_fixed_value:
        first, other = other, first  # the occurrence a user fills gives the field its place
    secret = first.secret or other.secret
    return replace(
        first,
        description=first.description or other.description,
        required=first.required or (other.required and not other.has_fixed_value),
        secret=secret,
        reason=first.reason if first.secret or not secret else other.reason,
        has_fixed_value=first.has_fixed_value and other.has_fixed_value,
        in_argv=first.in_argv or other.in_argv,
        value_type=first.value_type if first.value_type == other.value_type else "string",
        title=first.title or other.title,
        default=None if secret else (first.default if first.default is not None else other.default),
        choices=() if secret else (first.choices or other.choices),
        format=first.format or other.format,
    )


def one_field_per_name(inputs: Iterable[ConfigInput]) -> tuple[ConfigInput, ...]:
    """One input is one field: occurrences sharing a name (an env var and the same placeholder
    in argv, a variable used twice) merge, secret if any occurrence is, in argv if any is."""
    merged: dict[str, ConfigInput] = {}
    for item in inputs:
        seen = merged.get(item.name)
        merged[item.name] = item if seen is None else _merge(seen, item)
    return tuple(merged.values())
