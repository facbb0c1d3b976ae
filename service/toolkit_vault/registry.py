"""The toolkit registry: every source ends as one `ToolkitDefinition` plus an initializer.

Sources: the built-in reference toolkit `filesystem`, Python entry points in the group
`toolkit_vault.toolkits` (a factory called with no arguments, returning an object with
`definition` and `initialize(config)`), and imported toolkit packages. Schemas are checked
and compiled at registration, so a hostile schema never reaches a request. A factory is
called once per session initialization, so sessions never share toolkit state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from .errors import SchemaRefused, ToolkitNotFound, VaultError
from .protocol import ToolkitDefinition
from .schema import CompiledSchema, compile_schema

if TYPE_CHECKING:
    from .storage import Store

__all__ = [
    "ENTRY_POINT_GROUP",
    "RegisteredToolkit",
    "Toolkit",
    "ToolkitFactory",
    "ToolkitRegistry",
]

ENTRY_POINT_GROUP = "toolkit_vault.toolkits"
log = logging.getLogger(__name__)


class Toolkit(Protocol):
    """What a toolkit plugin provides. `initialize` returns unavailable tool names, if any."""

    @property
    def definition(self) -> ToolkitDefinition | Mapping[str, Any]: ...

    def initialize(self, config: dict[str, Any]) -> Iterable[str] | None: ...


ToolkitFactory = Callable[[], Toolkit]


@dataclass(frozen=True)
class RegisteredToolkit:
    definition: ToolkitDefinition
    schema: CompiledSchema
    factory: ToolkitFactory
    source: str


def coerce_definition(value: ToolkitDefinition | Mapping[str, Any]) -> ToolkitDefinition:
    if isinstance(value, ToolkitDefinition):
        return value.model_copy(update={"configured": False})
    try:
        return ToolkitDefinition.model_validate({**value, "configured": False})
    except (ValidationError, TypeError):
        raise VaultError("the toolkit definition does not match the spec's fields") from None


class ToolkitRegistry:
    def __init__(self) -> None:
        self._toolkits: dict[str, RegisteredToolkit] = {}

    def register(self, factory: ToolkitFactory, source: str) -> RegisteredToolkit:
        definition = coerce_definition(factory().definition)
        if definition.name in self._toolkits:
            raise VaultError(f"toolkit {definition.name!r} is registered twice ({source})")
        schema = compile_schema(definition.config_schema)
        registered = RegisteredToolkit(definition, schema, factory, source)
        self._toolkits[definition.name] = registered
        return registered

    def load_entry_points(self) -> None:
        """Register every installed plugin; a broken one is logged and left out (fail closed)."""
        for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            try:
                self.register(entry.load(), f"entry point {entry.name}")
            except (SchemaRefused, VaultError) as exc:
                log.warning("toolkit entry point %s refused: %s", entry.name, exc.message)
            except Exception as exc:
                log.warning(
                    "toolkit entry point %s failed to load: %s", entry.name, type(exc).__name__
                )

    def get(self, name: str) -> RegisteredToolkit:
        try:
            return self._toolkits[name]
        except KeyError:
            raise ToolkitNotFound("toolkit not found") from None

    def __contains__(self, name: object) -> bool:
        return name in self._toolkits

    def all(self) -> list[RegisteredToolkit]:
        toolkits = self._toolkits  # one snapshot: load_imported swaps the table whole
        return [toolkits[name] for name in sorted(toolkits)]

    def load_imported(self, store: Store) -> None:
        """(Re)register the toolkit packages imported into the store. Built-in and entry-point
        toolkits keep their names: a stored one that clashes or no longer compiles is logged
        and left out (fail closed)."""
        from .imports import PACKAGE_SOURCE, stored_toolkits  # imports builds on this module

        fresh = ToolkitRegistry()
        fresh._toolkits = {
            name: t for name, t in self._toolkits.items() if not t.source.startswith(PACKAGE_SOURCE)
        }
        for factory, source in stored_toolkits(store):
            try:
                fresh.register(factory, source)
            except VaultError as exc:
                log.warning("imported toolkit refused (%s): %s", source, exc.message)
        self._toolkits = fresh._toolkits

    @classmethod
    def default(cls) -> ToolkitRegistry:
        from .filesystem import FilesystemToolkit

        registry = cls()
        registry.register(FilesystemToolkit, "built-in")
        registry.load_entry_points()
        return registry
