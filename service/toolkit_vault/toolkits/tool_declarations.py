"""A toolkit's tools as the vault runs them: one `Tool` for every name its definition lists.

The definition's `tools` (the spec's list of names) is what `toolkit/list` and `tool/list`
show, so it stays the one list of what a toolkit offers: a plugin's declarations describe
those names and cannot add to them. A declared tool the definition does not list, or one
declared twice, refuses the toolkit (the plugin says two different things: neither is
believed); a listed name with no declaration takes any object (`Tool(name)`).

A tool's input schema is untrusted input like a config schema and goes through the same
`compile_schema` (bounded, audited, compiled once per digest): a call's arguments are
validated by what this compiles, before the tool sees them. An output schema is checked
the same way, as it is handed to clients that may run it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from toolkit_vault.errors import SchemaRefused, VaultError
from toolkit_vault.plugin import Tool, as_tool
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.schema import CompiledSchema, compile_schema

__all__ = ["ToolsRefused", "compile_tool_schemas", "complete_tools"]


class ToolsRefused(VaultError):
    """A toolkit's tool declarations contradict its definition; names only, no schema text."""


def complete_tools(definition: ToolkitDefinition, declared: Iterable[object]) -> tuple[Tool, ...]:
    """A `Tool` for each name `definition.tools` lists, in its order: the declared one, else
    one that takes any object. Raises ToolsRefused (or PluginAnswerRefused for a value that is
    not a tool at all)."""
    listed = dict.fromkeys(definition.tools)
    by_name: dict[str, Tool] = {}
    for value in declared:
        tool = as_tool(value)
        shown = tool.name[:80]
        if tool.name in by_name:
            raise ToolsRefused(f"toolkit {definition.name!r} declares tool {shown!r} twice")
        if tool.name not in listed:
            raise ToolsRefused(
                f"toolkit {definition.name!r} declares tool {shown!r}, which its definition's "
                "tools do not list (add the name there)"
            )
        by_name[tool.name] = tool
    return tuple(by_name.get(name) or Tool(name) for name in listed)


def compile_tool_schemas(tools: Iterable[Tool]) -> Mapping[str, CompiledSchema]:
    """Each tool's compiled input schema, by name, with its output schema checked too; raises
    SchemaRefused naming the tool and what `compile_schema` refused."""
    compiled: dict[str, CompiledSchema] = {}
    for tool in tools:
        try:
            compiled[tool.name] = compile_schema(tool.input_schema)
            if tool.output_schema is not None:
                compile_schema(tool.output_schema)
        except SchemaRefused as exc:
            raise SchemaRefused(f"tool {tool.name[:80]!r}: {exc.message}") from None
    return compiled
