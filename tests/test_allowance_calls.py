"""Who may call what, and how often, through the call engine (issue 50): an agent narrowed
to one tool sees and calls only that one, every other call refused `not_allowed` before any
tool runs (in this process or after a narrowing made in another); an instance past its
concurrency and an agent past its rate are refused `busy`, the others still served. On
SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spec_support import call_tool, configure, send
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.allowances import remove_allowance, set_allowance
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.tools.calls import CallRecord
from toolkit_vault.tools.limits import CallAdmission

TOOL_DIST = Path(__file__).parent / "plugins" / "tool_dist"
CALLING = {"endpoint": "https://api.test", "api_key": "tkv-canary-allow-3c1d"}


@pytest.fixture
def tool_vault(home: VaultSettings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vault]:
    """A vault with the `calling` toolkit installed (this test only), its call records
    kept in `vault.records`."""
    monkeypatch.syspath_prepend(str(TOOL_DIST))
    opened = open_vault(home)
    records: list[CallRecord] = []
    opened.record_call = records.append
    opened.records = records  # type: ignore[attr-defined]
    calling().invoked.clear()
    calling().started.clear()
    yield opened
    opened.store.close()


def calling() -> Any:
    import tkv_tool_plugins

    return tkv_tool_plugins.CallingToolkit


class Agent:
    """An agent with `filesystem` and `calling` configured in one session."""

    def __init__(self, vault: Vault, principal_id: str, root: Path) -> None:
        self.principal = Principal(principal_id, "agent")
        self.conn = connect(vault, self.principal)
        (hello,) = send(self.conn, {"type": "handshake/req", "capabilities": ["toolkits", "tools"]})
        self.session_id = hello["session_id"]
        assert configure(self.conn, "filesystem", {"root_dir": str(root)})[0]["status"] == "ok"
        assert configure(self.conn, "calling", CALLING)[0]["status"] == "ok"

    def call(self, toolkit: str, tool: str, **arguments: Any) -> dict[str, Any]:
        return call(self.conn, toolkit, tool, **arguments)

    def tools(self) -> set[tuple[str, str]]:
        (listed,) = send(self.conn, {"type": "tool/list/req"})
        return {(t["toolkit"], t["name"]) for t in listed["tools"]}


call = call_tool  # (spec_support)


def reason(answer: dict[str, Any]) -> str:
    assert (answer["type"], answer["code"]) == ("error", "RUNTIME_ERROR"), answer
    return str(answer["details"][0]["reason"])


@pytest.fixture
def agent(tool_vault: Vault, tmp_path: Path) -> Agent:
    principal_id, _ = create_token(tool_vault.store, "agent", "bot")
    return Agent(tool_vault, principal_id, tmp_path)


def test_an_agent_narrowed_to_one_tool_sees_and_calls_only_that_one(
    tool_vault: Vault, agent: Agent, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    set_allowance(
        tool_vault.store, "operator", tool_vault.toolkit, "bot", tools=[("filesystem", "read_file")]
    )
    assert agent.tools() == {("filesystem", "read_file")}
    read = agent.call("filesystem", "read_file", path="notes.txt")
    assert read["type"] == "tool/call/resp" and read["content"][0]["text"] == "hello", read
    refused = agent.call("filesystem", "write_file", path="notes.txt", content="overwritten")
    assert reason(refused) == "not_allowed"
    assert reason(agent.call("calling", "echo", text="hi")) == "not_allowed"
    assert (tmp_path / "notes.txt").read_text() == "hello"  # the refused write reached nothing
    assert calling().invoked == []
    assert [(r.tool, r.outcome) for r in tool_vault.records] == [  # type: ignore[attr-defined]
        ("read_file", "ok"),
        ("write_file", "refused"),
        ("echo", "refused"),
    ]
    remove_allowance(tool_vault.store, "operator", "bot")
    assert agent.call("calling", "echo", text="hi")["content"][0]["text"] == "hi"
    written = agent.call("filesystem", "write_file", path="notes.txt", content="now")
    assert written["type"] == "tool/call/resp", written
    assert (tmp_path / "notes.txt").read_text() == "now"


def test_a_narrowing_made_in_another_process_refuses_the_next_call_here(
    tool_vault: Vault, agent: Agent, home: VaultSettings
) -> None:
    assert agent.call("calling", "echo", text="hi")["type"] == "tool/call/resp"
    elsewhere = open_vault(home, current=False)  # another process: no `calling` toolkit
    try:
        set_allowance(
            elsewhere.store,
            "operator",
            tool_vault.toolkit,
            "bot",
            tools=[("filesystem", "list_dir")],
        )
    finally:
        elsewhere.store.close()
    assert reason(agent.call("calling", "echo", text="again")) == "not_allowed"
    assert calling().invoked == ["echo"]
    assert agent.call("filesystem", "list_dir", path=".")["type"] == "tool/call/resp"


def _slow_in_flight(conn: A2EConnection) -> tuple[threading.Thread, list[dict[str, Any]]]:
    answers: list[dict[str, Any]] = []
    message = {
        "type": "tool/call/req",
        "id": "slow-1",
        "toolkit_name": "calling",
        "tool_name": "slow",
        "arguments": {"seconds": 30},
    }
    thread = threading.Thread(target=lambda: answers.extend(send(conn, message)))
    thread.start()
    assert calling().started.wait(10)
    return thread, answers


def test_an_instance_at_its_concurrency_answers_busy_and_others_are_served(
    tool_vault: Vault, agent: Agent, tmp_path: Path
) -> None:
    tool_vault.call_limits = CallAdmission(rate=None, concurrency=1)
    other_id, _ = create_token(tool_vault.store, "agent", "other")
    other = Agent(tool_vault, other_id, tmp_path)
    thread, answers = _slow_in_flight(agent.conn)
    try:
        busy = agent.call("calling", "echo", text="me too")
        assert reason(busy) == "busy" and busy["details"][1] == {"limit": "concurrency"}
        assert agent.call("filesystem", "list_dir", path=".")["type"] == "tool/call/resp"
        assert other.call("calling", "echo", text="hi")["type"] == "tool/call/resp"  # its own
    finally:
        send(agent.conn, {"type": "tool/cancel/req", "call_id": "slow-1"})
        thread.join(10)
    assert not thread.is_alive() and answers
    assert agent.call("calling", "echo", text="now")["content"][0]["text"] == "now"
    assert calling().invoked.count("echo") == 2  # the other's and this one: not the busy one


def test_an_agent_past_its_rate_answers_busy_and_another_is_served(
    tool_vault: Vault, agent: Agent, tmp_path: Path
) -> None:
    tool_vault.call_limits = CallAdmission(rate=0.01, burst=2, concurrency=None)
    other_id, _ = create_token(tool_vault.store, "agent", "other")
    other = Agent(tool_vault, other_id, tmp_path)
    for _ in range(2):
        assert agent.call("calling", "echo", text="hi")["type"] == "tool/call/resp"
    busy = agent.call("calling", "echo", text="hi")
    assert reason(busy) == "busy" and busy["details"][1] == {"limit": "rate"}
    assert other.call("calling", "echo", text="hi")["type"] == "tool/call/resp"
    assert calling().invoked == ["echo", "echo", "echo"]
    assert [r.outcome for r in tool_vault.records] == [  # type: ignore[attr-defined]
        "ok",
        "ok",
        "refused",
        "ok",
    ]
