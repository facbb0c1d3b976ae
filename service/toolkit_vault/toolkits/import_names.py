"""Whose name an imported server takes: the checks `imports` makes before it stores one.

Imports are run by the hundred (a registry listing, every client config of a team), so a
name is checked as a person reads it: one that differs only in case from a registered
toolkit's is refused (`Filesystem` beside the built-in `filesystem`), a built-in or plugin
toolkit's name is never taken, and an import never replaces a toolkit imported from
another source without being asked to (`--replace`), since the sessions configured for
the one would silently run the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from toolkit_vault.toolkits.registry import RegisteredToolkit, SourceKind

if TYPE_CHECKING:
    from toolkit_package.selection import Selected

__all__ = ["REGISTRY_FORMATS", "Skip", "check_name", "same_source"]


class Skip(Exception):
    """A server an import leaves out: its one-word `code` and a message saying what to do."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


REGISTRY_FORMATS = frozenset({"mcp_registry_server", "mcp_registry_list"})


def same_source(earlier: RegisteredToolkit, fmt: str, source_name: str) -> bool:
    """Whether an import of `source_name` (as its input names it) in format `fmt` is the
    same source as the toolkit stored under its name: a registry server, whose name is its
    identity (reverse DNS), updated. A client config's or a bundle's name is a local label,
    so another entry or file under it is another source (so is an edited one)."""
    package = earlier.definition.config_schema.get("x-toolkit-package", {})
    stored_format = package.get("format") if isinstance(package, Mapping) else None
    return (
        fmt in REGISTRY_FORMATS
        and stored_format in REGISTRY_FORMATS
        and source_name == earlier.definition.name
    )


def check_name(
    name: str,
    digest: str,
    chosen: Selected,
    fmt: str,
    taken: Mapping[str, RegisteredToolkit],
    replace: bool,
) -> str | None:
    """`_Skip` when the name is taken: by a built-in or plugin toolkit, by any toolkit whose
    name differs in case only (`Filesystem` beside `filesystem`: a person cannot tell them
    apart), or by an import from another source unless `replace`. Returns the replaced
    toolkit's digest when `replace` takes another source's name."""
    earlier = taken.get(name.casefold())
    if earlier is None:
        return None
    rename = f"rename it with --rename {chosen.source_name[:80]}=NEW-NAME"
    if earlier.definition.name != name:
        raise Skip(
            "name_taken",
            f"the name differs only in case from the {earlier.source} toolkit "
            f"{earlier.definition.name[:80]!r}: {rename}",
        )
    if earlier.source.kind is not SourceKind.PACKAGE:
        raise Skip("name_taken", f"the name is taken by the {earlier.source} toolkit: {rename}")
    if earlier.source.name == digest or same_source(earlier, fmt, chosen.source_name):
        return None
    if not replace:
        raise Skip(
            "name_imported",
            f"a toolkit from another source is imported under this name ({earlier.source}): "
            f"replace it with --replace, or {rename}",
        )
    return earlier.source.name
