"""OAuth refreshes and credential checks counted by outcome (issue 54): against the real
authorization server of tests/oauth_server.py, a refresh that succeeds and one the server
refuses (`invalid_grant`); against tests/test_verification.py's upstream, a check that
passes and one that fails (the configure then counted `refused`); no issued token or key
in any label. The process's own metrics (`METRICS`), scraped as `/metrics` renders them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from metrics_support import outside, scrape, value
from test_oauth import Agent, Rig, connected, rig  # noqa: F401 (the fixture)
from test_verification import (
    BAD,
    BEARER,
    GOOD,
    LOOPBACK,
    configure,
    declared,
    registered,
    upstream,  # noqa: F401 (the fixture)
)
from toolkit_vault.core.vault import Vault
from toolkit_vault.telemetry.metrics import METRICS

pytestmark = pytest.mark.one_database

REFRESHES = "toolkit_vault_oauth_refreshes_total"


def test_refreshes_are_counted_by_outcome(rig: Rig) -> None:  # noqa: F811
    principal, _ = connected(rig)
    before = scrape(METRICS)
    rig.clock.offset = 2 * 3600  # the token expired: the next initialization refreshes it
    assert Agent(rig.sides[0].vault, principal).listed()["calendar"] is True
    refreshed = scrape(METRICS)
    assert (
        value(refreshed, REFRESHES, outcome="refreshed")
        - value(before, REFRESHES, outcome="refreshed")
        == 1
    )
    rig.auth.knobs.invalid_grant = True
    rig.clock.offset = 4 * 3600
    assert Agent(rig.sides[0].vault, principal).listed()["calendar"] is False
    after = scrape(METRICS)
    assert (
        value(after, REFRESHES, outcome="refused") - value(before, REFRESHES, outcome="refused")
        == 1
    )
    assert value(after, REFRESHES, outcome="refreshed") == value(
        refreshed, REFRESHES, outcome="refreshed"
    )
    assert rig.auth.refresh_calls == 2
    assert not outside(own(after), ["calendar", "filesystem"])
    text = json.dumps([(s.name, s.labels) for s in after])
    for issued in rig.auth.issued():
        assert issued not in text


def test_credential_checks_are_counted_by_outcome(
    vault: Vault,
    upstream: str,  # noqa: F811
) -> None:
    checks, configures = "toolkit_vault_credential_checks_total", "toolkit_vault_configures_total"
    vault.verify_policy = LOOPBACK
    registered(vault, declared("bearer", BEARER))
    before = scrape(METRICS)
    assert (
        configure(vault, "bearer", {"base": upstream, "path": "me", "api_key": GOOD})["status"]
        == "ok"
    )
    assert (
        configure(vault, "bearer", {"base": upstream, "path": "me", "api_key": BAD})["status"]
        == "error"
    )
    after = scrape(METRICS)
    for name, outcome in ((checks, "passed"), (checks, "rejected"), (configures, "ok")):
        assert value(after, name, outcome=outcome) - value(before, name, outcome=outcome) == 1
    assert (
        value(after, configures, outcome="refused") - value(before, configures, outcome="refused")
        == 1
    )
    assert value(after, configures, outcome="error") == value(before, configures, outcome="error")
    assert not outside(own(after), ["bearer", "calendar", "filesystem"])
    text = json.dumps([(s.name, s.labels) for s in after])
    assert GOOD not in text and BAD not in text


EARLIER_TESTS = ("toolkit_vault_tool_call", "toolkit_vault_mcp_server")


def own(samples: list[Any]) -> list[Any]:
    """The samples of this process's registry but the tool calls' and the imported servers':
    those count the calls and servers of every earlier test in this worker (toolkits of
    theirs, names the registry bounds; tests/test_metrics.py holds those labels to the
    allowed set)."""
    return [s for s in samples if not s.name.startswith(EARLIER_TESTS)]
