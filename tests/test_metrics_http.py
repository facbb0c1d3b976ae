"""`/metrics` on a real `serve` (issue 54): who may scrape it, and a scrape parsed with
`prometheus_client`'s parser after configures (stored, refused), a message that did not
parse, a refused token, requests over the rate limit and an audit device that fails:
each counter moves, the scrape-time figures are there, and no label value is outside the
set `/metrics` may show (no token, session id or submitted value among them). `/readyz`
answers ready. The OAuth refresh counter is in tests/test_metrics_oauth.py; the tool-call
hook in tests/test_metrics.py."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.samples import Sample

from metrics_support import outside, parse, value
from test_audit_devices import dead_port
from test_http import CANARY, HELLO, Server, running_server
from toolkit_vault.core.vault import Vault

pytestmark = pytest.mark.one_database

REQUESTS = "toolkit_vault_requests_total"
CONFIGURES = "toolkit_vault_configures_total"


def scrape(server: Server, token: str) -> list[Sample]:
    answer = httpx.get(server.base + "/metrics", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=")
    return parse(answer.text)


def flood(server: Server, token: str) -> int:
    """Requests from 8 threads until one is refused by the rate limit (at most 30 s, on a
    machine however slow); 429, or the last status seen."""
    deadline, seen = time.monotonic() + 30, [200]

    def one(_: int) -> int:
        while seen[-1] != 429 and time.monotonic() < deadline:
            seen.append(server.post(token, HELLO).status_code)
        return seen[-1]

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(8)))
    return 429 if 429 in seen else seen[-1]


def test_a_scrape_after_each_kind_of_work_shows_each_counter_move(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    dead = f"syslog+tcp://127.0.0.1:{dead_port()}"
    env = {**cli_env, "TOOLKIT_VAULT_AUDIT_DEVICES": dead}  # fail-open: writes go on
    with running_server(env, tmp_path / "serve.log", "--rate", "5") as base:
        server = Server(base, vault)
        agent, auditor = server.token("agent", "agent-m"), server.token("auditor", "aud-m")
        operator, flooder = server.token("operator", "op-m"), server.token("agent", "flood")
        assert httpx.get(base + "/metrics").status_code == 401
        refused = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {agent}"})
        assert refused.status_code == 403 and "operator" in refused.text
        scrape(server, operator)
        before = scrape(server, auditor)

        session = server.post(agent, HELLO).json()["session_id"]
        stored = {"type": "toolkit/configure/req", "toolkit_name": "secretive"}
        config = {"endpoint": "https://x.test", "api_key": CANARY}
        assert server.post(agent, {**stored, "config": config}, session).json()["status"] == "ok"
        invalid = server.post(agent, {**stored, "config": {"endpoint": 5}}, session).json()
        assert invalid["type"] == "error"
        unknown = {**stored, "toolkit_name": f"no-such-{CANARY}", "config": {}}
        assert server.post(agent, unknown, session).json()["type"] == "error"
        assert server.post(agent, "not json", session).json()["code"] == "INVALID_MESSAGE"
        assert server.post("tkv_not_a_token", HELLO).status_code == 401
        assert flood(server, flooder) == 429

        deadline = time.monotonic() + 15  # the device's thread fails the events meanwhile
        while True:
            after = scrape(server, auditor)
            failed = value(after, "toolkit_vault_audit_device_failed_total", kind="syslog")
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.2)

        def moved(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        configure = "toolkit/configure/req"
        assert moved(REQUESTS, transport="http", type="handshake/req", outcome="ok") >= 2
        assert moved(REQUESTS, transport="http", type=configure, outcome="ok") == 1
        assert moved(REQUESTS, transport="http", type=configure, outcome="error") == 2
        assert moved(REQUESTS, transport="http", type="invalid", outcome="error") == 1
        assert moved(REQUESTS, transport="http", type="invalid", outcome="refused") >= 1 + 1
        assert moved(CONFIGURES, outcome="ok") == 1
        assert moved(CONFIGURES, outcome="refused") == 2
        assert moved("toolkit_vault_rate_limit_refusals_total", transport="http") >= 1
        assert moved("toolkit_vault_request_seconds_count", transport="http") >= 6
        assert moved("toolkit_vault_db_statement_seconds_count") > 0
        assert failed > 0, "the dead audit device's failures were not counted"
        assert value(after, "toolkit_vault_audit_device_failing", kind="syslog") == 1
        assert value(after, "toolkit_vault_audit_chain_head_seq") > 0
        assert value(after, "toolkit_vault_db_pool_size") > 0
        assert not outside(after, ["secretive", "filesystem"]), outside(after)
        text = json.dumps([(s.name, s.labels) for s in after])
        for never in (CANARY, session, agent, flooder, "agent-m", "flood", "tkv_"):
            assert never not in text

        ready = httpx.get(base + "/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready", "failures": []})


def test_metrics_turned_off_and_a_loopback_listener(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path
) -> None:
    with running_server({**cli_env, "TOOLKIT_VAULT_METRICS": "off"}, tmp_path / "off.log") as base:
        operator = Server(base, vault).token("operator", "op-off")
        off = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {operator}"})
        assert off.status_code == 404
    port = dead_port()
    env = {**cli_env, "TOOLKIT_VAULT_METRICS_LISTEN": f"127.0.0.1:{port}"}
    with running_server(env, tmp_path / "on.log") as base:
        plain = httpx.get(f"http://127.0.0.1:{port}/metrics")  # no token: loopback only
        assert plain.status_code == 200 and "toolkit_vault_requests_total" in plain.text
        assert httpx.get(base + "/metrics").status_code == 401  # the main listener: a token
    log = tmp_path / "public.log"
    env = {**cli_env, "TOOLKIT_VAULT_METRICS_LISTEN": "0.0.0.0:9464"}
    with pytest.raises(AssertionError, match="loopback HOST:PORT"), running_server(env, log):
        pass
