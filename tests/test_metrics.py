"""The metrics' own rules, on a `VaultMetrics` of the test's: the tool-call hook the engine
calls (each outcome counted, its latency observed), the MCP server gauges and counters,
labels held to their sets and caps, a soak of made-up names that leaves the series count
bounded, and metrics turned off counting nothing."""

from __future__ import annotations

import random
import string
import subprocess
import sys
import threading

import pytest

from metrics_support import outside, scrape, value
from toolkit_vault.telemetry.labels import NAME_SHAPE, OTHER, BoundedNames
from toolkit_vault.telemetry.metrics import (
    MESSAGE_TYPES_CAP,
    TOOL_OUTCOMES,
    TOOLKITS_CAP,
    TOOLS_CAP,
    VaultMetrics,
)

CALLS = "toolkit_vault_tool_calls_total"


def test_each_tool_call_outcome_is_counted_with_its_latency() -> None:
    metrics = VaultMetrics()
    for n, outcome in enumerate(sorted(TOOL_OUTCOMES)):
        for _ in range(n + 1):
            metrics.observe_tool_call("filesystem", "read_file", outcome, 0.003)
    samples = scrape(metrics)
    for n, outcome in enumerate(sorted(TOOL_OUTCOMES)):
        assert value(samples, CALLS, toolkit="filesystem", tool="read_file", outcome=outcome) == (
            n + 1
        )
    calls = sum(range(1, len(TOOL_OUTCOMES) + 1))
    seconds = "toolkit_vault_tool_call_seconds"
    assert value(samples, f"{seconds}_count", toolkit="filesystem", tool="read_file") == calls
    assert value(samples, f"{seconds}_bucket", le="0.005", toolkit="filesystem") == calls
    assert value(samples, f"{seconds}_bucket", le="0.0025", toolkit="filesystem") == 0
    assert not outside(samples, ["filesystem", "read_file"])


def test_an_unknown_outcome_and_a_name_that_is_not_one_are_other() -> None:
    metrics = VaultMetrics()
    metrics.observe_tool_call("filesystem", "read_file", "exploded", 0.1)
    metrics.observe_tool_call("/etc/passwd", "read_file", "ok", 0.1)
    metrics.observe_tool_call("filesystem", "sk-live 123 secret", "ok", 0.1)
    metrics.observe_request("http", "tkv_sometoken value", "ok", 0.1)
    samples = scrape(metrics)
    assert value(samples, CALLS, toolkit="filesystem", tool="read_file", outcome=OTHER) == 1
    assert value(samples, CALLS, toolkit=OTHER, tool=OTHER, outcome="ok") == 1
    assert value(samples, CALLS, toolkit="filesystem", tool=OTHER, outcome="ok") == 1
    assert value(samples, "toolkit_vault_requests_total", type=OTHER) == 1
    text = "".join(str(s) for s in samples)
    assert "passwd" not in text and "secret" not in text and "tkv_" not in text
    assert not outside(samples, ["filesystem", "read_file"])


def test_mcp_server_processes_and_events() -> None:
    metrics = VaultMetrics()
    metrics.set_mcp_server_processes("running", 3)
    metrics.set_mcp_server_processes("starting", 1)
    metrics.set_mcp_server_processes("exploded", 9)  # not a state: ignored
    metrics.observe_mcp_server("github", "started")
    metrics.observe_mcp_server("github", "restarted")
    metrics.observe_mcp_server("github", "restarted")
    metrics.observe_mcp_server("github", "failed")
    metrics.set_mcp_remote_connections(2)
    samples = scrape(metrics)
    assert value(samples, "toolkit_vault_mcp_server_processes", state="running") == 3
    assert value(samples, "toolkit_vault_mcp_server_processes", state="starting") == 1
    events = "toolkit_vault_mcp_server_events_total"
    assert value(samples, events, toolkit="github", event="restarted") == 2
    assert value(samples, events, toolkit="github", event="failed") == 1
    assert value(samples, "toolkit_vault_mcp_remote_connections") == 2
    assert not outside(samples, ["github"])


def test_a_soak_of_made_up_names_leaves_the_series_count_bounded() -> None:
    metrics = VaultMetrics()
    rng = random.Random(54)

    def made_up() -> str:
        return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 20)))

    outcomes = sorted(TOOL_OUTCOMES)
    for _ in range(20_000):
        metrics.observe_tool_call(made_up(), made_up(), rng.choice(outcomes), rng.random())
        metrics.observe_request("websocket", made_up(), "ok", 0.001)
        metrics.observe_mcp_server(made_up(), "started")
    samples = scrape(metrics)
    toolkits = {s.labels["toolkit"] for s in samples if s.name == CALLS}
    pairs = {(s.labels["toolkit"], s.labels["tool"]) for s in samples if s.name == CALLS}
    types = {s.labels["type"] for s in samples if s.name == "toolkit_vault_requests_total"}
    assert len(toolkits) <= TOOLKITS_CAP + 1 and len(pairs) <= TOOLS_CAP + TOOLKITS_CAP + 1
    assert len(types) <= MESSAGE_TYPES_CAP + 1
    # Every series: at most the caps times the fixed sets, whatever was sent.
    assert len(samples) < 250_000
    before = len(samples)
    for _ in range(5_000):  # more of the same: no new series
        metrics.observe_tool_call(made_up(), made_up(), rng.choice(outcomes), rng.random())
    assert len(scrape(metrics)) <= before + len(outcomes) * 2 * 20  # only buckets filling in


def test_bounded_names_admit_up_to_the_cap() -> None:
    names = BoundedNames(2)
    assert [names.admit(n) for n in ("a", "b", "c", "a")] == ["a", "b", OTHER, "a"]
    assert names.admit("with space") == OTHER and NAME_SHAPE.fullmatch("x" * 64)
    assert BoundedNames(5).admit("x" * 65) == OTHER


def test_metrics_turned_off_count_nothing() -> None:
    metrics = VaultMetrics(enabled=False)
    metrics.observe_tool_call("filesystem", "read_file", "ok", 0.1)
    metrics.observe_configure("ok")
    metrics.observe_rate_limited("http")
    metrics.observe_statement(0.01)
    samples = scrape(metrics)
    assert value(samples, CALLS) == 0
    assert value(samples, "toolkit_vault_configures_total") == 0
    assert value(samples, "toolkit_vault_db_statement_seconds_count") == 0


def test_requests_share_one_histogram_by_type_and_no_count_is_lost_across_threads() -> None:
    """The tallies (`telemetry.tallies`): outcomes apart in the counter and together in the
    histogram, a value at a bound in that bound's bucket, buckets cumulative; threads
    counting at once lose nothing; a made-up type is not cached past its series."""
    metrics = VaultMetrics()
    kind = "toolkit/list/req"
    for outcome, seconds in (("ok", 0.0004), ("ok", 0.005), ("error", 0.003), ("refused", 40)):
        metrics.observe_request("http", kind, outcome, seconds)

    def count() -> None:
        for _ in range(5_000):
            metrics.observe_request("websocket", kind, "ok", 0.001)

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n in range(3 * MESSAGE_TYPES_CAP):
        metrics.observe_request("stdio", f"made/up/{n}", "ok", 0.001)
    samples = scrape(metrics)
    requests, seconds = "toolkit_vault_requests_total", "toolkit_vault_request_seconds"
    assert [value(samples, requests, type=kind, outcome=o) for o in ("ok", "error", "refused")] == [
        2 + 20_000,
        1,
        1,
    ]
    http = {"transport": "http", "type": kind}
    assert value(samples, f"{seconds}_count", **http) == 4
    assert value(samples, f"{seconds}_sum", **http) == pytest.approx(40.0084)
    bounds = ("0.0005", "0.0025", "0.005", "30.0", "+Inf")
    buckets = {le: value(samples, f"{seconds}_bucket", le=le, **http) for le in bounds}
    assert buckets == {"0.0005": 1, "0.0025": 1, "0.005": 3, "30.0": 3, "+Inf": 4}
    assert value(samples, f"{seconds}_count", transport="websocket") == 20_000
    assert len(metrics._requests) <= 3 + 1 + MESSAGE_TYPES_CAP  # what the series allow


def test_prometheus_client_is_imported_at_the_first_use_of_the_registry() -> None:
    """Counting (statements, requests, configures) needs no `prometheus_client`; the registry
    and the metrics on `prometheus_client`'s own are made once, at their first use, and the
    registry then holds every family, the ones counted before included."""
    code = (
        "import sys, threading\n"
        "from toolkit_vault.telemetry.metrics import VaultMetrics\n"
        "m = VaultMetrics()\n"
        "m.observe_statement(0.001); m.observe_request('http', 'x', 'ok', 0.01)\n"
        "m.observe_configure('ok')\n"
        "before = 'prometheus_client' in sys.modules\n"
        "seen = []\n"
        "threads = [threading.Thread(target=lambda: seen.append(m.registry)) for _ in range(8)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "names = sorted(f.name for f in m.registry.collect())\n"
        "print(before, 'prometheus_client' in sys.modules, len({id(r) for r in seen}))\n"
        "print(' '.join(names))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, names = done.stdout.splitlines()
    assert first.split() == ["False", "True", "1"]
    for family in ("db_statement_seconds", "requests", "configures", "mcp_server_processes"):
        assert f"toolkit_vault_{family}" in names.split()
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        VaultMetrics().nope  # noqa: B018
