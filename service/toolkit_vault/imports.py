"""Importing toolkit packages: public MCP metadata in, stored toolkit definitions out.

`toolkits import` turns every server a package description accepts into one toolkit whose
schema marks each secret input `writeOnly`, so `toolkit/configure` encrypts it like any other
secret. The definitions live in the database (`imported_toolkits`), so every process and
replica registers them at `open_vault`. Nothing here runs anything: the vault does not launch
MCP servers, so an imported toolkit's initializer accepts its config and returns.

An import is all or nothing: every accepted server must compile, keep clear of the names of
built-in and entry-point toolkits and fit the store, or nothing is written. Re-importing an
identical definition (same package digest) writes nothing; a changed one replaces the stored
one. Each write shares one transaction with its `toolkit_imported` audit event.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Literal

from sqlalchemy import Connection, insert, select, update

from toolkit_package.importers import (
    MAX_INPUT_BYTES,
    ImportDiagnostic,
    ImportedServer,
    ImportRefused,
    ImportResult,
    import_metadata,
)
from toolkit_package.toolkit import property_names, to_toolkit_definition

from .errors import VaultError
from .integrity import IMPORTED
from .models import ImportedToolkit as ImportedRow
from .protocol import ToolkitDefinition
from .reconcile import imported_as_audited
from .records import AuditDraft
from .registry import ToolkitFactory, ToolkitRegistry, coerce_definition
from .schema import canonical_json, compile_schema
from .storage import Store

__all__ = [
    "AUDIT_ACTION",
    "PACKAGE_SOURCE",
    "ArgvWarning",
    "ImportReport",
    "ImportedEntry",
    "PackageRefused",
    "PackageToolkit",
    "import_package",
    "read_package",
    "report_lines",
    "stored_toolkits",
]

AUDIT_ACTION = "toolkit_imported"
PACKAGE_SOURCE = "package "  # registry source: "package sha256:<hex>"
MAX_NAME_CHARS = 200  # imported_toolkits.name and config_versions.toolkit_name
log = logging.getLogger(__name__)

Outcome = Literal["imported", "replaced", "unchanged"]


class PackageRefused(VaultError):
    """A package cannot be imported and nothing was stored; the message holds no value."""


class PackageToolkit:
    """An imported toolkit's plugin. The vault keeps the config and launches nothing."""

    def __init__(self, definition: ToolkitDefinition) -> None:
        self.definition = definition

    def initialize(self, config: dict[str, Any]) -> None:
        """Accept the decrypted config without keeping it: no process starts here."""
        return None


@dataclass(frozen=True)
class ImportedEntry:
    name: str
    outcome: Outcome
    strategy: str
    digest: str  # of the package: "sha256:<hex>"
    schema_digest: str
    fields: tuple[str, ...]
    secret_fields: tuple[str, ...]


@dataclass(frozen=True)
class ArgvWarning:
    """A secret the package puts on a command line, which every local user can read."""

    toolkit: str
    input: str
    kind: str
    field: str | None  # the config field, or None when the package fixes the value itself

    @property
    def message(self) -> str:
        return (
            f"{_printable(self.toolkit)}: secret {self.kind} {self.input!r} is passed on the "
            "command line; argv is visible to every local user"
        )


@dataclass(frozen=True)
class ImportReport:
    format: str
    input_sha256: str
    toolkits: tuple[ImportedEntry, ...]
    skipped_servers: int
    diagnostics: tuple[ImportDiagnostic, ...]
    warnings: tuple[ArgvWarning, ...]

    def as_json(self) -> dict[str, Any]:
        """The stable `toolkits import --json` shape (README): names and digests only."""
        return {
            "format": self.format,
            "input_sha256": self.input_sha256,
            "toolkits": [
                {
                    "name": t.name,
                    "outcome": t.outcome,
                    "strategy": t.strategy,
                    "digest": t.digest,
                    "schema_digest": t.schema_digest,
                    "fields": list(t.fields),
                    "secret_fields": list(t.secret_fields),
                }
                for t in self.toolkits
            ],
            "skipped_servers": self.skipped_servers,
            "diagnostics": [
                {"code": d.code, "scope": d.scope, "message": d.message} for d in self.diagnostics
            ],
            "warnings": [
                {
                    "toolkit": w.toolkit,
                    "input": w.input,
                    "kind": w.kind,
                    "field": w.field,
                    "message": w.message,
                }
                for w in self.warnings
            ],
        }


@dataclass(frozen=True)
class _Plan:
    entry: ImportedEntry
    text: str  # canonical JSON of the definition, as stored
    format: str


def _refuse(message: str) -> PackageRefused:
    return PackageRefused(f"package refused: {message}")


def _plan(server: ImportedServer, result: ImportResult, registry: ToolkitRegistry) -> _Plan:
    """Build and check one toolkit; refuses rather than store what the vault cannot serve."""
    imported = to_toolkit_definition(server, result)
    name = str(imported.definition["name"])
    if len(name) > MAX_NAME_CHARS:
        raise _refuse(f"toolkit name longer than {MAX_NAME_CHARS} characters: {name[:40]!r}...")
    if name in registry and not registry.get(name).source.startswith(PACKAGE_SOURCE):
        raise _refuse(f"toolkit name {name!r} is taken by the {registry.get(name).source} toolkit")
    try:
        definition = coerce_definition(imported.definition)
        schema = compile_schema(definition.config_schema)
    except VaultError as exc:
        raise _refuse(f"toolkit {name!r}: {exc.message}") from None
    inputs = server.configurable
    fields = property_names(inputs)
    properties = schema.schema.get("properties", {})
    secret = tuple(f for f, item in zip(fields, inputs, strict=True) if item.secret)
    if any(properties.get(f, {}).get("writeOnly") is not True for f in secret):
        raise _refuse(f"toolkit {name!r}: a secret input is not marked writeOnly")
    package = definition.config_schema["x-toolkit-package"]
    entry = ImportedEntry(
        name=name,
        outcome="imported",
        strategy=package["strategy"],
        digest=package["digest"],
        schema_digest=schema.digest,
        fields=tuple(fields),
        secret_fields=secret,
    )
    return _Plan(entry, canonical_json(imported.definition).decode(), result.format)


def _warnings(server: ImportedServer) -> Iterator[ArgvWarning]:
    fields = dict(zip(server.configurable, property_names(server.configurable), strict=True))
    for item in server.inputs:
        if item.secret and item.in_argv:
            yield ArgvWarning(server.name, item.name, item.kind, fields.get(item))


def _write(store: Store, plans: list[_Plan], actor: str, conn: Connection) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for plan in plans:
        entry = plan.entry
        found = conn.execute(
            select(ImportedRow.definition, ImportedRow.package_digest).where(
                ImportedRow.name == entry.name
            )
        ).first()
        if found is not None and found[0] == plan.text:
            outcomes.append("unchanged")
            continue
        values = {
            "definition": plan.text,
            "package_digest": entry.digest,
            "strategy": entry.strategy,
            "format": plan.format,
            "imported_at": time.time(),
            "actor": actor,
        }
        values["mac"] = store.mac(IMPORTED, {"name": entry.name, **values})
        if found is None:
            conn.execute(insert(ImportedRow).values(name=entry.name, **values))
        else:
            conn.execute(update(ImportedRow).where(ImportedRow.name == entry.name).values(**values))
        details = {
            "digest": entry.digest,
            "previous_digest": None if found is None else found[1],
            "schema_digest": entry.schema_digest,
            "strategy": entry.strategy,
            "format": plan.format,
            "secret_fields": list(entry.secret_fields),
        }
        store.audit(conn, AuditDraft(actor, AUDIT_ACTION, toolkit_name=entry.name, details=details))
        outcomes.append("imported" if found is None else "replaced")
    return outcomes


def import_package(
    store: Store, registry: ToolkitRegistry, data: bytes, actor: str
) -> ImportReport:
    """Import every server the package accepts, all or nothing; refresh `registry` after.

    Raises PackageRefused (a VaultError) naming the reason, and then nothing was stored.
    """
    if len(data) > MAX_INPUT_BYTES:
        raise _refuse(f"input_too_large: input exceeds {MAX_INPUT_BYTES} bytes")
    try:
        result = import_metadata(data)
    except ImportRefused as exc:
        raise _refuse(f"{exc.code}: {exc.message}") from None
    if not result.servers:
        raise _refuse(
            f"no_servers: no server could be imported ({result.skipped} skipped; "
            "toolkit-package-inspect shows why)"
        )
    plans = [_plan(server, result, registry) for server in result.servers]
    names = [plan.entry.name for plan in plans]
    if len(set(names)) != len(names):
        raise _refuse("the package names one toolkit twice")
    outcomes: list[Outcome] = store.retrying(partial(_write, store, plans, actor))
    registry.load_imported(store)
    return ImportReport(
        format=result.format,
        input_sha256=result.input_sha256,
        toolkits=tuple(
            replace(plan.entry, outcome=outcome)
            for plan, outcome in zip(plans, outcomes, strict=True)
        ),
        skipped_servers=result.skipped,
        diagnostics=result.diagnostics,
        warnings=tuple(w for server in result.servers for w in _warnings(server)),
    )


def stored_toolkits(store: Store) -> list[tuple[ToolkitFactory, str]]:
    """(factory, registry source) of every imported toolkit the vault can believe.

    A row is left out (and logged) unless its MAC holds and it is the definition the
    latest verified import event names: an edited definition (a secret field made public)
    or an older one put back (before a re-import marked more fields secret) would make the
    next configure store a credential in clear.
    """
    with store.read() as conn:
        rows = conn.execute(select(ImportedRow).order_by(ImportedRow.name)).all()
        believed = [row for row in rows if _believed(store, conn, row._mapping)]
    found: list[tuple[ToolkitFactory, str]] = []
    for name, text, digest in ((r.name, r.definition, r.package_digest) for r in believed):
        try:
            definition = coerce_definition(json.loads(text))
        except (ValueError, VaultError):
            log.warning("imported toolkit %r is unreadable and left out", name)
            continue
        if definition.name != name:
            log.warning("imported toolkit %r holds another name and is left out", name)
            continue
        found.append((partial(PackageToolkit, definition), PACKAGE_SOURCE + digest))
    return found


def _believed(store: Store, conn: Connection, row: Any) -> bool:
    if not store.authentic(IMPORTED, row):
        log.warning("imported toolkit %r fails its integrity check and is left out", row["name"])
        return False
    event = store.latest_event(conn, (AUDIT_ACTION, "toolkit_removed"), row["name"])
    if event is None or not imported_as_audited(row, event):
        log.warning(
            "imported toolkit %r is not the one its latest import event names; left out",
            row["name"],
        )
        return False
    return True


def read_package(path: str) -> bytes:
    """The bytes of PATH (`-`: stdin), refusing more than the importers' 1 MiB bound."""
    try:
        if path == "-":
            if sys.stdin is None:
                raise _refuse("stdin is closed")
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise PackageRefused(
            f"cannot read {path!r}: {exc.strerror or type(exc).__name__}"
        ) from None
    if len(data) > MAX_INPUT_BYTES:
        raise _refuse(f"input_too_large: input exceeds {MAX_INPUT_BYTES} bytes")
    return data


def _printable(text: str) -> str:
    """Names and scopes are untrusted source text: escape what a terminal would act on."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def report_lines(report: ImportReport) -> list[str]:
    """The human report (stdout); warnings go separately, to stderr."""
    lines = []
    for t in report.toolkits:
        secrets = ", ".join(t.secret_fields) or "none"
        lines.append(
            f"{t.outcome} {_printable(t.name)} ({t.strategy}, {t.digest}); secret fields: {secrets}"
        )
    if report.skipped_servers:
        lines.append(f"skipped {report.skipped_servers} server(s):")
    for d in report.diagnostics:
        lines.append(f"  {d.code} at {_printable(d.scope)}: {_printable(d.message)}")
    return lines
