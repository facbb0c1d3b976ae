"""The console's Figures page: what an operator checks first, the same numbers `/metrics`
serves (read from the same registry, at the same moment), and whether this process is
ready (`/readyz`'s codes). Operators and auditors, as `/metrics`; names and counts only."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from toolkit_vault.core.health import ReadinessProbe
from toolkit_vault.telemetry.metrics import METRICS
from toolkit_vault.transports.web.console import Console
from toolkit_vault.transports.web.pages import WebState

__all__ = ["console_figures_routes", "figures"]

Samples = list[tuple[str, dict[str, str], float]]
TOOL_ROWS = 50  # the busiest (toolkit, tool) pairs shown; /metrics has them all


def _samples() -> Samples:
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in METRICS.registry.collect()
        for sample in family.samples
    ]


def _by(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """Sum of the samples named `name`, by the values of `labels`."""
    found: dict[tuple[str, ...], float] = defaultdict(float)
    for sample_name, given, value in samples:
        if sample_name == name:
            found[tuple(given.get(label, "") for label in labels)] += value
    return dict(sorted(found.items()))


def _one(samples: Samples, name: str) -> float | None:
    found = _by(samples, name)
    return found.get((), None)


def figures(probe: ReadinessProbe) -> dict[str, Any]:
    """The page's figures (reads the database: a worker thread's)."""
    samples = _samples()
    p = "toolkit_vault_"
    tools = _by(samples, f"{p}tool_calls_total", "toolkit", "tool", "outcome")
    per_tool: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (toolkit, tool, outcome), count in tools.items():
        per_tool[(toolkit, tool)][outcome] = count
    busiest = sorted(per_tool.items(), key=lambda item: -sum(item[1].values()))[:TOOL_ROWS]
    count = _one(samples, f"{p}db_statement_seconds_count") or 0.0
    total = _one(samples, f"{p}db_statement_seconds_sum") or 0.0
    devices: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
    for name in ("delivered", "failed", "lost"):
        for key, value in _by(samples, f"{p}audit_device_{name}_total", "device", "kind").items():
            devices[key][name] = value
    for name in ("queued", "failing"):
        for key, value in _by(samples, f"{p}audit_device_{name}", "device", "kind").items():
            devices[key][name] = value
    return {
        "enabled": METRICS.enabled,
        "readiness": probe.check(),
        "requests": _by(samples, f"{p}requests_total", "transport", "outcome"),
        "configures": _by(samples, f"{p}configures_total", "outcome"),
        "tools": busiest,
        "processes": _by(samples, f"{p}mcp_server_processes", "state"),
        "server_events": _by(samples, f"{p}mcp_server_events_total", "toolkit", "event"),
        "remote": _one(samples, f"{p}mcp_remote_connections"),
        "refreshes": _by(samples, f"{p}oauth_refreshes_total", "outcome"),
        "checks": _by(samples, f"{p}credential_checks_total", "outcome"),
        "rate_limited": _by(samples, f"{p}rate_limit_refusals_total", "transport"),
        "chain": {
            "head": _one(samples, f"{p}audit_chain_head_seq"),
            "witness_lag": _one(samples, f"{p}audit_witness_lag_events"),
            "witness_age": _one(samples, f"{p}audit_witness_age_seconds"),
            "refused": _one(samples, f"{p}audit_refused_total"),
        },
        "devices": sorted(devices.items()),
        "pool": {
            "size": _one(samples, f"{p}db_pool_size"),
            **{k[0]: v for k, v in _by(samples, f"{p}db_pool_connections", "state").items()},
        },
        "statements": {"count": count, "mean_ms": total / count * 1000 if count else None},
    }


def console_figures_routes(state: WebState) -> APIRouter:
    console, router = Console(state), APIRouter()
    probe = ReadinessProbe(state.vault)

    @router.get("/figures")
    async def figures_page(request: Request) -> Response:
        user = await console.signed_in(request, "operator", "auditor")
        if isinstance(user, Response):
            return user
        found = await run_in_threadpool(figures, probe)
        return state.render(request, "figures.html", user=user, **found)

    return router
