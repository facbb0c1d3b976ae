"""Pinning an upstream server's tools: a digest per tool of what a model is shown and
what the vault checks (name, title, description, input and output schemas, annotations),
as SHA-256 of their canonical JSON, and a comparison of two pins that names which tools
were added, removed or changed.

A server can change a tool's description after it was trusted (a "rug pull": the same
`read_file`, now telling the model to send the key elsewhere). The first list's pin is
recorded; a later list is compared with it, and a changed tool is withheld until an
operator accepts it. Only names and digests are compared, so a pin holds no server text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from toolkit_vault.canonical import canonical_json

from .descriptions import ToolDescription

__all__ = ["PinChanges", "compare_pins", "pin_digest", "pin_tools", "tool_digest"]


def tool_digest(tool: ToolDescription) -> str:
    """Hex SHA-256 of the tool's pinned fields in canonical JSON."""
    return hashlib.sha256(canonical_json(tool.as_json())).hexdigest()


def pin_tools(tools: Iterable[ToolDescription]) -> dict[str, str]:
    """Tool name -> its digest."""
    return {tool.name: tool_digest(tool) for tool in tools}


def pin_digest(pin: Mapping[str, str]) -> str:
    """One digest of a whole pin (for an audit line): SHA-256 of its canonical JSON."""
    return hashlib.sha256(canonical_json(dict(pin))).hexdigest()


@dataclass(frozen=True)
class PinChanges:
    """How a list differs from its pin, by tool name (sorted)."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def compare_pins(pinned: Mapping[str, str], current: Mapping[str, str]) -> PinChanges:
    """Which tools `current` added, removed or changed against `pinned`."""
    return PinChanges(
        added=tuple(sorted(current.keys() - pinned.keys())),
        removed=tuple(sorted(pinned.keys() - current.keys())),
        changed=tuple(sorted(n for n in pinned.keys() & current.keys() if pinned[n] != current[n])),
    )
