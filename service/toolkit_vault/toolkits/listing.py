"""What `toolkits list` shows of each registered toolkit, and the built-in one's line.

The registry holds definitions as the protocol's pydantic models, and importing pydantic
and building its models was a third of a listing's start (issue 53). A vault with no plugin
installed and no imported definition has only the built-in toolkit, whose definition is the
vault's own constant (`sources.BUILT_IN_FIELDS`): no check of the registry's can refuse
it, so `BUILT_IN_LISTED` shows it from those values, and every other listing goes through
the registry, which checks what it registers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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


def _built_in() -> ListedToolkit:
    """The built-in's line, from its plain fields; its version is the definition model's
    default, as the built-in names none (a test holds this line equal to the registry's)."""
    f = BUILT_IN_FIELDS
    fields = (f["name"], f["alias"], f["category"], "1.0.0", tuple(f["tools"]))
    return ListedToolkit(*fields, canonical_digest(f["schema"]), BUILT_IN)


BUILT_IN_LISTED = _built_in()
