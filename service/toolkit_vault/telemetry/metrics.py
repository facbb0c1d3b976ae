"""The vault's Prometheus metrics: what happened, counted as it happens.

One `VaultMetrics` per process (`METRICS`), on a registry of its own (not
`prometheus_client`'s global one, which a library may fill): the store, the core, the tool
engine and the transports call the `observe_*` functions below, and `/metrics` renders
`METRICS.registry` (with what `readings` reads at scrape time). Turned off
(`TOOLKIT_VAULT_METRICS=off`), every `observe_*` returns at its first line.

What every request or statement counts (messages, statements, configures, tool calls) is
kept in `tallies`: a message answered costs a dictionary lookup by the values given, a
`bisect` and two additions under one lock, and Prometheus's shapes are built when it
scrapes. What happens now and then (MCP server events, refreshes, credential checks, rate
limit refusals) stays on `prometheus_client`'s own metrics, children cached by their label
values. Labels are bounded (`labels`): fixed sets for transports and outcomes, capped
names for message types, toolkits and tools.

`prometheus_client` is imported, and the registry and its own metrics made, at their first
use (a scrape, an MCP server event, ...): a command that only counts statements (a CLI
listing) never needs it (issue 53).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from toolkit_vault.telemetry.labels import (
    NAME_SHAPE,
    OTHER,
    PREFIX,
    TYPE_SHAPE,
    BoundedNames,
    fixed,
)
from toolkit_vault.telemetry.readings import Readings
from toolkit_vault.telemetry.tallies import Series, Tally, Timings

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = [
    "CHECK_OUTCOMES",
    "CONFIGURE_OUTCOMES",
    "MCP_STATES",
    "METRICS",
    "OAUTH_OUTCOMES",
    "REQUEST_OUTCOMES",
    "TOOL_OUTCOMES",
    "TRANSPORTS",
    "VaultMetrics",
    "observe_configure",
    "observe_credential_check",
    "observe_mcp_server",
    "observe_oauth_refresh",
    "observe_rate_limited",
    "observe_request",
    "observe_statement",
    "observe_tool_call",
    "set_mcp_remote_connections",
    "set_mcp_server_processes",
]

TRANSPORTS = frozenset({"http", "websocket", "stdio", "mcp"})
REQUEST_OUTCOMES = frozenset(
    {"ok", "error", "refused"}
)  # refused: by the gate (401, 403, 429, 413)
CONFIGURE_OUTCOMES = frozenset({"ok", "partial", "error", "refused", "intake"})
TOOL_OUTCOMES = frozenset({"ok", "tool_error", "refused", "timeout", "cancelled", "withheld"})
OAUTH_OUTCOMES = frozenset({"refreshed", "refused", "unavailable"})
CHECK_OUTCOMES = frozenset({"passed", "rejected", "busy"})
MCP_STATES = frozenset({"running", "starting"})
MCP_EVENTS = frozenset({"started", "restarted", "failed"})
INVALID = "invalid"  # the message type of a request that did not parse

MESSAGE_TYPES_CAP = 64  # the protocol has fewer than 20; MCP's methods fit too
TOOLKITS_CAP = 200
TOOLS_CAP = 1_000  # (toolkit, tool) pairs
# Seconds. A list answered from memory takes well under a millisecond; a configure with a
# credential check or a tool call to a remote server takes seconds.
_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_STATEMENT = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2)


# `VaultMetrics`'s attributes made at their first use (`_own`), with `prometheus_client`
_OWN = frozenset(
    {
        "registry",
        "mcp_processes",
        "mcp_events",
        "mcp_remote",
        "oauth_refreshes",
        "credential_checks",
        "rate_limited",
    }
)


class VaultMetrics:
    """The process's metrics on their own registry."""

    # made by `_own` at the first use of any of them (`__getattr__`), then plain attributes
    registry: CollectorRegistry
    mcp_processes: Gauge
    mcp_events: Counter
    mcp_remote: Gauge
    oauth_refreshes: Counter
    credential_checks: Counter
    rate_limited: Counter

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.requests = Timings(
            f"{PREFIX}_request_seconds", "Time to answer a message, by transport and type",
            ["transport", "type"], _LATENCY, counted=(f"{PREFIX}_requests",
            "A2E (and MCP) messages answered, by transport, message type and outcome"),
        )  # fmt: skip
        self.configures = Tally(
            f"{PREFIX}_configures", "toolkit/configure requests by outcome", ["outcome"]
        )
        self.tool_calls = Timings(
            f"{PREFIX}_tool_call_seconds", "Tool call duration by toolkit and tool",
            ["toolkit", "tool"], _LATENCY,
            counted=(f"{PREFIX}_tool_calls", "Tool calls by toolkit, tool and outcome"),
        )  # fmt: skip
        self.statements = Timings(
            f"{PREFIX}_db_statement_seconds", "Database statement latency", (), _STATEMENT
        )
        self.readings = Readings()  # figures read at scrape time (`readings`)
        self._own_lock = threading.Lock()
        self._types = BoundedNames(MESSAGE_TYPES_CAP, (INVALID,), shape=TYPE_SHAPE)
        self._toolkits = BoundedNames(TOOLKITS_CAP)
        self._tools = BoundedNames(TOOLS_CAP, shape=None)  # pairs of names checked apart
        self._children: dict[tuple[Any, ...], Any] = {}
        # The series of the values given, once those values are their own labels (a value
        # made `other` takes the slow path each time, so these hold no more than the series).
        self._requests: dict[tuple[str, str, str], Series] = {}  # `observe_request`
        self._calls: dict[tuple[str, str, str], Series] = {}  # `observe_tool_call`
        self._statements = self.statements.series(())
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        """The registry and `prometheus_client`'s own metrics: made at the first use."""
        if name not in _OWN:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._own()
        return self.__dict__[name]

    def _own(self) -> None:
        """Import `prometheus_client`; make the registry, register the tallies and readings
        on it, and make the metrics counted on `prometheus_client`'s own (once)."""
        from prometheus_client import CollectorRegistry, Counter, Gauge

        with self._own_lock:
            if "registry" in self.__dict__:
                return
            r = CollectorRegistry(auto_describe=True)
            for tallied in (self.requests, self.configures, self.tool_calls, self.statements):
                r.register(tallied)
            made: dict[str, Any] = {
                "mcp_processes": Gauge(
                    f"{PREFIX}_mcp_server_processes", "Local MCP server processes by state",
                    ["state"], registry=r,
                ),
                "mcp_events": Counter(
                    f"{PREFIX}_mcp_server_events", "Local MCP server starts, restarts and "
                    "failures, by toolkit", ["toolkit", "event"], registry=r,
                ),
                "mcp_remote": Gauge(
                    f"{PREFIX}_mcp_remote_connections", "Open sessions to remote MCP servers",
                    registry=r,
                ),
                "oauth_refreshes": Counter(
                    f"{PREFIX}_oauth_refreshes", "OAuth token refreshes by outcome", ["outcome"],
                    registry=r,
                ),
                "credential_checks": Counter(
                    f"{PREFIX}_credential_checks", "Credential checks by outcome", ["outcome"],
                    registry=r,
                ),
                "rate_limited": Counter(
                    f"{PREFIX}_rate_limit_refusals", "Requests refused by a rate limit, by "
                    "transport", ["transport"], registry=r,
                ),
            }  # fmt: skip
            r.register(self.readings)
            for state in MCP_STATES:
                made["mcp_processes"].labels(state=state).set(0)
            self.__dict__.update(made)
            self.__dict__["registry"] = r  # last: it says the rest is made

    def _child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, cached: the hot path skips its checks and lock."""
        key = (id(metric), *values)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children[key] = metric.labels(*values)
        return child

    def observe_request(self, transport: str, kind: str, outcome: str, seconds: float) -> None:
        """One message answered: the busiest call."""
        if not self.enabled:
            return
        series = self._requests.get((transport, kind, outcome))
        if series is None:
            series = self._request_series(transport, kind, outcome)
        self.requests.observe(series, seconds)

    def _request_series(self, transport: str, kind: str, outcome: str) -> Series:
        given = (transport, kind, outcome)
        transport, kind = fixed(transport, TRANSPORTS), self._types.admit(kind)
        outcome = fixed(outcome, REQUEST_OUTCOMES)
        series = self.requests.series((transport, kind), outcome)
        if (transport, kind, outcome) == given:
            self._requests[given] = series
        return series

    def observe_configure(self, outcome: str) -> None:
        if self.enabled:
            self.configures.inc((fixed(outcome, CONFIGURE_OUTCOMES),))

    def observe_tool_call(self, toolkit: str, tool: str, outcome: str, seconds: float) -> None:
        """One tool call. Pass the names of a registered toolkit and its tool; a refusal
        for one that does not exist passes `OTHER` for both (the name is the agent's)."""
        if not self.enabled:
            return
        given = (toolkit, tool, outcome)
        series = self._calls.get(given)
        if series is None:
            toolkit, tool = self.tool_labels(toolkit, tool)
            outcome = fixed(outcome, TOOL_OUTCOMES)
            series = self.tool_calls.series((toolkit, tool), outcome)
            if (toolkit, tool, outcome) == given:
                self._calls[given] = series
        self.tool_calls.observe(series, seconds)

    def tool_labels(self, toolkit: str, tool: str) -> tuple[str, str]:
        """The label values of a (toolkit, tool): each bounded, the pair bounded too."""
        toolkit = self._toolkits.admit(toolkit)
        if toolkit == OTHER:
            return OTHER, OTHER
        if not NAME_SHAPE.fullmatch(tool) or self._tools.admit(f"{toolkit}/{tool}") == OTHER:
            return toolkit, OTHER
        return toolkit, tool

    def observe_mcp_server(self, toolkit: str, event: str) -> None:
        """A local MCP server `started`, `restarted` or `failed`."""
        if self.enabled:
            toolkit = self._toolkits.admit(toolkit)
            self._child(self.mcp_events, toolkit, fixed(event, MCP_EVENTS)).inc()

    def set_mcp_server_processes(self, state: str, count: int) -> None:
        """How many local MCP server processes are `running` or `starting` now."""
        if self.enabled and state in MCP_STATES:
            self._child(self.mcp_processes, state).set(count)

    def set_mcp_remote_connections(self, count: int) -> None:
        if self.enabled:
            self.mcp_remote.set(count)

    def observe_oauth_refresh(self, outcome: str) -> None:
        if self.enabled:
            self._child(self.oauth_refreshes, fixed(outcome, OAUTH_OUTCOMES)).inc()

    def observe_credential_check(self, outcome: str) -> None:
        if self.enabled:
            self._child(self.credential_checks, fixed(outcome, CHECK_OUTCOMES)).inc()

    def observe_rate_limited(self, transport: str) -> None:
        if self.enabled:
            self._child(self.rate_limited, fixed(transport, TRANSPORTS)).inc()

    def observe_statement(self, seconds: float) -> None:
        if self.enabled:
            self.statements.observe(self._statements, seconds)


METRICS = VaultMetrics()

# The process's metrics, as functions: what the layers above call.
observe_request = METRICS.observe_request
observe_configure = METRICS.observe_configure
observe_tool_call = METRICS.observe_tool_call
observe_mcp_server = METRICS.observe_mcp_server
set_mcp_server_processes = METRICS.set_mcp_server_processes
set_mcp_remote_connections = METRICS.set_mcp_remote_connections
observe_oauth_refresh = METRICS.observe_oauth_refresh
observe_credential_check = METRICS.observe_credential_check
observe_rate_limited = METRICS.observe_rate_limited
observe_statement = METRICS.observe_statement
