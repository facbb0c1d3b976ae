"""What a user steers in an import: which servers (``--only``, ``--skip``), under which names
(``--rename OLD=NEW``), and which fields are secret against the classifier (``--secret``,
``--public``).

Every name a user gives must match something in the input: a typo in ``--skip`` or
``--public`` is refused, never silently ignored, because an ignored ``--skip`` imports what
the user meant to leave out and an ignored ``--secret`` stores a credential in clear. A field
is named by its config field (``api_key``) or the input's own name (``API_KEY``), optionally
scoped to one server as ``SERVER:FIELD``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from toolkit_package.imported import ImportedServer, ImportResult, SkippedServer
from toolkit_package.toolkit import property_names

__all__ = ["Override", "Selected", "Selection", "SelectionRefused", "select"]


class SelectionRefused(ValueError):
    """A user's choice names nothing in the input; the message names the choice."""


@dataclass(frozen=True)
class Override:
    field: str
    secret: bool


@dataclass(frozen=True)
class Selection:
    only: frozenset[str] = frozenset()
    skip: frozenset[str] = frozenset()
    rename: Mapping[str, str] = field(default_factory=dict)
    secret: tuple[str, ...] = ()
    public: tuple[str, ...] = ()


@dataclass(frozen=True)
class Selected:
    """A chosen server (renamed, overrides applied); ``source_name`` is its name in the input."""

    server: ImportedServer
    source_name: str
    overrides: tuple[Override, ...]


def _check_names(result: ImportResult, selection: Selection) -> None:
    known = {s.name for s in result.servers} | {s.name for s in result.skipped_servers}
    for flag, names in (
        ("--only", selection.only),
        ("--skip", selection.skip),
        ("--rename", set(selection.rename)),
    ):
        unknown = sorted(set(names) - known)
        if unknown:
            name = unknown[0]
            # A registry entry with several packages is one server per package: `name#package-N`
            per_package = sorted(k for k in known if k.startswith(name + "#"))
            hint = f"; it has one per package: {', '.join(per_package)}" if per_package else ""
            raise SelectionRefused(f"{flag} names no server of this input: {name!r}{hint}")
    both = sorted(selection.only & selection.skip)
    if both:
        raise SelectionRefused(f"{both[0]!r} is given to both --only and --skip")


def _spec(spec: str) -> tuple[str | None, str]:
    server, sep, name = spec.rpartition(":")
    return (server, name) if sep and server else (None, spec)


def _apply(
    chosen: list[Selected], specs: tuple[str, ...], secret: bool, used: set[str]
) -> list[Selected]:
    out = []
    for item in chosen:
        server, applied = item.server, list(item.overrides)
        fields = property_names(server.configurable)
        by_field = dict(zip(server.configurable, fields, strict=True))
        inputs = []
        for one in server.inputs:
            field_name = by_field.get(one)
            for spec in specs:
                scope, name = _spec(spec)
                if scope not in (None, server.name, item.source_name) or field_name is None:
                    continue
                if name in (field_name, one.name):
                    used.add(spec)
                    reason = "--secret" if secret else "--public"
                    one = replace(one, secret=secret, reason=reason)
                    applied.append(Override(field_name, secret))
            inputs.append(one)
        out.append(
            replace(item, server=replace(server, inputs=tuple(inputs)), overrides=tuple(applied))
        )
    return out


def select(
    result: ImportResult, selection: Selection
) -> tuple[list[Selected], list[SkippedServer]]:
    """The servers to import and those the user left out, or ``SelectionRefused``."""
    _check_names(result, selection)
    clash = sorted(
        {_spec(s)[1] for s in selection.secret} & {_spec(s)[1] for s in selection.public}
    )
    if clash:
        raise SelectionRefused(f"field {clash[0]!r} is given to both --secret and --public")
    chosen: list[Selected] = []
    left_out: list[SkippedServer] = []
    for server in result.servers:
        if selection.only and server.name not in selection.only:
            left_out.append(
                SkippedServer(server.name, "not_selected", server.location, "not named by --only")
            )
        elif server.name in selection.skip:
            left_out.append(
                SkippedServer(server.name, "skipped", server.location, "named by --skip")
            )
        else:
            renamed = replace(server, name=selection.rename.get(server.name, server.name))
            chosen.append(Selected(renamed, server.name, ()))
    used: set[str] = set()
    chosen = _apply(chosen, selection.secret, True, used)
    chosen = _apply(chosen, selection.public, False, used)
    unused = [s for s in (*selection.secret, *selection.public) if s not in used]
    if unused:
        raise SelectionRefused(
            f"--secret/--public names no field of the chosen servers: {unused[0]!r}"
        )
    return chosen, left_out
