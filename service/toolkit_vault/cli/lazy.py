"""Commands imported when they run, so `--help`, `version` and completion start at once.

A command module imports what its command needs: SQLAlchemy, the service, the schema
compiler, the HTTP server. Importing every one of them to print the top-level help or the
version made those as slow to start as `serve`. So the main group holds, for each command,
where it lives and its one-line summary, and imports a command's module only when that
command is looked up: to run it, to show its own help, or to complete its subcommands.
The summaries shown by `--help` and by shell completion come from the table.

`LazyCommands` is the group's `commands` mapping, so every click path that looks a command
up (running, `--help` of a command, `main.commands[name]`) loads it the same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import NamedTuple

import click

__all__ = ["CommandEntry", "LazyCommands"]


class CommandEntry(NamedTuple):
    """Where a command lives (`module`, `attribute`) and the summary `--help` lists for it,
    which must equal the command's own `short_help` (a test holds them equal)."""

    module: str
    attribute: str
    short_help: str


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name; each one imported on first lookup, then kept."""

    def __init__(self, entries: Mapping[str, CommandEntry]) -> None:
        self._entries = dict(entries)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        command = self._loaded.get(name)
        if command is None:
            entry = self._entries[name]  # KeyError: no such command, as a dict says it
            command = getattr(importlib.import_module(entry.module), entry.attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{entry.module}.{entry.attribute} is not a click command")
            self._loaded[name] = command
        return command

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._entries.pop(name, None)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        entry, command = self._entries.pop(name, None), self._loaded.pop(name, None)
        if entry is None and command is None:
            raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._entries, *self._loaded]))

    def __len__(self) -> int:
        return len(self._entries.keys() | self._loaded.keys())

    def short_help(self, name: str) -> str:
        """The line `--help` and completion show for `name`, without importing it."""
        if name in self._loaded:
            return self._loaded[name].get_short_help_str()
        return self._entries[name].short_help
