"""Questions asked of a validated selection before anything is imported or run.

``check_host`` compares what the selection requires with what a host offers: a missing
required contract or service is a gap that blocks activation, a missing optional one is an
explicit, named degradation rather than a silent one. ``state_changes_from`` lists the state
migrations an update would oblige the owners to perform; it performs none of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from toolkit_package.common import ContractRef
from toolkit_package.manifest import ValidatedManifest, require_validated
from toolkit_package.model import StateContract
from toolkit_package.roles import FrontendExport

__all__ = ["Gap", "HostCompatibility", "StateObligation", "check_host", "state_changes_from"]

_NUMERIC = re.compile(r"^(\d{1,9})(?:\.(\d{1,9}))?(?:\.(\d{1,9}))?$")


@dataclass(frozen=True)
class Gap:
    """A requirement the host does not meet. ``component`` is None for manifest-level needs."""

    kind: Literal["contract", "service"]
    name: str
    required_version: str | None
    offered_version: str | None
    component: str | None


@dataclass(frozen=True)
class HostCompatibility:
    required_gaps: tuple[Gap, ...]
    optional_degradations: tuple[Gap, ...]

    @property
    def blocking(self) -> bool:
        return bool(self.required_gaps)


@dataclass(frozen=True)
class StateObligation:
    """One owner obligation. ``supported`` is False when no declared migration covers it."""

    namespace: str
    owner: str
    from_format: str | None
    to_format: str | None
    operation: str | None
    artifact: str | None
    reversible: bool
    supported: bool
    diagnostic: str | None = None


def _compatible(required: str, offered: str) -> bool:
    """Same major and at least the required minor/patch; otherwise exact equality."""
    want, have = _NUMERIC.match(required), _NUMERIC.match(offered)
    if want is None or have is None:
        return required == offered
    w = tuple(int(part or 0) for part in want.groups())
    h = tuple(int(part or 0) for part in have.groups())
    return w[0] == h[0] and h[1:] >= w[1:]


def check_host(
    validated: ValidatedManifest,
    host_contracts: Mapping[str, str],
    host_services: Iterable[str],
) -> HostCompatibility:
    """Compare requirements with ``host_contracts`` (name -> offered version) and services."""
    m = require_validated(validated, "check_host").manifest
    wanted: list[tuple[ContractRef, str | None]] = [(c, None) for c in m.required_contracts]
    for comp in m.components:
        wanted += [(c, comp.id) for c in comp.host_contracts]
    for export in m.exports:
        if isinstance(export, FrontendExport) and export.live is not None:
            wanted.append((export.live.contract, export.id))
    gaps: set[tuple[bool, Gap]] = set()
    for ref, owner in wanted:
        offered = host_contracts.get(ref.name)
        if offered is None or not _compatible(ref.version, offered):
            gaps.add((ref.optional, Gap("contract", ref.name, ref.version, offered, owner)))
    services = set(host_services)
    for svc in m.host_services:
        if svc.name not in services:
            gaps.add((svc.optional, Gap("service", svc.name, None, None, None)))

    def ordered(optional: bool) -> tuple[Gap, ...]:
        chosen = [gap for opt, gap in gaps if opt is optional]
        return tuple(sorted(chosen, key=lambda g: (g.kind, g.name, g.component or "")))

    return HostCompatibility(required_gaps=ordered(False), optional_degradations=ordered(True))


def _states(validated: ValidatedManifest) -> dict[str, StateContract]:
    return {s.namespace: s for c in validated.manifest.components for s in c.state}


def _obligation(current: StateContract, prior: StateContract) -> StateObligation | None:
    if current.owner == prior.owner and current.format == prior.format:
        return None
    base = {
        "namespace": current.namespace,
        "owner": current.owner,
        "from_format": prior.format,
        "to_format": current.format,
    }
    if current.owner != prior.owner:
        return StateObligation(
            **base,
            operation=None,
            artifact=None,
            reversible=False,
            supported=False,
            diagnostic="owner_changed",
        )
    for mig in current.migrations:
        if mig.from_format == prior.format:
            return StateObligation(
                **base,
                operation=mig.operation,
                artifact=mig.artifact,
                reversible=mig.reversible,
                supported=True,
            )
    return StateObligation(
        **base,
        operation=None,
        artifact=None,
        reversible=False,
        supported=False,
        diagnostic="unsupported_prior_format",
    )


def state_changes_from(
    current: ValidatedManifest, prior: ValidatedManifest
) -> list[StateObligation]:
    """Migration obligations from ``prior`` to ``current``, by namespace. Performs nothing."""
    require_validated(current, "state_changes_from")
    require_validated(prior, "state_changes_from")
    now, before = _states(current), _states(prior)
    out: list[StateObligation] = []
    for namespace in sorted(set(now) | set(before)):
        if namespace not in before:
            continue  # new state has no prior format to migrate from
        if namespace not in now:
            old = before[namespace]
            out.append(
                StateObligation(
                    namespace=namespace,
                    owner=old.owner,
                    from_format=old.format,
                    to_format=None,
                    operation=None,
                    artifact=None,
                    reversible=False,
                    supported=False,
                    diagnostic="state_no_longer_declared",
                )
            )
        elif (obligation := _obligation(now[namespace], before[namespace])) is not None:
            out.append(obligation)
    return out
