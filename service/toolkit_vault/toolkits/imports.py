"""Importing toolkit packages: public MCP metadata in, stored toolkit definitions out.

`toolkits import` turns every server an input holds into one toolkit whose schema marks each
secret input `writeOnly` (classified fail-closed, with its reason), so `toolkit/configure`
encrypts it like any other secret. The definitions live in the database (`imported_toolkits`),
so every process and replica registers them at `open_vault`. Nothing here runs anything: a
local server whose launch was kept (a client config's command, a registry package's recipe)
is run by `served` once configured; any other imported toolkit's initializer accepts its config.
What a package says of its tools beyond their names (an MCPB bundle's descriptions, an input
schema where one is written) is stored beside the definition (`x-tools`, MCP's tool shape)
after the same checks as a plugin's declarations; the toolkit lists those tools and answers
no call.

An input imports server by server: a server whose name is taken (`import_names`: by a
built-in or entry-point toolkit, by any toolkit in another case, by another source's import
unless replacing), is too long, repeats another's, or does not compile is skipped with its
reason and the rest go in; with `strict` any such server refuses the whole input.
Re-importing an identical definition writes nothing; one of the same source changed
replaces the stored one; a dry run writes nothing at all. `remove` deletes
one and ends every session's current config of it. The statements on `imported_toolkits`
live in `store.imports` (and `Store.append_version`'s check that a configure's import is
still there), each write sharing one transaction with its audit event (`toolkit_imported`,
`toolkit_removed`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from toolkit_package.imported import ImportedServer, SkippedServer
from toolkit_package.jsonbound import loads_bounded
from toolkit_package.strategy import StrategyKind
from toolkit_package.toolkit import property_names, to_toolkit_definition
from toolkit_vault.errors import VaultError
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.schema import canonical_json, compile_schema
from toolkit_vault.store.imports import (
    ImportedDefinition,
    imported_rows,
    remove_imported,
    write_imported,
)
from toolkit_vault.store.integrity import IMPORTED
from toolkit_vault.store.ledger import ChainState, StateUnknown
from toolkit_vault.store.reconcile import imported_as_audited
from toolkit_vault.store.storage import Store
from toolkit_vault.toolkits.import_names import Skip as _Skip
from toolkit_vault.toolkits.import_names import check_name
from toolkit_vault.toolkits.import_report import (
    ArgvWarning,
    FieldMark,
    ImportedEntry,
    ImportOutcome,
    ImportReport,
)
from toolkit_vault.toolkits.launches import allow_secret_argv as allow_argv
from toolkit_vault.toolkits.launches import secret_argv_fields
from toolkit_vault.toolkits.registry import (
    RegisteredToolkit,
    SourceKind,
    ToolkitFactory,
    ToolkitRegistry,
    ToolkitSource,
    coerce_definition,
)
from toolkit_vault.toolkits.remote_oauth import (
    DISCOVERY_BUDGET,
    MAX_DISCOVERED,
    Discovery,
    DiscoveryOptions,
    discover_oauth,
    remote_url,
    with_oauth,
)
from toolkit_vault.toolkits.remote_served import RemoteServedToolkit, connect_of
from toolkit_vault.toolkits.served import ServedToolkit, launch_of, runs_servers
from toolkit_vault.toolkits.tool_declarations import compile_tool_schemas, complete_tools
from toolkit_vault.toolkits.tool_pins import ToolPins, package_of

if TYPE_CHECKING:
    from toolkit_package.selection import Selected, Selection

__all__ = [
    "MAX_IMPORT_BYTES",
    "DiscoveryOptions",
    "ImportReport",
    "PackageRefused",
    "PackageToolkit",
    "Removed",
    "import_package",
    "remove_toolkit",
    "stored_toolkits",
]

MAX_NAME_CHARS = 200  # imported_toolkits.name and config_versions.toolkit_name
MAX_IMPORT_BYTES = 16 << 20  # a registry listing is far larger than one server.json
log = logging.getLogger(__name__)


class PackageRefused(VaultError):
    """A package cannot be imported and nothing was stored; the message holds no value.
    ``report``, when there is one, says what was skipped and why (``--json`` prints it)."""

    def __init__(self, message: str, report: ImportReport | None = None) -> None:
        super().__init__(message)
        self.report = report


TOOLS_KEY = "x-tools"  # the stored definition's declared tools; the spec's fields ignore it


class PackageToolkit:
    """An imported toolkit the vault does not run: it keeps the config and launches nothing."""

    def __init__(self, definition: ToolkitDefinition, tools: Sequence[object] = ()) -> None:
        self.definition = definition
        self.tools = tuple(tools)  # checked by the registry (`tool_declarations`)

    def initialize(self, config: dict[str, Any]) -> None:
        """Accept the decrypted config without keeping it: no process starts here."""
        return None


@dataclass(frozen=True)
class _Plan:
    entry: ImportedEntry
    text: str  # canonical JSON of the definition, as stored
    format: str
    overrides: tuple[dict[str, Any], ...]
    secret_argv: tuple[str, ...] = ()  # secret fields on its command line, allowed (audited)


@dataclass(frozen=True)
class Removed:
    name: str
    digest: str
    unconfigured_sessions: tuple[str, ...]


def _refuse(message: str, report: ImportReport | None = None) -> PackageRefused:
    return PackageRefused(f"package refused: {message}", report)


def _why_none(skipped: Sequence[SkippedServer]) -> str:
    """Each skip's reason, so a refusal says what to do (at most three, then a count)."""
    reasons = [f"{s.name[:80] or '(unnamed)'!r}: {s.code}: {s.message}" for s in skipped[:3]] + (
        [f"and {len(skipped) - 3} more"] if len(skipped) > 3 else []
    )
    return "; ".join(reasons) if reasons else "the input holds no server"


def _plan(
    chosen: Selected,
    fmt: str,
    taken: Mapping[str, RegisteredToolkit],
    found: Discovery | None = None,
    *,
    replace_source: bool = False,
    allow_secret_argv: bool = False,
) -> _Plan:
    """Build and check one toolkit; `_Skip` rather than store what the vault cannot serve.
    `taken`: the registered toolkits by case-folded name."""
    server = chosen.server
    if found is not None and found.status == "refused":
        raise _Skip("oauth_refused", f"OAuth discovery: {found.reason}")
    imported = to_toolkit_definition(server, fmt)
    definition_fields = with_oauth(imported.definition, found) if found else imported.definition
    name = str(definition_fields["name"])
    secret_argv = secret_argv_fields(definition_fields["schema"])
    if (refused := allow_argv(definition_fields, allow_secret_argv, runs_servers())) is not None:
        raise _Skip("secret_in_argv", refused)
    if len(name) > MAX_NAME_CHARS:
        raise _Skip("name_too_long", f"toolkit name longer than {MAX_NAME_CHARS} characters")
    digest = str(definition_fields["schema"]["x-toolkit-package"]["digest"])
    replaced = check_name(name, digest, chosen, fmt, taken, replace_source)
    try:
        definition = coerce_definition(definition_fields)
        schema = compile_schema(definition.config_schema)
    except VaultError as exc:
        raise _Skip("invalid_schema", exc.message) from None
    try:
        compile_tool_schemas(complete_tools(definition, imported.tools))
    except VaultError as exc:
        raise _Skip("invalid_tool_schema", exc.message) from None
    if imported.tools:
        definition_fields = {**definition_fields, TOOLS_KEY: imported.tools}
    inputs = server.configurable
    fields = property_names(inputs)
    marks = tuple(
        FieldMark(f, i.name, i.kind, i.secret, i.reason)
        for f, i in zip(fields, inputs, strict=True)
    )
    secret = tuple(m.field for m in marks if m.secret)
    properties = schema.schema.get("properties", {})
    if any(properties.get(f, {}).get("writeOnly") is not True for f in secret):
        raise _Skip("invalid_schema", "a secret input is not marked writeOnly")
    package = definition.config_schema["x-toolkit-package"]
    entry = ImportedEntry(
        name=name,
        outcome="imported",
        strategy=package["strategy"],
        digest=package["digest"],
        schema_digest=schema.digest,
        fields=tuple(fields),
        secret_fields=secret,
        marks=marks,
        source_name=chosen.source_name,
        oauth=found.as_json() if found is not None else None,
        replaced_digest=replaced,
    )
    overrides = tuple({"field": o.field, "secret": o.secret} for o in chosen.overrides)
    text = canonical_json(definition_fields).decode()
    return _Plan(entry, text, fmt, overrides, tuple(secret_argv))


def _warnings(server: ImportedServer) -> Iterator[ArgvWarning]:
    fields = dict(zip(server.configurable, property_names(server.configurable), strict=True))
    for item in server.inputs:
        if item.secret and item.in_argv:
            yield ArgvWarning(server.name, item.name, item.kind, fields.get(item))


def _definition(plan: _Plan) -> ImportedDefinition:
    entry = plan.entry
    details = {
        "schema_digest": entry.schema_digest,
        "strategy": entry.strategy,
        "format": plan.format,
        "secret_fields": list(entry.secret_fields),
        "overrides": list(plan.overrides),
        "renamed_from": entry.source_name if entry.source_name != entry.name else None,
        "oauth": entry.oauth if entry.oauth and entry.oauth.get("issuer") else None,
    }
    if entry.replaced_digest is not None:  # `--replace`: another source's toolkit replaced
        details["replaced_source"] = entry.replaced_digest
    if plan.secret_argv:  # the operator allowed secrets on its command line
        details["secret_argv_allowed"] = list(plan.secret_argv)
    return ImportedDefinition(
        entry.name, plan.text, entry.digest, entry.strategy, plan.format, details
    )


def _discovered(
    chosen: list[Selected], data: bytes, registry: ToolkitRegistry, options: DiscoveryOptions
) -> list[Discovery | None]:
    """Each chosen remote server's OAuth discovery (None: a local server), before any
    write: the first `MAX_DISCOVERED` remote servers are asked, within `DISCOVERY_BUDGET`
    seconds for them all; the others fail (keeping an earlier import's x-oauth)."""
    doc = loads_bounded(data, max_bytes=MAX_IMPORT_BYTES, jsonc=True)  # parsed once already
    found: list[Discovery | None] = []
    asked, ends = 0, time.monotonic() + DISCOVERY_BUDGET
    for item in chosen:
        if item.server.strategy is not StrategyKind.REMOTE_MCP:
            found.append(None)
            continue
        name = item.server.name
        earlier: Mapping[str, Any] | None = None
        if name in registry and registry.get(name).source.kind is SourceKind.PACKAGE:
            earlier = registry.get(name).schema.schema
        left = ends - time.monotonic()
        if options.enabled and (asked >= MAX_DISCOVERED or left < 1.0):
            why = (
                f"not asked: more than {MAX_DISCOVERED} remote servers, or "
                f"{DISCOVERY_BUDGET:g} s, in one import (choose with --only)"
            )
            found.append(Discovery("failed", why).kept_from(earlier))
            continue
        asked += 1
        bounded = replace(options, deadline=min(options.deadline, left))
        found.append(discover_oauth(remote_url(doc, item.server), bounded, earlier))
    return found


def _planned(
    chosen: list[Selected],
    fmt: str,
    registry: ToolkitRegistry,
    strict: bool,
    discovered: list[Discovery | None],
    replace_source: bool = False,
    allow_secret_argv: bool = False,
) -> tuple[list[_Plan], list[SkippedServer]]:
    plans: list[_Plan] = []
    skipped: list[SkippedServer] = []
    names: set[str] = set()
    taken = {t.definition.name.casefold(): t for t in registry.all()}
    for item, found in zip(chosen, discovered, strict=True):
        try:
            if item.server.name.casefold() in names:
                raise _Skip(
                    "duplicate_name",
                    "another server of this input has the same name (ignoring case)",
                )
            plan = _plan(
                item,
                fmt,
                taken,
                found,
                replace_source=replace_source,
                allow_secret_argv=allow_secret_argv,
            )
        except _Skip as exc:
            if strict:
                raise _refuse(f"{exc.code}: {item.server.name[:80]!r}: {exc.message}") from None
            skipped.append(
                SkippedServer(item.server.name, exc.code, item.server.location, exc.message)
            )
            continue
        names.add(plan.entry.name.casefold())
        plans.append(plan)
    return plans, skipped


def import_package(
    store: Store,
    registry: ToolkitRegistry,
    data: bytes,
    actor: str,
    selection: Selection | None = None,
    *,
    strict: bool = False,
    discovery: DiscoveryOptions | None = None,
    replace_source: bool = False,
    dry_run: bool = False,
    allow_secret_argv: bool = False,
) -> ImportReport:
    """Import the servers of `data` the user selected; refresh `registry` after.

    A name already imported from another source is skipped (`name_imported`) unless
    `replace_source`, which replaces it and says so (`replaced_digest`, audited as
    `replaced_source`). `dry_run` plans and reports as an import would, and writes nothing
    (OAuth discovery still asks the servers, with `discovery`).

    With `discovery`, each remote server's OAuth metadata is read first (`remote_oauth`):
    its toolkit may gain `x-oauth`, be imported with a warning, or be skipped with its
    reason. Without it, nothing goes over the network.

    A package the vault would run with a secret field on its command line is skipped
    (`secret_in_argv`) unless `allow_secret_argv` (audited in its `toolkit_imported`).

    Raises PackageRefused (a VaultError) naming the reason when nothing could be imported,
    when a choice names nothing in the input, or (with `strict`) when any server fails;
    then nothing was stored.
    """
    # the importers and bundles are this command's alone (a listing has no use for them)
    from toolkit_package.importers import ImportRefused, import_metadata
    from toolkit_package.selection import Selection, SelectionRefused
    from toolkit_package.selection import select as select_servers

    if len(data) > MAX_IMPORT_BYTES:
        raise _refuse(f"input_too_large: input exceeds {MAX_IMPORT_BYTES} bytes")
    try:
        result = import_metadata(data, max_bytes=MAX_IMPORT_BYTES)
        chosen, left_out = select_servers(result, selection or Selection())
    except ImportRefused as exc:
        raise _refuse(f"{exc.code}: {exc.message}") from None
    except SelectionRefused as exc:
        raise _refuse(str(exc)) from None
    chose = selection or Selection()
    unusable_input = [
        s
        for s in result.skipped_servers
        if s.name not in chose.skip and (not chose.only or s.name in chose.only)
    ]
    if strict and unusable_input:
        first = unusable_input[0]
        raise _refuse(f"{first.code} at {first.scope}: {first.message} (--strict)")
    discovered: list[Discovery | None] = (
        _discovered(chosen, data, registry, discovery) if discovery else [None] * len(chosen)
    )
    plans, unusable = _planned(
        chosen,
        result.format,
        registry,
        strict,
        discovered,
        replace_source=replace_source,
        allow_secret_argv=allow_secret_argv,
    )
    skipped = (*result.skipped_servers, *left_out, *unusable)
    if not plans:
        refused = ImportReport(
            format=result.format,
            input_sha256=result.input_sha256,
            toolkits=(),
            skipped_servers=len(skipped),
            diagnostics=result.diagnostics,
            warnings=(),
            skipped=skipped,
        )
        raise _refuse(f"no_servers: no server could be imported: {_why_none(skipped)}", refused)
    if dry_run:
        outcomes = _would_be(store, plans)
    else:
        outcomes = write_imported(store, [_definition(p) for p in plans], actor)
        registry.load_imported(stored_toolkits(store))
    return ImportReport(
        format=result.format,
        input_sha256=result.input_sha256,
        toolkits=tuple(
            replace(plan.entry, outcome=outcome)
            for plan, outcome in zip(plans, outcomes, strict=True)
        ),
        skipped_servers=len(skipped),
        diagnostics=result.diagnostics,
        warnings=tuple(w for item in chosen for w in _warnings(item.server)),
        skipped=skipped,
        dry_run=dry_run,
    )


def _would_be(store: Store, plans: Sequence[_Plan]) -> list[ImportOutcome]:
    """What `write_imported` would make of each plan, read and nothing written."""
    rows, _ = imported_rows(store, with_state=False)
    stored = {row["name"]: row["definition"] for row in rows}
    return [
        "imported"
        if plan.entry.name not in stored
        else "unchanged"
        if stored[plan.entry.name] == plan.text
        else "replaced"
        for plan in plans
    ]


def remove_toolkit(store: Store, registry: ToolkitRegistry, name: str, actor: str) -> Removed:
    """Remove an imported toolkit (audited); built-in and entry-point toolkits stay."""
    if name in registry and registry.get(name).source.kind is not SourceKind.PACKAGE:
        raise VaultError(f"{name!r} is the {registry.get(name).source} toolkit, not an import")
    digest, sessions = remove_imported(store, name, actor)
    registry.load_imported(stored_toolkits(store))
    return Removed(name, digest, sessions)


def stored_toolkits(
    store: Store, *, unverified: bool = False
) -> list[tuple[ToolkitFactory, ToolkitSource]]:
    """(factory, registry source) of every imported toolkit the vault can believe.

    A row is left out (and logged) unless its MAC holds and it is the definition the
    verified audit chain last imported under that name (`ledger`): an edited definition (a
    secret field made public) or an older one put back (before a re-import marked more
    fields secret) would make the next configure store a credential in clear. When the
    chain cannot be believed, none is. `unverified=True` skips that check, for a listing
    made without the master key (`toolkits list`), which must say so; never for a
    registry that configures.
    """
    try:
        rows, state = imported_rows(store, with_state=not unverified)
    except StateUnknown as exc:
        log.error("imported toolkits are not believed: %s", exc)
        return []
    believed = [row for row in rows if state is None or _believed(store, state, row)]
    found: list[tuple[ToolkitFactory, ToolkitSource]] = []
    for name, text, digest in ((r["name"], r["definition"], r["package_digest"]) for r in believed):
        try:
            fields = json.loads(text)
            definition = coerce_definition(fields)
            tools = fields.get(TOOLS_KEY, [])
        except (ValueError, VaultError, AttributeError):
            log.warning("imported toolkit %r is unreadable and left out", name)
            continue
        if definition.name != name or not isinstance(tools, list):
            log.warning("imported toolkit %r holds another name or tools and is left out", name)
            continue
        command, connect = launch_of(definition), connect_of(definition)
        pins = ToolPins(store, name, package_of(definition))  # its server's tools, pinned
        factory: ToolkitFactory = partial(PackageToolkit, definition, tools)
        if command is not None:
            factory = partial(ServedToolkit, definition, tools, command, pins)
        elif connect is not None and runs_servers():
            factory = partial(RemoteServedToolkit, definition, tools, connect, pins)
        found.append((factory, ToolkitSource(SourceKind.PACKAGE, digest)))
    return found


def _believed(store: Store, state: ChainState, row: Any) -> bool:
    if not store.authentic(IMPORTED, row):
        log.warning("imported toolkit %r fails its integrity check and is left out", row["name"])
        return False
    if not imported_as_audited(row, state.imported.get(row["name"])):
        log.warning(
            "imported toolkit %r is not the one the audit chain last imported; left out",
            row["name"],
        )
        return False
    return True
