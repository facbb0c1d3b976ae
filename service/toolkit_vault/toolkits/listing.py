"""What `toolkits list` shows of each registered toolkit, and the built-in one's line.

The registry holds definitions as the protocol's pydantic models, and importing pydantic
and building its models was a third of a listing's start (issue 53). A vault with no plugin
installed and no imported definition has only the built-in toolkit, whose definition is the
vault's own constant (`sources.BUILT_IN_FIELDS`): no check of the registry's can refuse
it, so `BUILT_IN_LISTED` shows it from those values, and every other listing goes through
the registry, which checks what it registers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit_vault.canonical import canonical_digest
from toolkit_vault.toolkits.sources import BUILT_IN, BUILT_IN_FIELDS, ToolkitSource

if TYPE_CHECKING:
    from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = ["BUILT_IN_LISTED", "ListedToolkit"]


@dataclass(frozen=True)
class ListedToolkit:
    name: str
    alias: str
    category: str
    version: str
    tools: tuple[str, ...]
    schema_digest: str
    source: ToolkitSource

    @classmethod
    def of(cls, toolkit: RegisteredToolkit) -> ListedToolkit:
        """A registered toolkit's line."""
        d = toolkit.definition
        fields = (d.name, d.alias, d.category, d.version, tuple(d.tools))
        return cls(*fields, toolkit.schema_digest, toolkit.source)

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any], source: ToolkitSource) -> ListedToolkit:
        """The line of a definition given as its wire fields, with the model's defaults."""
        alias, category = fields.get("alias", ""), fields.get("category", "")
        version, tools = fields.get("version", "1.0.0"), tuple(fields["tools"])
        digest = canonical_digest(fields.get("schema", {}))
        return cls(fields["name"], alias, category, version, tools, digest, source)


BUILT_IN_LISTED = ListedToolkit.from_fields(BUILT_IN_FIELDS, BUILT_IN)
