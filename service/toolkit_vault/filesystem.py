"""The built-in reference toolkit `filesystem`: exactly the spec's example definition.

Its tools are confined to `root_dir`: every path is resolved (symlinks included) and must
stay inside the resolved root, so `..`, absolute paths and symlinks out are refused.
`root_dir` must be an existing directory, which no JSON Schema can say: `check_config`
refuses anything else at configure time with a field-level error, as a schema error does
(pointer and keyword, never the path), so nothing is stored; `initialize` checks again, for
a directory removed since.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from .errors import ConfigInvalid, VaultError
from .protocol import ToolkitDefinition

__all__ = ["DEFINITION", "FilesystemToolkit", "PathRefused"]

DEFINITION = ToolkitDefinition(
    name="filesystem",
    alias="fs",
    description="File I/O toolkit",
    category="io",
    tags=["fs", "files"],
    icon_svg=None,
    schema={
        "type": "object",
        "properties": {
            "root_dir": {"type": "string", "description": "Root directory for file operations"}
        },
        "required": ["root_dir"],
    },
    tools=["read_file", "write_file", "list_dir"],
)


class PathRefused(VaultError):
    """A tool was asked for a path outside the configured root."""


def _refuse(message: str, keyword: str) -> NoReturn:
    raise ConfigInvalid(message, details=[{"pointer": "/root_dir", "keyword": keyword}])


class FilesystemToolkit:
    definition = DEFINITION

    def __init__(self) -> None:
        self._root: Path | None = None

    @staticmethod
    def check_config(config: Mapping[str, Any]) -> None:
        """Refuse a `root_dir` that is not an absolute path to an existing directory."""
        root = Path(config["root_dir"]).expanduser()
        if not root.is_absolute():
            _refuse("root_dir must be an absolute path", "absolute")
        try:
            exists, is_dir = root.exists(), root.is_dir()
        except OSError:  # a parent we may not search: as good as missing, for us
            exists = is_dir = False
        if not exists:
            _refuse("root_dir does not exist: create the directory first", "exists")
        if not is_dir:
            _refuse("root_dir is not a directory", "directory")

    def initialize(self, config: dict[str, Any]) -> list[str] | None:
        self.check_config(config)
        self._root = Path(config["root_dir"]).expanduser().resolve()
        return None

    @property
    def root(self) -> Path:
        if self._root is None:
            raise VaultError("the filesystem toolkit is not configured")
        return self._root

    def _inside(self, relative: str) -> Path:
        candidate = (self.root / relative).resolve()
        if candidate != self.root and not candidate.is_relative_to(self.root):
            raise PathRefused("path is outside root_dir")
        return candidate

    def read_file(self, path: str) -> str:
        return self._inside(path).read_text(encoding="utf-8")

    def write_file(self, path: str, content: str) -> None:
        target = self._inside(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")

    def list_dir(self, path: str = ".") -> list[str]:
        return sorted(entry.name for entry in self._inside(path).iterdir())
