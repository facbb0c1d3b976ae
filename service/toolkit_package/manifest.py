"""The activation selection of seed 002 and the one gate that makes it trustworthy.

An ``ActivationManifest`` is what a document *claims* to select. Only ``validate`` turns it
into a ``ValidatedManifest``: deserialization alone never can, so code holding a
``ValidatedManifest`` knows its graph was checked and its digest computed here. Host
compatibility and state obligations (``compat``) take a ``ValidatedManifest`` for that reason.
"""

from __future__ import annotations

import hashlib
import heapq
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import rfc8785
from pydantic import Field, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from .common import ContractRef, Digest, Frozen, Ident, Text, Version
from .jsonbound import BoundsRefused, loads_bounded
from .model import Component, HostServiceRef, Lifetime, PortableMcpEntry, StrategyKind
from .roles import Export, FrontendExport

__all__ = [
    "ActivationManifest",
    "Diagnostic",
    "ManifestRefused",
    "PackageRef",
    "Reference",
    "ValidatedManifest",
    "payload_digest",
    "validate",
]

_TOKEN = object()
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "cmd", "cmd.exe", "pwsh"})
_SHELL_FLAGS = frozenset({"-c", "/c", "/C", "-Command", "-command", "-EncodedCommand"})
_NOT_A_PROGRAM = re.compile(r"[\s;&|`$<>(){}*?!~\"']|^$")


@dataclass(frozen=True)
class Diagnostic:
    """One named reason for a refusal; ``component`` is the component or export it concerns."""

    code: str
    component: str | None
    message: str


class ManifestRefused(ValueError):
    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("; ".join(f"{d.code} ({d.component})" for d in diagnostics))
        self.diagnostics = diagnostics

    @property
    def codes(self) -> set[str]:
        return {d.code for d in self.diagnostics}


class PackageRef(Frozen):
    id: Ident
    version: Version
    content_digest: Digest


class Reference(Frozen):
    uri: Text
    digest: Digest


class ActivationManifest(Frozen):
    package: PackageRef
    strategy: StrategyKind
    configuration_ref: Reference | None = None
    policy_ref: Reference | None = None
    components: tuple[Component, ...] = Field(max_length=1024)
    exports: tuple[Export, ...] = Field(min_length=1, max_length=1024)
    required_contracts: tuple[ContractRef, ...] = Field(default=(), max_length=256)
    host_services: tuple[HostServiceRef, ...] = Field(default=(), max_length=256)
    portable_mcp: tuple[PortableMcpEntry, ...] = Field(default=(), max_length=256)


class ValidatedManifest(Frozen):
    """A manifest that passed ``validate``. Constructing or deserializing one is refused."""

    manifest: ActivationManifest
    payload_digest: str
    dependency_order: tuple[str, ...]

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
        return super().model_copy(deep=deep)


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


def _dependency_order(comps: dict[str, Component]) -> tuple[list[str], list[str]]:
    """Kahn's algorithm with a sorted frontier: dependencies first, ties broken by id."""
    edges = {
        cid: {d.component for d in c.dependencies if d.component in comps}
        for cid, c in comps.items()
    }
    dependents: dict[str, list[str]] = {cid: [] for cid in comps}
    for cid, deps in edges.items():
        for dep in deps:
            dependents[dep].append(cid)
    waiting = {cid: len(deps) for cid, deps in edges.items()}
    ready = [cid for cid, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        cid = heapq.heappop(ready)
        order.append(cid)
        for child in dependents[cid]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    left = set(comps) - set(order)
    cyclic = sorted(cid for cid in left if _reaches(cid, cid, edges))
    return order, cyclic


def _reaches(start: str, target: str, edges: Mapping[str, set[str]]) -> bool:
    seen: set[str] = set()
    stack = list(edges[start])
    while stack:
        node = stack.pop()
        if node == target:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(edges[node])
    return False


def _check_graph(m: ActivationManifest, comps: dict[str, Component]) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for c in m.components:
        for dep in c.dependencies:
            target = comps.get(dep.component)
            if target is None:
                out.append(Diagnostic("dependency_unselected", c.id, f"needs {dep.component!r}"))
            elif target.version != dep.version:
                msg = f"needs {dep.component!r} at a version other than the selected one"
                out.append(Diagnostic("dependency_version_mismatch", c.id, msg))
    for export in m.exports:
        for cid in export.components:
            if cid not in comps:
                out.append(Diagnostic("export_component_unselected", export.id, f"names {cid!r}"))
    reachable: set[str] = set()
    stack = [cid for e in m.exports for cid in e.components]
    while stack:
        cid = stack.pop()
        if cid in comps and cid not in reachable:
            reachable.add(cid)
            stack.extend(d.component for d in comps[cid].dependencies)
    msg = "not reachable from any selected export"
    out += [Diagnostic("unreachable_component", cid, msg) for cid in comps if cid not in reachable]
    return out


def _check_lifetimes(m: ActivationManifest, comps: dict[str, Component]) -> list[Diagnostic]:
    """Only direct support counts: an intermediate session component owns its own needs."""
    supported = [
        (f"persistent/daemon component {c.id!r}", [d.component for d in c.dependencies])
        for c in m.components
        if c.lifetime in (Lifetime.PERSISTENT, Lifetime.DAEMON)
    ]
    supported += [
        (f"persistent frontend {e.id!r}", list(e.components))
        for e in m.exports
        if isinstance(e, FrontendExport) and e.persistent
    ]
    out: list[Diagnostic] = []
    for what, needed in supported:
        for cid in needed:
            dep = comps.get(cid)
            if dep is not None and dep.lifetime is Lifetime.REQUEST:
                msg = f"request-lifetime component supports {what}"
                out.append(Diagnostic("request_lifetime_supports_persistent", cid, msg))
    return out


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
    diagnostics = _check_components(m) + _check_graph(m, comps) + _check_lifetimes(m, comps)
    order, cyclic = _dependency_order(comps)
    diagnostics += [
        Diagnostic("dependency_cycle", cid, "component is on a dependency cycle") for cid in cyclic
    ]
    if diagnostics:
        raise ManifestRefused(diagnostics)
    data = {"manifest": m, "payload_digest": payload_digest(m), "dependency_order": tuple(order)}
    return ValidatedManifest.model_validate(data, context={"gate": _TOKEN})
