"""How a package reaches the host (`StrategyKind`), apart from the package model: what
reads an imported toolkit back (`imported`, the vault's registry) needs the kind, not the
model's pydantic classes, which cost a CLI command that lists toolkits about 30 ms
(issue 53). `model` re-exports it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["StrategyKind"]


class StrategyKind(StrEnum):
    """How a package reaches the host. An acquisition form (a CLI pack, say) is a composition
    choice, never an extra value here."""

    REMOTE_MCP = "remote_mcp"
    LOCAL_MCP = "local_mcp"
    NATIVE_ADAPTER = "native_adapter"
    CONFIGURATION_RECIPE = "configuration_recipe"
    RESEARCH_SKILL = "research_skill"
