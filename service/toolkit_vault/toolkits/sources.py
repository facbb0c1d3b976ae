"""Where a registered toolkit comes from, and the built-in one's definition as plain values.

Kept apart from the registry, which holds definitions as the protocol's pydantic models:
a listing of a vault whose only toolkit is the built-in one shows it from `BUILT_IN_FIELDS`
without importing pydantic (`listing`), and `filesystem` validates the same values into
its model, so the two cannot say different things.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["BUILT_IN", "BUILT_IN_FIELDS", "ENTRY_POINT_GROUP", "SourceKind", "ToolkitSource"]

ENTRY_POINT_GROUP = "toolkit_vault.toolkits"


class SourceKind(StrEnum):
    BUILT_IN = "built-in"
    ENTRY_POINT = "entry point"
    PACKAGE = "package"  # imported with `toolkits import`, stored in the vault


@dataclass(frozen=True)
class ToolkitSource:
    """Where a registered toolkit comes from: its kind, and which one (an entry point's
    name, an imported package's digest). Its text is what lists and reports show."""

    kind: SourceKind
    name: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.name}" if self.name else str(self.kind)


BUILT_IN = ToolkitSource(SourceKind.BUILT_IN)

# The built-in reference toolkit `filesystem`: exactly the spec's example definition, with
# the wire's field names (`schema`).
BUILT_IN_FIELDS: dict[str, Any] = {
    "name": "filesystem",
    "alias": "fs",
    "description": "File I/O toolkit",
    "category": "io",
    "tags": ["fs", "files"],
    "icon_svg": None,
    "schema": {
        "type": "object",
        "properties": {
            "root_dir": {"type": "string", "description": "Root directory for file operations"}
        },
        "required": ["root_dir"],
    },
    "tools": ["read_file", "write_file", "list_dir"],
}
