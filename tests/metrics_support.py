"""Reading a Prometheus scrape in the tests: parsed by `prometheus_client`'s own parser, a
sample's value by name and labels, and every label value held to the set `/metrics` may
show (`ALLOWED`)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from toolkit_vault.protocol import _REQUESTS
from toolkit_vault.telemetry.metrics import (
    CHECK_OUTCOMES,
    CONFIGURE_OUTCOMES,
    MCP_EVENTS,
    MCP_STATES,
    OAUTH_OUTCOMES,
    REQUEST_OUTCOMES,
    TOOL_OUTCOMES,
    TRANSPORTS,
    VaultMetrics,
)

__all__ = ["ALLOWED", "outside", "parse", "scrape", "value"]

OTHER = "other"
ALLOWED: dict[str, frozenset[str] | None] = {
    "transport": TRANSPORTS,
    "type": frozenset({*_REQUESTS, "invalid", OTHER}),  # the types a request may have
    "outcome": REQUEST_OUTCOMES | CONFIGURE_OUTCOMES | TOOL_OUTCOMES | OAUTH_OUTCOMES
    | CHECK_OUTCOMES | {OTHER},
    "state": MCP_STATES | {"in_use", "idle"},
    "event": MCP_EVENTS | {OTHER},
    "kind": frozenset({"file", "syslog", "stdout"}),
    "device": frozenset(str(n) for n in range(16)),
    "toolkit": None,  # the registered toolkits' names: the test passes them
    "tool": None,
    "le": None,  # a histogram's bucket bounds
}  # fmt: skip


def parse(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def scrape(metrics: VaultMetrics) -> list[Sample]:
    """What `/metrics` would answer for `metrics`, parsed."""
    return parse(generate_latest(metrics.registry).decode())


def value(samples: Iterable[Sample], name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0: none)."""
    return sum(
        s.value for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )  # fmt: skip


def outside(samples: Iterable[Sample], names: Iterable[str] = ()) -> list[tuple[str, str, str]]:
    """Every (sample, label, value) outside `ALLOWED`; `names`: the toolkit and tool names
    allowed (with `other`)."""
    named = {*names, OTHER}
    found = []
    for sample in samples:
        for label, given in sample.labels.items():
            allowed = ALLOWED.get(label, frozenset())
            if label == "le":
                continue
            if allowed is None:
                allowed = frozenset(named)
            if given not in allowed:
                found.append((sample.name, label, given))
    return found
