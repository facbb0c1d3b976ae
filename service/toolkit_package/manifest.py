"""The one gate that makes an activation selection of seed 002 trustworthy.

An ``ActivationManifest`` (``activation``) is what a document *claims* to select. Only
``validate`` turns it into a ``ValidatedManifest``: deserialization alone never can, so code
holding a ``ValidatedManifest`` knows its graph was checked and its digest computed here. Host
compatibility and state obligations (``compat``) take a ``ValidatedManifest`` for that reason.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from typing import Any, ClassVar

import rfc8785
from pydantic import PrivateAttr, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from toolkit_package.activation import ActivationManifest, PackageRef, Reference
from toolkit_package.common import Frozen
from toolkit_package.graph import Diagnostic, check_graph, check_lifetimes, dependency_order
from toolkit_package.jsonbound import BoundsRefused, loads_bounded

__all__ = [
    "ActivationManifest",
    "Diagnostic",
    "ManifestRefused",
    "PackageRef",
    "Reference",
    "ValidatedManifest",
    "payload_digest",
    "require_validated",
    "validate",
]

_TOKEN = object()
_SEAL_KEY = secrets.token_bytes(32)  # per process: no seal made elsewhere ever verifies here
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "cmd", "cmd.exe", "pwsh"})
_SHELL_FLAGS = frozenset({"-c", "/c", "/C", "-Command", "-command", "-EncodedCommand"})
_NOT_A_PROGRAM = re.compile(r"[\s;&|`$<>(){}*?!~\"']|^$")


class ManifestRefused(ValueError):
    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("; ".join(f"{d.code} ({d.component})" for d in diagnostics))
        self.diagnostics = diagnostics

    @property
    def codes(self) -> set[str]:
        return {d.code for d in self.diagnostics}


class ValidatedManifest(Frozen):
    """A manifest that passed ``validate``. Constructing or deserializing one is refused.

    ``validate`` also seals it: a keyed MAC (key private to this process) over the manifest,
    its digest and its dependency order. ``require_validated`` checks the seal, so a value
    forged past the gate (a crafted pickle, fields rewritten through ``__dict__``) is refused
    where it is used. Pickling is refused outright; copying returns the same immutable value.
    """

    manifest: ActivationManifest
    payload_digest: str
    dependency_order: tuple[str, ...]
    _seal: bytes = PrivateAttr(default=b"")

    _gate: ClassVar[str] = "only toolkit_package.manifest.validate creates a ValidatedManifest"

    @model_validator(mode="before")
    @classmethod
    def _only_through_validate(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(info.context, dict) or info.context.get("gate") is not _TOKEN:
            raise PydanticCustomError("validated_manifest_gate", cls._gate)
        return data

    @classmethod
    def model_construct(cls, *_: Any, **__: Any) -> ValidatedManifest:
        raise TypeError(cls._gate)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        if update:
            raise TypeError(self._gate)
        return self

    def __copy__(self) -> ValidatedManifest:
        return self

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ValidatedManifest:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"a ValidatedManifest cannot be pickled; {self._gate}")

    def __getstate__(self) -> dict[Any, Any]:
        raise TypeError(f"a ValidatedManifest cannot be pickled; {self._gate}")

    def __setstate__(self, state: Any) -> None:
        raise TypeError(f"a ValidatedManifest cannot be unpickled; {self._gate}")

    def _expected_seal(self) -> bytes:
        content: dict[str, Any] = {
            "manifest": self.manifest.model_dump(mode="json"),
            "payload_digest": self.payload_digest,
            "dependency_order": list(self.dependency_order),
        }
        return hmac.digest(_SEAL_KEY, rfc8785.dumps(content), "sha256")


def require_validated(value: object, what: str = "this check") -> ValidatedManifest:
    """``value`` if ``validate`` made it in this process and nothing changed it since."""
    if isinstance(value, ValidatedManifest):
        try:
            intact = hmac.compare_digest(value._seal, value._expected_seal())
        except Exception:  # a forged value may not even serialize
            intact = False
        if intact:
            return value
    raise TypeError(f"{what} needs a ValidatedManifest from validate(); call validate() first")


def payload_digest(manifest: ActivationManifest) -> str:
    """``sha256:`` over RFC 8785 canonical JSON: key order and whitespace never change it."""
    canonical = rfc8785.dumps(manifest.model_dump(mode="json"))
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def _argv_problem(argv: object) -> str | None:
    if not isinstance(argv, tuple) or not argv or not all(isinstance(a, str) for a in argv):
        return "entrypoint arguments must be a non-empty literal list of strings"
    if any("\x00" in a for a in argv):
        return "an argv entry holds a NUL byte"
    if _NOT_A_PROGRAM.search(argv[0]):
        return "argv[0] must name one program, not a shell expression"
    program = argv[0].replace("\\", "/").rsplit("/", 1)[-1]
    if program in _SHELLS and _SHELL_FLAGS.intersection(argv[1:]):
        return "argv runs a shell command string"
    return None


def _parse(manifest: ActivationManifest | Mapping[str, Any] | str | bytes) -> ActivationManifest:
    """Re-validate even a model instance: ``model_construct`` could have skipped every check."""
    raw: Any = manifest
    if isinstance(manifest, ActivationManifest):
        try:
            raw = manifest.model_dump(mode="json", warnings=False)
        except (ValueError, TypeError):
            msg = "manifest instance does not serialize"
            raise ManifestRefused([Diagnostic("malformed_manifest", None, msg)]) from None
    elif isinstance(manifest, str | bytes):
        data = manifest.encode() if isinstance(manifest, str) else manifest
        try:
            raw = loads_bounded(data)
        except BoundsRefused as exc:
            raise ManifestRefused([Diagnostic(exc.code, None, exc.message)]) from None
    try:
        return ActivationManifest.model_validate(raw)
    except ValidationError as exc:
        raise ManifestRefused(_from_validation_error(raw, exc)) from None


def _from_validation_error(raw: Any, exc: ValidationError) -> list[Diagnostic]:
    diagnostics = []
    for error in exc.errors(include_input=False, include_url=False):
        loc = error["loc"]
        component = None
        if len(loc) > 1 and loc[0] == "components" and isinstance(loc[1], int):
            try:
                component = str(raw["components"][loc[1]]["id"])[:128]
            except (KeyError, IndexError, TypeError):
                component = f"components[{loc[1]}]"
        path = "/".join(str(part) for part in loc)
        code = "entrypoint_not_argv" if "argv" in loc else "malformed_manifest"
        diagnostics.append(Diagnostic(code, component, f"{path}: {error['type']}"))
    return diagnostics


def _check_components(m: ActivationManifest) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    seen: set[str] = set()
    namespaces: set[str] = set()
    for c in m.components:
        if c.id in seen:
            out.append(Diagnostic("duplicate_component", c.id, "component selected twice"))
        seen.add(c.id)
        entry = c.runtime.entrypoint
        if entry is not None and (problem := _argv_problem(entry.argv)) is not None:
            out.append(Diagnostic("entrypoint_not_argv", c.id, problem))
        for state in c.state:
            if state.namespace in namespaces:
                msg = f"state namespace {state.namespace!r} declared twice"
                out.append(Diagnostic("duplicate_state_namespace", c.id, msg))
            namespaces.add(state.namespace)
            if any(mig.owner != state.owner for mig in state.migrations):
                msg = f"a migration of {state.namespace!r} is not run by the state's owner"
                out.append(Diagnostic("migration_not_owner_bound", c.id, msg))
    export_ids = [e.id for e in m.exports]
    for eid in sorted({e for e in export_ids if export_ids.count(e) > 1}):
        out.append(Diagnostic("duplicate_export", eid, "export selected twice"))
    for mcp in m.portable_mcp:
        if mcp.component not in seen:
            msg = f"portable MCP entry {mcp.name!r} names an unselected component"
            out.append(Diagnostic("portable_mcp_unselected", mcp.component, msg))
    return out


def validate(manifest: ActivationManifest | Mapping[str, Any] | str | bytes) -> ValidatedManifest:
    """The only way to a ``ValidatedManifest``; refusals carry every diagnostic at once."""
    m = _parse(manifest)
    comps = {c.id: c for c in m.components}
    diagnostics = _check_components(m) + check_graph(m, comps) + check_lifetimes(m, comps)
    order, cyclic = dependency_order(comps)
    diagnostics += [
        Diagnostic("dependency_cycle", cid, "component is on a dependency cycle") for cid in cyclic
    ]
    if diagnostics:
        raise ManifestRefused(diagnostics)
    data = {"manifest": m, "payload_digest": payload_digest(m), "dependency_order": tuple(order)}
    validated = ValidatedManifest.model_validate(data, context={"gate": _TOKEN})
    validated._seal = validated._expected_seal()
    return validated
