"""The component graph of an activation selection: dependency order, reachability, lifetimes.

Pure functions over a parsed ``ActivationManifest``; ``manifest.validate`` runs them and
turns what they find into one refusal. Each finding is a named ``Diagnostic``.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit_package.activation import ActivationManifest
from toolkit_package.model import Component, Lifetime
from toolkit_package.roles import FrontendExport

__all__ = ["Diagnostic", "check_graph", "check_lifetimes", "dependency_order"]


@dataclass(frozen=True)
class Diagnostic:
    """One named reason for a refusal; ``component`` is the component or export it concerns."""

    code: str
    component: str | None
    message: str


def dependency_order(comps: dict[str, Component]) -> tuple[list[str], list[str]]:
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


def check_graph(m: ActivationManifest, comps: dict[str, Component]) -> list[Diagnostic]:
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


def check_lifetimes(m: ActivationManifest, comps: dict[str, Component]) -> list[Diagnostic]:
    """A request-lifetime component anywhere below a persistent/daemon component or a persistent
    frontend is refused: daemon -> session -> request still leaves the daemon relying on
    something that ends with each request."""
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
        for cid in sorted(_closure(needed, comps)):
            if comps[cid].lifetime is Lifetime.REQUEST:
                msg = f"request-lifetime component supports {what}"
                out.append(Diagnostic("request_lifetime_supports_persistent", cid, msg))
    return out


def _closure(start: list[str], comps: dict[str, Component]) -> set[str]:
    """Every selected component reachable from ``start`` through dependencies (cycle-safe)."""
    seen: set[str] = set()
    stack = list(start)
    while stack:
        cid = stack.pop()
        if cid in comps and cid not in seen:
            seen.add(cid)
            stack.extend(d.component for d in comps[cid].dependencies)
    return seen
