"""MCP names for the vault's tools: `<toolkit>__<tool>`, held to the rule every major
client's function names follow (`[A-Za-z0-9_-]`, at most 64 characters).

A name that already follows the rule is used as it is, so most names read as written. One
that does not (an imported toolkit named `io.github.owner/server#package-0`, a long tool
name) has its other characters replaced by `_`, is cut to fit, and ends in a short hash of
the whole original, so it is stable from one list to the next and two originals that
differ only in the replaced characters still differ. Names used as they are are placed
first; a hashed name that lands on one already taken takes a longer hash, so no two tools
ever share a name in one list.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

__all__ = ["MAX_NAME_CHARS", "SEPARATOR", "ToolNames", "mcp_name"]

MAX_NAME_CHARS = 64
SEPARATOR = "__"
_FOLLOWS_RULE = re.compile(r"[A-Za-z0-9_-]{1,64}", re.A)
_OUTSIDE_RULE = re.compile(r"[^A-Za-z0-9_-]", re.A)
_HASH_DIGITS = (8, 16, 32, 64)


def mcp_name(toolkit: str, tool: str) -> str:
    """The name `tool` of `toolkit` goes by over MCP (before collisions are settled)."""
    original = f"{toolkit}{SEPARATOR}{tool}"
    return original if _FOLLOWS_RULE.fullmatch(original) else _hashed(original)


def _hashed(original: str, digits: int = _HASH_DIGITS[0]) -> str:
    suffix = "_" + hashlib.sha256(original.encode()).hexdigest()[:digits]
    return _OUTSIDE_RULE.sub("_", original)[: MAX_NAME_CHARS - len(suffix)] + suffix


class ToolNames:
    """The names of one list: (toolkit, tool) to MCP name and back, none shared."""

    def __init__(self, tools: Iterable[tuple[str, str]], reserved: Iterable[str] = ()) -> None:
        self._by_name: dict[str, tuple[str, str]] = {}
        self._names: dict[tuple[str, str], str] = {}
        taken = set(reserved)
        pending = []
        for pair in dict.fromkeys(tools):
            name = mcp_name(*pair)
            if name == f"{pair[0]}{SEPARATOR}{pair[1]}" and name not in taken:  # as written
                self._place(pair, name, taken)
            else:
                pending.append(pair)
        for pair in sorted(pending):  # the order they are met in changes no name
            for digits in _HASH_DIGITS:
                name = _hashed(f"{pair[0]}{SEPARATOR}{pair[1]}", digits)
                if name not in taken:
                    self._place(pair, name, taken)
                    break
            else:  # sixty-four hex digits of SHA-256 shared: not a case to plan for
                raise ValueError("two tools share a name")

    def _place(self, pair: tuple[str, str], name: str, taken: set[str]) -> None:
        taken.add(name)
        self._by_name[name] = pair
        self._names[pair] = name

    def name(self, toolkit: str, tool: str) -> str:
        return self._names[(toolkit, tool)]

    def tool(self, name: str) -> tuple[str, str] | None:
        """The (toolkit, tool) `name` stands for in this list; None for no tool of it."""
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self._names)
