"""Issue 48, item 3: a slow `x-verify` answer neither outlives the check's deadline nor
stalls other agents. Headers dripped a byte at a time kept each read under its timeout
(the deadline was per read): a configure was held for as long as the drip lasted, and on
SQLite, where A2E messages share two worker threads, two such checks stalled every other
agent's handshake. Now the deadline bounds the whole check, checks run on threads of their
own, and a check beyond the cap in flight is refused at once. On SQLite, where it bit."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from http_support import QuietHandler, loopback_http
from test_verify_logs import AGENT, HELLO, QueryChecked, check_env, configure, serving
from toolkit_vault.access.principals import create_token
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.core.verification import CheckSlots, VerifyPolicy
from toolkit_vault.toolkits.registry import SourceKind, ToolkitSource

pytestmark = pytest.mark.one_database

__all__ = ["check_env"]  # a fixture, used below by name

DRIP_S = 0.25  # between two bytes of the answer's head: far under any read timeout
DRIP_FOR_S = 14  # how long the head drips before it ends (then the answer is a 200)
DEADLINE_MARGIN_S = 2.5


class Dripping(QuietHandler):
    """Answers with a head that arrives a byte every `DRIP_S`, for `DRIP_FOR_S`."""

    def do_GET(self) -> None:
        head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * int(DRIP_FOR_S / DRIP_S)
        try:
            for byte in head:
                self.wfile.write(bytes([byte]))
                time.sleep(DRIP_S)
            self.wfile.write(b"\r\nContent-Length: 2\r\n\r\n{}")
        except OSError:
            pass  # the check hung up: what it should do


@pytest.fixture(scope="module")
def dripping() -> Iterator[str]:
    with loopback_http(Dripping) as base:
        yield base


def test_a_dripping_answer_is_cut_at_the_total_deadline(vault: Vault, dripping: str) -> None:
    vault.verify_policy = VerifyPolicy(VerifyPolicy.parse("127.0.0.0/8").allow, deadline=1.0)
    vault.registry.register(QueryChecked, ToolkitSource(SourceKind.ENTRY_POINT, "issue-48"))
    conn = connect(vault, AGENT)
    conn.handle_raw(json.dumps(HELLO))
    started = time.monotonic()
    answer = json.loads(conn.handle_raw(json.dumps(configure(dripping, "slow-key-1")))[0])
    took = time.monotonic() - started
    assert answer["status"] == "error", answer
    assert answer["message"] == "the credential check did not answer within 1 s (127.0.0.1)"
    assert took < 1.0 + DEADLINE_MARGIN_S, took


def test_a_check_beyond_the_cap_is_refused_at_once(vault: Vault, dripping: str) -> None:
    vault.verify_policy = VerifyPolicy(VerifyPolicy.parse("127.0.0.0/8").allow, deadline=2.0)
    vault.check_slots = CheckSlots(1)
    vault.registry.register(QueryChecked, ToolkitSource(SourceKind.ENTRY_POINT, "issue-48"))
    first = connect(vault, AGENT)
    first.handle_raw(json.dumps(HELLO))
    held = threading.Thread(
        target=first.handle_raw, args=(json.dumps(configure(dripping, "slow-key-2")),)
    )
    held.start()
    time.sleep(0.5)  # the first check is in flight
    second = connect(vault, AGENT)
    second.handle_raw(json.dumps(HELLO))
    started = time.monotonic()
    answer = json.loads(second.handle_raw(json.dumps(configure(dripping, "slow-key-3")))[0])
    assert time.monotonic() - started < 0.5
    assert answer["status"] == "error"
    assert "too many credential checks in flight" in answer["message"], answer
    held.join()


def test_drip_checks_in_flight_do_not_stall_another_agent(
    vault: Vault, check_env: dict[str, str], tmp_path: Path, dripping: str
) -> None:
    """Two configures whose checks drip, on one `serve` (deadline 5 s); meanwhile another
    agent's handshake and list answer at once, and both configures end at the deadline."""
    tokens = [create_token(vault.store, "agent", f"agent-{n}")[1] for n in range(3)]
    answers: list[tuple[float, dict[str, Any]]] = []

    with serving(check_env, tmp_path / "serve.log") as base:

        def configure_slowly(token: str) -> None:
            with httpx.Client(base_url=base, timeout=60) as client:
                auth = {"Authorization": f"Bearer {token}"}
                session = client.post("/a2e", json=HELLO, headers=auth).json()["session_id"]
                started = time.monotonic()
                ask = configure(dripping, f"slow-key-{token[-6:]}")
                reply = client.post("/a2e", json=ask, headers=auth | {"A2E-Session": session})
                answers.append((time.monotonic() - started, reply.json()))

        slow = [threading.Thread(target=configure_slowly, args=(t,)) for t in tokens[:2]]
        for thread in slow:
            thread.start()
        time.sleep(1.5)  # both checks are dripping now
        auth = {"Authorization": f"Bearer {tokens[2]}"}
        with httpx.Client(base_url=base, timeout=60) as bystander:
            started = time.monotonic()
            hello = bystander.post("/a2e", json=HELLO, headers=auth).json()
            listed = bystander.post(
                "/a2e",
                json={"type": "toolkit/list/req"},
                headers=auth | {"A2E-Session": hello["session_id"]},
            ).json()
            took = time.monotonic() - started
        assert listed["type"] == "toolkit/list/resp", listed
        assert took < 2.0, f"a bystander's handshake and list took {took:.1f} s"
        for thread in slow:
            thread.join()
    assert len(answers) == 2
    for waited, answer in answers:
        assert answer["status"] == "error", answer
        assert "did not answer within 5 s" in answer["message"]
        assert waited < 5 + DEADLINE_MARGIN_S, waited
