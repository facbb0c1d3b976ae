"""Allowances: the toolkits and tools an operator narrowed a principal to.

A principal nobody narrowed has no allowance: it may call every tool of the toolkits
configured for its session or itself. An allowance narrows that to whole toolkits and
single tools, as Docker's MCP gateway filters tools and a Vault policy narrows paths; it
never widens anything (a tool it names is still called only once configured). One
allowance may name nothing at all: that principal calls no tool.

This module is the rule alone, pure and small, so the one check every list and call makes
(`permits`) can be read at a glance. The state lives in the verified audit chain as
`allowance_set` and `allowance_removed` events (`store.ledger.ChainState.allowances`);
`core.allowances` writes and reads it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from toolkit_vault.errors import VaultError
from toolkit_vault.store.ledger import Allowed, ChainState

__all__ = ["MAX_ENTRIES", "NAME_CHARS", "ToolAllowance", "allowance_in", "parse_tool"]

MAX_ENTRIES = 100  # toolkits and tools one allowance names: its event stays small
NAME_CHARS = 200  # characters of a toolkit's or a tool's name in an allowance


def _name(text: Any, what: str) -> str:
    if not isinstance(text, str) or not text or len(text) > NAME_CHARS:
        raise VaultError(f"a {what} name is 1 to {NAME_CHARS} characters")
    if not text.isprintable():
        raise VaultError(f"a {what} name holds no control character")
    return text


def parse_tool(text: str) -> tuple[str, str]:
    """`TOOLKIT/TOOL` as typed on the command line, split at its last `/` (a toolkit's
    name may hold one, as registry names do; a tool's name, as MCP names them, does not)."""
    toolkit, slash, tool = text.rpartition("/")
    if not slash or not toolkit or not tool:
        raise VaultError(f"a tool is named TOOLKIT/TOOL (filesystem/read_file), not {text[:80]!r}")
    return toolkit, tool


@dataclass(frozen=True)
class ToolAllowance:
    """What a narrowed principal may call: every tool of `toolkits`, and each of `tools`
    (toolkit, tool)."""

    toolkits: frozenset[str] = frozenset()
    tools: frozenset[tuple[str, str]] = frozenset()
    _shown: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shown = self.toolkits | {toolkit for toolkit, _ in self.tools}
        object.__setattr__(self, "_shown", shown)

    def permits(self, toolkit: str, tool: str) -> bool:
        """Whether a call of `tool` of `toolkit` is allowed: the toolkit whole, or the tool."""
        return toolkit in self.toolkits or (toolkit, tool) in self.tools

    def shows(self, toolkit: str) -> bool:
        """Whether `toolkit` is one this principal may use at all (some tool of it)."""
        return toolkit in self._shown

    @classmethod
    def of(
        cls, toolkits: Iterable[str] = (), tools: Iterable[tuple[str, str]] = ()
    ) -> ToolAllowance:
        """An allowance from names as an operator gave them, each checked (VaultError
        names what is wrong); a tool of a toolkit allowed whole is dropped as said already."""
        whole = frozenset(_name(t, "toolkit") for t in toolkits)
        single = frozenset(
            (_name(toolkit, "toolkit"), _name(tool, "tool"))
            for toolkit, tool in tools
            if toolkit not in whole
        )
        if len(whole) + len(single) > MAX_ENTRIES:
            raise VaultError(f"an allowance names at most {MAX_ENTRIES} toolkits and tools")
        return cls(whole, single)

    @classmethod
    def from_allowed(cls, allowed: Allowed) -> ToolAllowance:
        """The allowance the verified chain holds (`ChainState.allowances`)."""
        return cls(*allowed)

    def as_details(self) -> dict[str, Any]:
        """The `allowance_set` event's details (besides `principal_id`), as the chain's
        state reads them back (`store.ledger.allowed_of`)."""
        return {
            "allowed_toolkits": sorted(self.toolkits),
            "allowed_tools": [list(pair) for pair in sorted(self.tools)],
        }

    def as_json(self) -> dict[str, Any]:
        """The documented shape (`allowances show --json`, `/v1/allowances`)."""
        return {
            "toolkits": sorted(self.toolkits),
            "tools": [{"toolkit": t, "tool": name} for t, name in sorted(self.tools)],
        }

    def said(self) -> str:
        """In words, for a table or a page: `filesystem (every tool), github/list_issues`;
        `nothing` for an allowance that names nothing."""
        parts = [f"{t} (every tool)" for t in sorted(self.toolkits)]
        parts += [f"{t}/{name}" for t, name in sorted(self.tools)]
        return ", ".join(parts) or "nothing"


def allowance_in(state: ChainState, principal_id: str) -> ToolAllowance | None:
    """The principal's allowance as the verified chain has it; None: not narrowed."""
    allowed = state.allowances.get(principal_id)
    return None if allowed is None else ToolAllowance.from_allowed(allowed)
