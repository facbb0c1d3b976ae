"""The built-in reference toolkit `filesystem`: exactly the spec's example definition.

Root policy (`check_config`, at configure; `initialize` checks again, for a resume). A
`root_dir` is an absolute path (`~` is the vault user's home), resolved with its symlinks
followed, and the resolved directory must exist and be allowed. A root hands everything
beneath it to whoever holds the toolkit, so it is refused when it is, lies in or holds:
- a system directory: `/bin`, `/boot`, `/dev`, `/etc`, `/lib*`, `/proc`, `/root`, `/run`,
  `/sbin`, `/sys`, `/usr`, and the system's state under `/var` (`backups`, `cache`, `lib`,
  `log`, `mail`, `spool`); so `/` and `/var` themselves too;
- a home directory (it is or holds one: the vault user's home, `/home` and each directory
  directly in it; a project inside a home is fine);
- a hidden directory, one whose name begins with `.`, anywhere on its path (`~/.ssh`,
  `~/.aws`, `~/.gnupg`, `~/.config`, a repository's `.git`): where programs keep their
  state and credentials, never a workspace.
When `TOOLKIT_VAULT_FILESYSTEM_ROOTS` is set (absolute paths separated by `os.pathsep`,
each resolved too), the root must also be one of them or lie in one: the list narrows what
is allowed and never reopens a refused path; set but empty, it allows no root.

What exists must not show through the errors: a refused root, a missing one, a file, and
one under a directory the vault cannot search all give one error, keyword `allowed`, like a
schema error (pointer and keyword, never the path), so nothing is stored. Only a relative
path is told apart (`absolute`): that depends on the text alone.

The tools are confined to the root: a path that climbs out of it as written (absolute, or
`..` past the root) is refused before anything on disk is looked at, and one whose resolved
form leaves the resolved root (a symlink out) is refused too; every failure of a tool,
outside the root or a missing file inside it, is one `PathRefused` that names no path.

Called through the vault (`call_tool`, the `tool/call` extension), a tool's failure is an
`is_error` result with that same sentence: a path outside the root and a missing file look
alike to the agent too, and neither echoes the path. A read is bounded (`MAX_READ_BYTES`),
a listing too (`MAX_ENTRIES`), so one call cannot pull a disk into the vault's memory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from toolkit_vault.errors import ConfigInvalid, VaultError
from toolkit_vault.plugin import CallContext, Tool, ToolResult
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.toolkits.sources import BUILT_IN_FIELDS

__all__ = [
    "DEFINITION",
    "MAX_ENTRIES",
    "MAX_READ_BYTES",
    "NOT_ALLOWED",
    "ROOTS_ENV",
    "TOOLS",
    "UNAVAILABLE",
    "FilesystemToolkit",
    "PathRefused",
    "ToolFailed",
    "allowed_root",
]

DEFINITION = ToolkitDefinition.model_validate(BUILT_IN_FIELDS)

_PATH = {"type": "string", "minLength": 1, "maxLength": 4096}
_RELATIVE = "A path relative to root_dir"
TOOLS = (
    Tool(
        "read_file",
        "Read a UTF-8 text file under root_dir.",
        {
            "type": "object",
            "properties": {"path": {**_PATH, "description": _RELATIVE}},
            "required": ["path"],
            "additionalProperties": False,
        },
        annotations={"readOnlyHint": True},
    ),
    Tool(
        "write_file",
        "Write a UTF-8 text file under root_dir, replacing it; missing directories are made.",
        {
            "type": "object",
            "properties": {
                "path": {**_PATH, "description": _RELATIVE},
                "content": {"type": "string", "description": "The file's new text"},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
        annotations={"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
    ),
    Tool(
        "list_dir",
        "List the names in a directory under root_dir (the root itself by default).",
        {
            "type": "object",
            "properties": {"path": {**_PATH, "description": _RELATIVE, "default": "."}},
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {"entries": {"type": "array", "items": {"type": "string"}}},
            "required": ["entries"],
        },
        annotations={"readOnlyHint": True},
    ),
)
MAX_READ_BYTES = 1 << 20
MAX_ENTRIES = 10_000
ROOTS_ENV = "TOOLKIT_VAULT_FILESYSTEM_ROOTS"
NOT_ALLOWED = "root_dir is not an allowed directory"
UNAVAILABLE = "path is not available under root_dir"
_SYSTEM = frozenset({"bin", "boot", "dev", "etc", "proc", "root", "run", "sbin", "sys", "usr"})
_SYSTEM_STATE = frozenset({"backups", "cache", "lib", "log", "mail", "spool"})  # in /var
_HOMES = Path("/home")


class ToolFailed(VaultError):
    """A tool could not do what it was asked; its message names no path and no content."""


class PathRefused(ToolFailed):
    """A tool's path is outside the configured root, or not there: one error for both."""


def _refuse(message: str, keyword: str) -> NoReturn:
    raise ConfigInvalid(message, details=[{"pointer": "/root_dir", "keyword": keyword}])


def _system(root: Path) -> bool:
    """Whether the resolved `root` is, lies in or holds a system directory."""
    parts = root.parts[1:]
    if not parts:
        return True  # `/` holds every one
    top = parts[0]
    if top in _SYSTEM or top.startswith("lib"):
        return True
    return top == "var" and (len(parts) == 1 or parts[1] in _SYSTEM_STATE)


def _home(root: Path) -> bool:
    """Whether the resolved `root` is or holds a home directory."""
    homes = _HOMES.resolve()
    if homes.is_relative_to(root) or root.parent == homes:
        return True
    own = Path(os.path.expanduser("~"))
    return own.is_absolute() and own.resolve().is_relative_to(root)


def _hidden(root: Path) -> bool:
    """Whether a directory on the resolved `root`'s path is hidden (`.ssh`, `.git`)."""
    return any(part.startswith(".") for part in root.parts[1:])


def _listed(root: Path) -> bool:
    """Whether the operator's allow-list, if there is one, holds the resolved `root`."""
    listed = os.environ.get(ROOTS_ENV)
    if listed is None:
        return True
    entries = [Path(entry) for entry in listed.split(os.pathsep)]
    return any(e.is_absolute() and root.is_relative_to(e.resolve()) for e in entries)


def allowed_root(root_dir: str) -> Path:
    """`root_dir` resolved, if it is an allowed, existing directory; else `ConfigInvalid`
    (`absolute`, or `allowed` whatever else is wrong, so the error reveals nothing)."""
    try:
        given = Path(root_dir).expanduser()
    except RuntimeError:  # `~name` of no user
        _refuse(NOT_ALLOWED, "allowed")
    if not given.is_absolute():
        _refuse("root_dir must be an absolute path", "absolute")
    try:
        root = given.resolve()
        refused = _system(root) or _home(root) or _hidden(root) or not _listed(root)
        usable = not refused and root.is_dir()
    except (OSError, RuntimeError, ValueError):  # unsearchable parent, symlink loop, NUL
        usable = False
    if not usable:
        _refuse(NOT_ALLOWED, "allowed")
    return root


class FilesystemToolkit:
    definition = DEFINITION
    tools = TOOLS

    def __init__(self) -> None:
        self._root: Path | None = None

    @staticmethod
    def check_config(config: Mapping[str, Any]) -> None:
        """Refuse a `root_dir` the root policy does not allow (see the module's docstring)."""
        allowed_root(config["root_dir"])

    def initialize(self, config: dict[str, Any]) -> list[str] | None:
        self._root = allowed_root(config["root_dir"])
        return None

    @property
    def root(self) -> Path:
        if self._root is None:
            raise VaultError("the filesystem toolkit is not configured")
        return self._root

    def _inside(self, relative: str) -> Path:
        """The resolved path, if it stays in the root. Climbing out as written is refused
        before the disk is looked at: resolving `../x/../root/f` would follow a symlink `x`
        outside, and whether that succeeds would tell what is there."""
        root = self.root
        written = os.path.normpath(relative)
        if os.path.isabs(written) or written.split(os.sep)[0] == os.pardir:
            raise PathRefused(UNAVAILABLE)
        try:
            candidate = (root / written).resolve()
        except (OSError, RuntimeError, ValueError):
            raise PathRefused(UNAVAILABLE) from None
        if not candidate.is_relative_to(root):
            raise PathRefused(UNAVAILABLE)
        return candidate

    def read_file(self, path: str) -> str:
        target = self._inside(path)
        try:
            with target.open("rb") as handle:
                data = handle.read(MAX_READ_BYTES + 1)
        except OSError:
            raise PathRefused(UNAVAILABLE) from None
        if len(data) > MAX_READ_BYTES:
            raise ToolFailed(f"the file is larger than {MAX_READ_BYTES} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolFailed("the file is not UTF-8 text") from None

    def write_file(self, path: str, content: str) -> None:
        target = self._inside(path)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, which JSON text can carry
            raise ToolFailed("the content is not valid Unicode text") from None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError:
            raise PathRefused(UNAVAILABLE) from None

    def list_dir(self, path: str = ".") -> list[str]:
        target = self._inside(path)
        names: list[str] = []
        try:
            with os.scandir(target) as entries:
                for entry in entries:
                    if len(names) == MAX_ENTRIES:
                        raise ToolFailed(f"the directory holds more than {MAX_ENTRIES} entries")
                    names.append(entry.name)
        except OSError:
            raise PathRefused(UNAVAILABLE) from None
        return sorted(names)

    def call_tool(
        self, name: str, arguments: Mapping[str, Any], context: CallContext
    ) -> ToolResult:
        """Run one tool for the vault. The engine checked `arguments` against the tool's input
        schema already; they are looked at again here, as a toolkit must not trust its caller.
        A failure is an `is_error` result naming no path; a call already cancelled or late
        touches nothing."""
        if context.cancelled.is_set() or time.monotonic() >= context.deadline:
            return ToolResult.text("the call was cancelled before it ran", is_error=True)
        try:
            if name == "read_file":
                return ToolResult.text(self.read_file(_text(arguments, "path")))
            if name == "write_file":
                path, content = _text(arguments, "path"), _text(arguments, "content")
                self.write_file(path, content)
                return ToolResult.text("written")
            if name == "list_dir":
                listed = {"entries": self.list_dir(_text(arguments, "path", "."))}
                return ToolResult(
                    content=({"type": "text", "text": json.dumps(listed)},),
                    structured_content=listed,
                )
        except ToolFailed as exc:
            return ToolResult.text(exc.message, is_error=True)
        return ToolResult.text("the filesystem toolkit has no such tool", is_error=True)


def _text(arguments: Mapping[str, Any], name: str, default: str | None = None) -> str:
    value = arguments.get(name, default)
    if not isinstance(value, str):
        raise ToolFailed(f"argument {name!r} must be text")
    return value
