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

Tools: each registered toolkit has a `Tool` for every name its definition lists
(`tool_declarations`): a single toolkit declares them as its `tools` attribute, a spec
plugin through `_list_tools`, an imported one from its package. Their input schemas are
checked and compiled with the config schema, so a hostile one refuses the toolkit at
registration, and the engine validates a call's arguments with `input_schema(name)`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from pydantic import ValidationError

from toolkit_vault.errors import SchemaRefused, ToolkitNotFound, VaultError
from toolkit_vault.installed import group
from toolkit_vault.plugin import (
    SpecToolkit,
    Tool,
    declared_tools,
    is_spec_plugin,
    listed_definitions,
)
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.schema import CompiledSchema, compile_schema, schema_digest
from toolkit_vault.toolkits.sources import BUILT_IN, ENTRY_POINT_GROUP, SourceKind, ToolkitSource
from toolkit_vault.toolkits.tool_declarations import compile_tool_schemas, complete_tools

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

log = logging.getLogger(__name__)


class Toolkit(Protocol):
    """What a toolkit plugin provides. `initialize` returns unavailable tool names, if any.

    A toolkit may also have `set_push_callback(fn)`: the vault then hands it a callback bound
    to the one session and toolkit it serves (`events.EventGate`); `tools` (a sequence of
    `plugin.Tool`) to declare its tools' schemas; and `call_tool(name, arguments, context)`
    to answer calls (docs/plugins.md).
    """

    @property
    def definition(self) -> ToolkitDefinition | Mapping[str, Any]: ...

    def initialize(self, config: dict[str, Any]) -> Iterable[str] | None: ...


ToolkitFactory = Callable[[], Toolkit]


@dataclass(frozen=True)
class RegisteredToolkit:
    definition: ToolkitDefinition
    factory: ToolkitFactory
    source: ToolkitSource
    # What the schema cannot say, checked at configure before anything is stored; raises
    # ConfigInvalid with field-level details (the built-in filesystem: its root policy).
    check: Callable[[Mapping[str, Any]], None] | None = None
    # Given: the tools the plugin declared; kept: one for every name the definition lists
    # (raises ToolsRefused when they contradict it).
    tools: tuple[Tool, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tools", complete_tools(self.definition, self.tools))

    @cached_property
    def schema(self) -> CompiledSchema:
        """The checked, compiled schema (raises SchemaRefused): made once, when first needed."""
        return compile_schema(self.definition.config_schema)

    @cached_property
    def schema_digest(self) -> str:
        """The config schema's digest, as `schema.digest` would give it, without compiling
        the schema: a listing shows it and needs no validator (nor jsonschema, issue 53)."""
        if "schema" in self.__dict__:
            return self.schema.digest
        return schema_digest(self.definition.config_schema)

    def tool(self, name: str) -> Tool | None:
        """The tool of that name, or None when the definition lists no such tool."""
        return self._tools_by_name.get(name)

    @cached_property
    def _tools_by_name(self) -> Mapping[str, Tool]:
        return {tool.name: tool for tool in self.tools}

    def input_schema(self, name: str) -> CompiledSchema:
        """The compiled input schema of a listed tool (KeyError for another name)."""
        return self._input_schemas[name]

    @cached_property
    def _input_schemas(self) -> Mapping[str, CompiledSchema]:
        """Every tool's checked, compiled input schema (raises SchemaRefused), made once."""
        return compile_tool_schemas(self.tools)

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
    plugin_factory: Callable[[], Any], definition: ToolkitDefinition, tools: Iterable[Tool]
) -> ToolkitFactory:
    checked = tuple(tools)

    def factory() -> Toolkit:
        return SpecToolkit(plugin_factory, definition, checked)

    return factory


def _declared(toolkit: object) -> tuple[object, ...]:
    """A single toolkit's declared tools (its `tools` attribute), none when it has none."""
    declared = getattr(toolkit, "tools", ())
    if isinstance(declared, (str, bytes, Mapping)) or not isinstance(declared, Iterable):
        raise VaultError("a toolkit's tools attribute is not a sequence of tools")
    return tuple(declared)


class ToolkitRegistry:
    def __init__(self) -> None:
        self._toolkits: dict[str, RegisteredToolkit] = {}

    def register(
        self,
        factory: ToolkitFactory,
        source: ToolkitSource,
        check: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> RegisteredToolkit:
        """Register a single-toolkit factory. The built-in toolkit's schemas are the vault's
        own (its tests compile them): they compile when a request first needs them, as an
        imported toolkit's do, so a process that only lists toolkits never loads the
        validator; every other source's are checked and compiled here."""
        sample = factory()
        definition = coerce_definition(sample.definition)
        compile_now = source != BUILT_IN
        tools = _declared(sample)
        return self._add(definition, factory, source, check, tools=tools, compile_now=compile_now)

    def register_plugin(
        self, factory: Callable[[], Any], source: ToolkitSource
    ) -> list[RegisteredToolkit]:
        """Register what an entry point names, in either shape. A spec plugin's toolkits are
        registered one by one: one refused (bad schema, name taken) leaves the others in."""
        sample = factory()
        if not is_spec_plugin(sample):
            definition = coerce_definition(sample.definition)
            return [self._add(definition, factory, source, tools=_declared(sample))]
        registered = []
        declared = declared_tools(sample)
        for listed in listed_definitions(sample):
            definition = coerce_definition(listed)
            try:
                checked = complete_tools(definition, declared.pop(definition.name, ()))
                spec = _spec_factory(factory, definition, checked)
                registered.append(self._add(definition, spec, source, tools=checked))
            except VaultError as exc:
                log.warning("toolkit %s of %s refused: %s", definition.name, source, exc.message)
        for name in declared:  # tools of a toolkit the plugin does not list: believe neither
            log.warning("tools of %r, a toolkit %s does not list, are ignored", name[:80], source)
        return registered

    def _add(
        self,
        definition: ToolkitDefinition,
        factory: ToolkitFactory,
        source: ToolkitSource,
        check: Callable[[Mapping[str, Any]], None] | None = None,
        *,
        tools: Iterable[object] = (),
        compile_now: bool = True,
    ) -> RegisteredToolkit:
        if definition.name in self._toolkits:
            raise VaultError(f"toolkit {definition.name!r} is registered twice ({source})")
        declared = complete_tools(definition, tools)
        registered = RegisteredToolkit(definition, factory, source, check, declared)
        if compile_now:  # each raises SchemaRefused: then it is not registered
            registered.schema  # noqa: B018
            registered._input_schemas  # noqa: B018
        self._toolkits[definition.name] = registered
        return registered

    def load_entry_points(self) -> None:
        """Register every installed plugin; a broken one is logged and left out (fail closed)."""
        for entry in sorted(group(ENTRY_POINT_GROUP), key=lambda e: e.name):
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
        and left out (fail closed). One unchanged since the last load (definition and tools)
        keeps its compiled schemas;
        one this release no longer compiles is refused, naming why, by the first request that
        needs it."""
        fresh = ToolkitRegistry()
        fresh._toolkits = {
            name: t for name, t in self._toolkits.items() if t.source.kind is not SourceKind.PACKAGE
        }
        for factory, source in stored:
            try:
                sample = factory()
                definition, declared = coerce_definition(sample.definition), _declared(sample)
                known = self._toolkits.get(definition.name)
                now = (source, definition, complete_tools(definition, declared))
                if known is not None and (known.source, known.definition, known.tools) == now:
                    fresh._toolkits[definition.name] = known
                    continue
                fresh._add(definition, factory, source, tools=declared, compile_now=False)
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
