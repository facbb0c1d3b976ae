"""The toolkit registry: every source ends as one `ToolkitDefinition` plus an initializer.

Sources: the built-in reference toolkit `filesystem`, Python entry points in the group
`toolkit_vault.toolkits`, and imported toolkit packages. An entry point names a factory
called with no arguments; what it returns has one of two shapes: a single toolkit
(`definition` and `initialize(config)`) or the spec's `ToolkitPlugin` serving many toolkits
(`_list_toolkits` gives their definitions; each is run through `plugin.SpecToolkit`).
An entry point's schema is checked and compiled at registration, so a hostile schema
never reaches a request; an imported toolkit's was checked when it was imported, and its
row is authenticated each time it is loaded, so it compiles when a request first needs it
(a vault of a registry's 472 toolkits would otherwise compile them all in every process).
A factory is called once per session initialization, so sessions never share toolkit state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from importlib.metadata import entry_points
from typing import Any, Protocol

from pydantic import ValidationError

from toolkit_vault.errors import SchemaRefused, ToolkitNotFound, VaultError
from toolkit_vault.plugin import SpecToolkit, is_spec_plugin, listed_definitions
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.schema import CompiledSchema, compile_schema

__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "RegisteredToolkit",
    "SourceKind",
    "Toolkit",
    "ToolkitFactory",
    "ToolkitRegistry",
    "ToolkitSource",
]

ENTRY_POINT_GROUP = "toolkit_vault.toolkits"
log = logging.getLogger(__name__)


class Toolkit(Protocol):
    """What a toolkit plugin provides. `initialize` returns unavailable tool names, if any.

    A toolkit may also have `set_push_callback(fn)`: the vault then hands it a callback bound
    to the one session and toolkit it serves (`events.EventGate`).
    """

    @property
    def definition(self) -> ToolkitDefinition | Mapping[str, Any]: ...

    def initialize(self, config: dict[str, Any]) -> Iterable[str] | None: ...


ToolkitFactory = Callable[[], Toolkit]


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


@dataclass(frozen=True)
class RegisteredToolkit:
    definition: ToolkitDefinition
    factory: ToolkitFactory
    source: ToolkitSource
    # What the schema cannot say, checked at configure before anything is stored; raises
    # ConfigInvalid with field-level details (the built-in filesystem: its root policy).
    check: Callable[[Mapping[str, Any]], None] | None = None

    @cached_property
    def schema(self) -> CompiledSchema:
        """The checked, compiled schema (raises SchemaRefused): made once, when first needed."""
        return compile_schema(self.definition.config_schema)

    def listed(self, configured: bool) -> tuple[ToolkitDefinition, str]:
        """The definition as a list shows it, `configured` or not, and its JSON: made once,
        as a list of many toolkits would otherwise copy and serialize each every time."""
        return self._listed[configured]

    @cached_property
    def _listed(self) -> tuple[tuple[ToolkitDefinition, str], tuple[ToolkitDefinition, str]]:
        shown = [self.definition.model_copy(update={"configured": c}) for c in (False, True)]
        unconfigured, configured = ((d, d.model_dump_json(by_alias=True)) for d in shown)
        return unconfigured, configured


def coerce_definition(value: ToolkitDefinition | Mapping[str, Any]) -> ToolkitDefinition:
    if isinstance(value, ToolkitDefinition):
        return value.model_copy(update={"configured": False})
    try:
        return ToolkitDefinition.model_validate({**value, "configured": False})
    except (ValidationError, TypeError):
        raise VaultError("the toolkit definition does not match the spec's fields") from None


def _spec_factory(
    plugin_factory: Callable[[], Any], definition: ToolkitDefinition
) -> ToolkitFactory:
    def factory() -> Toolkit:
        return SpecToolkit(plugin_factory, definition)

    return factory


class ToolkitRegistry:
    def __init__(self) -> None:
        self._toolkits: dict[str, RegisteredToolkit] = {}

    def register(
        self,
        factory: ToolkitFactory,
        source: ToolkitSource,
        check: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> RegisteredToolkit:
        """Register a single-toolkit factory."""
        return self._add(coerce_definition(factory().definition), factory, source, check)

    def register_plugin(
        self, factory: Callable[[], Any], source: ToolkitSource
    ) -> list[RegisteredToolkit]:
        """Register what an entry point names, in either shape. A spec plugin's toolkits are
        registered one by one: one refused (bad schema, name taken) leaves the others in."""
        sample = factory()
        if not is_spec_plugin(sample):
            return [self._add(coerce_definition(sample.definition), factory, source)]
        registered = []
        for listed in listed_definitions(sample):
            definition = coerce_definition(listed)
            try:
                registered.append(self._add(definition, _spec_factory(factory, definition), source))
            except VaultError as exc:
                log.warning("toolkit %s of %s refused: %s", definition.name, source, exc.message)
        return registered

    def _add(
        self,
        definition: ToolkitDefinition,
        factory: ToolkitFactory,
        source: ToolkitSource,
        check: Callable[[Mapping[str, Any]], None] | None = None,
        *,
        compile_now: bool = True,
    ) -> RegisteredToolkit:
        if definition.name in self._toolkits:
            raise VaultError(f"toolkit {definition.name!r} is registered twice ({source})")
        registered = RegisteredToolkit(definition, factory, source, check)
        if compile_now:
            registered.schema  # noqa: B018 (raises SchemaRefused: then it is not registered)
        self._toolkits[definition.name] = registered
        return registered

    def load_entry_points(self) -> None:
        """Register every installed plugin; a broken one is logged and left out (fail closed)."""
        for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            try:
                self.register_plugin(
                    entry.load(), ToolkitSource(SourceKind.ENTRY_POINT, entry.name)
                )
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

    def load_imported(self, stored: Iterable[tuple[ToolkitFactory, ToolkitSource]]) -> None:
        """(Re)register the toolkit packages imported into the store (`imports.stored_toolkits`).
        Built-in and entry-point toolkits keep their names: a stored one that clashes is logged
        and left out (fail closed). One unchanged since the last load keeps its compiled schema;
        one this release no longer compiles is refused, naming why, by the first request that
        needs it."""
        fresh = ToolkitRegistry()
        fresh._toolkits = {
            name: t for name, t in self._toolkits.items() if t.source.kind is not SourceKind.PACKAGE
        }
        for factory, source in stored:
            try:
                definition = coerce_definition(factory().definition)
                known = self._toolkits.get(definition.name)
                if known is not None and (known.source, known.definition) == (source, definition):
                    fresh._toolkits[definition.name] = known
                    continue
                fresh._add(definition, factory, source, compile_now=False)
            except VaultError as exc:
                log.warning("imported toolkit refused (%s): %s", source, exc.message)
        self._toolkits = fresh._toolkits

    @classmethod
    def default(cls) -> ToolkitRegistry:
        from toolkit_vault.toolkits.filesystem import FilesystemToolkit

        registry = cls()
        registry.register(FilesystemToolkit, BUILT_IN, FilesystemToolkit.check_config)
        registry.load_entry_points()
        return registry
