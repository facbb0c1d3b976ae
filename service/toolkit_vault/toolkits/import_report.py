"""What `toolkits import` and `toolkits show` tell a user: names, marks, reasons, digests.

Nothing here holds a value. Names, scopes and reasons come from public metadata (or from the
user's own file) and are untrusted text: the human renderings escape what a terminal would
act on. The JSON shapes are stable (docs/imports.md): keys are only ever added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from toolkit_vault.terminal import printable

if TYPE_CHECKING:  # so the CLI's `printable` costs no import of the packaging side
    from toolkit_package.importers import ImportDiagnostic, SkippedServer
    from toolkit_vault.toolkits.registry import RegisteredToolkit

__all__ = [
    "ArgvWarning",
    "FieldMark",
    "ImportOutcome",
    "ImportReport",
    "ImportedEntry",
    "describe_toolkit",
    "oauth_warnings",
    "report_lines",
]

ImportOutcome = Literal["imported", "replaced", "unchanged"]
_MARKS = {"writeOnly": True, "x-secret": True, "sensitive": True, "format": "password"}


@dataclass(frozen=True)
class FieldMark:
    """One config field: secret or public, and why (``--secret``/``--public`` when overridden)."""

    field: str
    input: str
    kind: str
    secret: bool
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "input": self.input,
            "kind": self.kind,
            "secret": self.secret,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ImportedEntry:
    name: str
    outcome: ImportOutcome
    strategy: str
    digest: str  # of the value-free source description: "sha256:<hex>"
    schema_digest: str
    fields: tuple[str, ...]
    secret_fields: tuple[str, ...]
    marks: tuple[FieldMark, ...] = ()
    source_name: str = ""  # its name in the input, when --rename changed it
    oauth: dict[str, Any] | None = None  # a remote server's OAuth discovery (remote_oauth)
    # the digest of another source's toolkit this one replaced (`--replace`), else None
    replaced_digest: str | None = None


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
            f"{printable(self.toolkit)}: secret {self.kind} {self.input!r} is passed on the "
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
    skipped: tuple[SkippedServer, ...] = ()
    dry_run: bool = False  # `--dry-run`: what an import would do; nothing was stored

    def as_json(self) -> dict[str, Any]:
        """The stable `toolkits import --json` shape (docs/imports.md): names and digests only."""
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
                    "classification": [m.as_json() for m in t.marks],
                    "renamed_from": t.source_name if t.source_name != t.name else None,
                    "oauth": t.oauth,
                    "replaced_digest": t.replaced_digest,
                }
                for t in self.toolkits
            ],
            "dry_run": self.dry_run,
            "skipped_servers": self.skipped_servers,
            "skipped": [
                {"name": s.name, "code": s.code, "scope": s.scope, "message": s.message}
                for s in self.skipped
            ],
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


def oauth_warnings(report: ImportReport) -> list[str]:
    """A remote toolkit imported without `x-oauth` because its metadata could not be read."""
    return [
        f"{printable(t.name)}: OAuth discovery failed, imported without x-oauth: "
        f"{printable(t.oauth['reason'] or '')}"
        for t in report.toolkits
        if t.oauth and t.oauth["status"] == "failed"
    ]


def _oauth_line(oauth: dict[str, Any]) -> str:
    if oauth["status"] == "generated":
        return (
            f"  oauth: x-oauth for {printable(oauth['issuer'])}, from the protected resource "
            f"metadata at {printable(oauth['metadata'])} ({oauth['via']}; client id from "
            f"{oauth['client_id_from']})"
        )
    return f"  oauth: {oauth['status']}: {printable(oauth['reason'] or '')}"


def report_lines(report: ImportReport) -> list[str]:
    """The human report (stdout): one line per toolkit and per field, then what was skipped."""
    lines = []
    for t in report.toolkits:
        renamed = f" (from {printable(t.source_name)})" if t.source_name != t.name else ""
        outcome = f"would be {t.outcome}:" if report.dry_run else t.outcome
        lines.append(f"{outcome} {printable(t.name)}{renamed} ({t.strategy}, {t.digest})")
        if t.replaced_digest is not None:
            lines.append(
                f"  replaces the toolkit imported from another source ({t.replaced_digest})"
            )
        for m in t.marks:
            mark = "secret" if m.secret else "public"
            lines.append(f"  {mark} {m.field}: {printable(m.reason)}")
        if t.oauth:
            lines.append(_oauth_line(t.oauth))
    if report.skipped:
        lines.append(f"skipped {len(report.skipped)} server(s):")
    for s in report.skipped:
        lines.append(
            f"  {printable(s.name) or '(unnamed)'}: {s.code} at {printable(s.scope) or '/'}: "
            f"{printable(s.message)}"
        )
    notes = [d for d in report.diagnostics if d.code not in {s.code for s in report.skipped}]
    for d in notes:
        lines.append(f"  note: {d.code} at {printable(d.scope)}: {printable(d.message)}")
    if report.dry_run:
        lines.append("dry run: nothing was stored")
    return lines


def _schema_mark(node: Any) -> str | None:
    if not isinstance(node, dict):
        return None
    return next((f"{k}: {v}" for k, v in _MARKS.items() if node.get(k) == v), None)


def _nested_mark(node: Any) -> str | None:
    if isinstance(node, dict):
        return _schema_mark(node) or next(
            (m for v in node.values() if (m := _nested_mark(v)) is not None), None
        )
    if isinstance(node, list):
        return next((m for v in node if (m := _nested_mark(v)) is not None), None)
    return None


def describe_toolkit(toolkit: RegisteredToolkit) -> dict[str, Any]:
    """`toolkits show --json`: definition, schema, each top-level field's mark and reason."""
    definition = toolkit.definition
    schema = dict(toolkit.schema.schema)
    package = schema.get("x-toolkit-package", {})
    fields = []
    for name, prop in schema.get("properties", {}).items():
        recorded = prop.get("x-toolkit-input", {}) if isinstance(prop, dict) else {}
        mark = _schema_mark(prop)
        nested = None if mark else _nested_mark(prop)
        reason = recorded.get("reason") or (f"schema {mark}" if mark else None)
        reason = reason or (
            f"holds secret parts ({nested})" if nested else "schema marks no secret"
        )
        fields.append(
            {
                "field": name,
                "input": recorded.get("name", name),
                "kind": recorded.get("kind", "schema"),
                "secret": mark is not None,
                "reason": reason,
            }
        )
    return {
        "name": definition.name,
        "source": str(toolkit.source),
        "source_digest": package.get("digest"),
        "schema_digest": toolkit.schema.digest,
        "definition": definition.model_dump(mode="json", by_alias=True, exclude={"configured"}),
        "fields": fields,
        "other_fields_secret": schema.get("additionalProperties") is not False,
        "oauth": (
            {**schema["x-oauth"], "discovered": package.get("oauth")}
            if isinstance(schema.get("x-oauth"), dict)
            else None
        ),
    }
