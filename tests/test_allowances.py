"""Allowances (issue 50): an operator narrows an agent to some toolkits and tools; its
`tool/list` shows only the tools it may call and its `toolkit/list` only the toolkits it
may use, on the worker path and on the event loop's, in this process and in another; every
change is an audited chain event, and widening restores the lists. Service API, A2E, `/v1`
and the console on SQLite and PostgreSQL; the command line (what it prints) on SQLite."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update
from starlette.testclient import TestClient

from cli_support import run_cli
from toolkit_vault.access.allowances import ToolAllowance, parse_tool
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.allowances import (
    PrincipalNotFound,
    get_allowance,
    list_allowances,
    remove_allowance,
    set_allowance,
)
from toolkit_vault.core.connection import connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import ToolkitNotFound, VaultError
from toolkit_vault.protocol import ToolkitListRequest, ToolListRequest
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.models import AuditEvent
from toolkit_vault.transports.http_api import Limits, create_app

FILESYSTEM_TOOLS = {"read_file", "write_file", "list_dir"}
READ = ("filesystem", "read_file")


class Agent:
    """An agent principal talking A2E in-process, with `filesystem` and `secretive`
    configured in its session."""

    def __init__(self, vault: Vault, principal_id: str, root: Path) -> None:
        self.principal = Principal(principal_id, "agent")
        self.conn = connect(vault, self.principal)
        hello = self.send({"type": "handshake/req", "capabilities": ["toolkits", "tools"]})
        self.session_id = hello["session_id"]
        fs = {"type": "toolkit/configure/req", "toolkit_name": "filesystem"}
        assert self.send({**fs, "config": {"root_dir": str(root)}})["status"] == "ok"
        secretive = {"endpoint": "https://api.example.test", "api_key": "k" * 12}
        configure = {"type": "toolkit/configure/req", "toolkit_name": "secretive"}
        assert self.send({**configure, "config": secretive})["status"] == "ok"

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads(self.conn.handle_raw(json.dumps(message))[0]))

    def tools(self) -> set[tuple[str, str]]:
        listed = self.send({"type": "tool/list/req"})
        return {(t["toolkit"], t["name"]) for t in listed["tools"]}

    def toolkits(self) -> dict[str, bool]:
        listed = self.send({"type": "toolkit/list/req"})
        return {t["name"]: t["configured"] for t in listed["toolkits"]}


def on_the_loop(vault: Vault, agent: Agent, msg: Any) -> dict[str, Any] | None:
    """What the event loop's path answers (None: it hands the list to a worker)."""
    answered = vault.answer_without_blocking(agent.principal, agent.session_id, msg)
    return None if answered is None else dict(json.loads(answered))


def answered_on_the_loop(vault: Vault, agent: Agent, within: float = 10) -> dict[str, Any] | None:
    """The loop's answer to a tool list once it gives one: it hands the list to a worker
    while another process's commit notice is on its way, or the listener has not been
    heard from lately (a loaded machine); a worker's read, as the hand-off makes, between
    tries."""
    deadline = time.monotonic() + within
    while (answered := on_the_loop(vault, agent, ToolListRequest())) is None:
        if time.monotonic() > deadline:
            return None
        agent.tools()
        time.sleep(0.05)
    return answered


@pytest.fixture
def agent(vault: Vault, tmp_path: Path) -> Agent:
    principal_id, _ = create_token(vault.store, "agent", "bot")
    return Agent(vault, principal_id, tmp_path)


def test_a_narrowed_agent_sees_only_what_it_may_call_until_widened(
    vault: Vault, agent: Agent
) -> None:
    everything = agent.tools()
    assert {name for kit, name in everything if kit == "filesystem"} == FILESYSTEM_TOOLS
    assert ("secretive", "call_api") in everything
    all_toolkits = agent.toolkits()
    assert all_toolkits["filesystem"] and all_toolkits["secretive"]

    set_allowance(vault.store, "operator", vault.toolkit, "bot", tools=[READ])
    assert agent.tools() == {("filesystem", "read_file")}
    assert agent.toolkits() == {"filesystem": True}  # the other toolkits are not its to use
    assert vault._call_allowed(agent.principal.principal_id, "filesystem", "read_file")
    assert not vault._call_allowed(agent.principal.principal_id, "filesystem", "write_file")
    assert not vault._call_allowed(agent.principal.principal_id, "secretive", "call_api")

    set_allowance(vault.store, "operator", vault.toolkit, "bot", toolkits=["secretive"])
    assert agent.tools() == {("secretive", "call_api"), ("secretive", "upload")}
    assert agent.toolkits() == {"secretive": True}

    set_allowance(vault.store, "operator", vault.toolkit, "bot")  # no tool at all
    assert agent.tools() == set() and agent.toolkits() == {}

    narrowed, changed = remove_allowance(vault.store, "operator", "bot")
    assert changed and narrowed.allowance is None
    assert agent.tools() == everything
    assert agent.toolkits() == all_toolkits
    assert vault._call_allowed(agent.principal.principal_id, "secretive", "call_api")
    assert remove_allowance(vault.store, "operator", "bot")[1] is False  # harmless, once


@pytest.fixture
def heard(vault: Vault) -> Iterator[None]:
    """On PostgreSQL, the vault listens for commits (as `serve` does), without which its
    lists always read in a worker; SQLite's mark needs nothing."""
    if not vault.store.on_postgres:
        yield
        return
    notices = vault.store.listen()
    notices.start()
    assert notices.listening.wait(10)
    yield
    notices.stop()


def test_the_event_loop_path_filters_as_the_worker_path_does(
    vault: Vault, agent: Agent, heard: None
) -> None:
    tools_req, toolkits_req = ToolListRequest(), ToolkitListRequest()
    agent.tools()  # a read: the loop may answer from memory from now on
    before = answered_on_the_loop(vault, agent)
    assert before is not None and len(before["tools"]) == len(FILESYSTEM_TOOLS) + 2

    set_allowance(vault.store, "operator", vault.toolkit, "bot", tools=[("filesystem", "list_dir")])
    for _ in range(2):  # right after the change, and again once the worker path read it
        answered = on_the_loop(vault, agent, tools_req)
        if answered is not None:
            assert [(t["toolkit"], t["name"]) for t in answered["tools"]] == [
                ("filesystem", "list_dir")
            ]
        kits = on_the_loop(vault, agent, toolkits_req)
        if kits is not None:
            assert [t["name"] for t in kits["toolkits"]] == ["filesystem"]
        assert agent.tools() == {("filesystem", "list_dir")}
    assert answered_on_the_loop(vault, agent) is not None  # answered there, filtered


def test_another_process_follows_a_narrowing_made_elsewhere(
    vault: Vault, agent: Agent, home: VaultSettings, tmp_path: Path
) -> None:
    other = open_vault(home)  # as another replica would open it
    notices = other.store.listen() if other.store.on_postgres else None
    if notices is not None:
        notices.start()
        assert notices.listening.wait(10)
    try:
        there = Agent(other, agent.principal.principal_id, tmp_path)
        assert ("secretive", "upload") in there.tools()
        set_allowance(vault.store, "operator", vault.toolkit, "bot", toolkits=["filesystem"])
        assert {kit for kit, _ in there.tools()} == {"filesystem"}
        answered = answered_on_the_loop(other, there)
        assert answered is not None and {t["toolkit"] for t in answered["tools"]} == {"filesystem"}
        assert not other._call_allowed(there.principal.principal_id, "secretive", "upload")
        remove_allowance(vault.store, "operator", "bot")
        assert ("secretive", "upload") in there.tools()
    finally:
        if notices is not None:
            notices.stop()
        other.store.engine.dispose()


def test_each_change_is_audited_with_its_sentence(vault: Vault, agent: Agent) -> None:
    set_allowance(
        vault.store,
        "operator",
        vault.toolkit,
        "bot",
        toolkits=["secretive"],
        tools=[("filesystem", "read_file")],
    )
    remove_allowance(vault.store, "operator", "bot")
    actions = (AuditAction.ALLOWANCE_SET.value, AuditAction.ALLOWANCE_REMOVED.value)
    page = list_events(vault.store, EventFilter(actions=actions))
    said = [(e.action, e.principal_name, e.summary) for e in page.events]
    assert said == [
        (
            "allowance_set",
            "bot",
            "principal bot narrowed to secretive (every tool), filesystem/read_file",
        ),
        (
            "allowance_removed",
            "bot",
            "principal bot no longer narrowed: it may call every tool configured for it",
        ),
    ]
    own = list_events(vault.store, EventFilter(principal="bot"))
    assert {"allowance_set", "allowance_removed"} <= {e.action for e in own.events}
    assert vault.verify_audit().ok


def test_names_are_checked_when_set_and_a_refusal_changes_nothing(
    vault: Vault, agent: Agent
) -> None:
    operator_id, _ = create_token(vault.store, "operator", "ops")
    refusals: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"toolkits": ["nope"]}, ToolkitNotFound, "nope"),
        ({"tools": [("filesystem", "format_disk")]}, VaultError, "has no tool 'format_disk'"),
        ({"tools": [("nope", "read_file")]}, ToolkitNotFound, "nope"),
        ({"toolkits": ["bad\x00name"]}, VaultError, "control character"),
        ({"toolkits": ["x" * 201]}, VaultError, "1 to 200 characters"),
        ({"toolkits": [f"t{i}" for i in range(101)]}, VaultError, "at most 100"),
    ]
    for given, kind, said in refusals:
        with pytest.raises(kind, match=re.escape(said)):
            set_allowance(vault.store, "operator", vault.toolkit, "bot", **given)
    with pytest.raises(VaultError, match="only an agent calls tools"):
        set_allowance(vault.store, "operator", vault.toolkit, operator_id, toolkits=["secretive"])
    with pytest.raises(PrincipalNotFound):
        set_allowance(vault.store, "operator", vault.toolkit, "nobody", toolkits=["secretive"])
    assert list_allowances(vault.store) == []
    assert get_allowance(vault.store, "bot").allowance is None
    assert len(agent.tools()) == len(FILESYSTEM_TOOLS) + 2
    with vault.store.engine.connect() as db:
        actions = db.execute(select(AuditEvent.action)).scalars().all()
    assert AuditAction.ALLOWANCE_SET not in actions


def test_an_edited_allowance_event_is_not_believed(
    vault: Vault, agent: Agent, home: VaultSettings
) -> None:
    set_allowance(vault.store, "operator", vault.toolkit, "bot", tools=[READ])
    widened = json.dumps(
        {
            "principal_id": agent.principal.principal_id,
            "allowed_toolkits": ["filesystem", "secretive"],
            "allowed_tools": [],
        }
    )
    with vault.store.engine.begin() as db:
        db.execute(
            update(AuditEvent)
            .where(AuditEvent.action == AuditAction.ALLOWANCE_SET)
            .values(details=widened)
        )
    fresh = open_vault(home, current=False)  # as another process would open it
    try:
        with pytest.raises(StateUnknown):
            fresh.allowance(agent.principal.principal_id)
    finally:
        fresh.store.engine.dispose()


def test_the_rule_itself() -> None:
    allowance = ToolAllowance.of(["weather"], [("filesystem", "read_file"), ("weather", "now")])
    assert allowance.permits("weather", "anything") and allowance.permits("filesystem", "read_file")
    assert not allowance.permits("filesystem", "write_file")
    assert not allowance.permits("file", "system/read_file")  # no joining of names
    assert allowance.shows("filesystem") and not allowance.shows("github")
    assert allowance.tools == {("filesystem", "read_file")}  # weather/now: said already
    assert not ToolAllowance().permits("weather", "now") and not ToolAllowance().shows("weather")
    assert parse_tool("io.github.acme/server/search") == ("io.github.acme/server", "search")
    for bad in ("read_file", "/read_file", "filesystem/"):
        with pytest.raises(VaultError, match="TOOLKIT/TOOL"):
            parse_tool(bad)


# What the command line prints and parses does not depend on the database; the service API,
# A2E, `/v1` and the console tests run on both.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_command_line(vault: Vault, agent: Agent, cli_env: dict[str, str]) -> None:
    def cli(*args: str) -> Any:
        return run_cli(("allowances", *args), cli_env, timeout=60)

    made = cli("set", "bot", "--tool", "filesystem/read_file", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) == {
        "principal_id": agent.principal.principal_id,
        "name": "bot",
        "role": "agent",
        "narrowed": True,
        "toolkits": [],
        "tools": [{"toolkit": "filesystem", "tool": "read_file"}],
    }
    assert agent.tools() == {("filesystem", "read_file")}
    shown = cli("show", "bot")
    assert shown.stdout.strip() == "bot: narrowed to filesystem/read_file"
    listed = json.loads(cli("list", "--json").stdout)
    assert [a["name"] for a in listed["allowances"]] == ["bot"]
    assert "bot" in cli("list").stdout and "filesystem/read_file" in cli("list").stdout
    refused = cli("set", "bot", "--tool", "filesystem/format_disk")
    assert refused.returncode == 1 and "has no tool 'format_disk'" in refused.stderr
    assert cli("set", "bot").returncode == 1  # nothing named and no --none
    assert cli("set", "bot", "--none").returncode == 0
    assert agent.tools() == set()
    removed = json.loads(cli("remove", "bot", "--json").stdout)
    assert removed["narrowed"] is False and removed["removed_now"] is True
    assert len(agent.tools()) == len(FILESYSTEM_TOOLS) + 2
    assert cli("remove", "bot").stdout.strip() == "bot was not narrowed"
    assert json.loads(cli("list", "--json").stdout) == {"allowances": []}


def app(vault: Vault, home: VaultSettings) -> TestClient:
    limits = Limits(requests_per_second=10_000, burst=10_000)
    return TestClient(create_app(vault, open_provider(home), limits), base_url="https://testserver")


def test_the_v1_routes(vault: Vault, agent: Agent, home: VaultSettings) -> None:
    operator_id, operator_token = create_token(vault.store, "operator", "ops")
    operator = {"Authorization": f"Bearer {operator_token}"}
    auditor = {"Authorization": f"Bearer {create_token(vault.store, 'auditor', 'aud')[1]}"}
    agent_auth = {"Authorization": f"Bearer {create_token(vault.store, 'agent', 'other')[1]}"}
    body = {"toolkits": ["secretive"], "tools": [{"toolkit": "filesystem", "tool": "list_dir"}]}
    with app(vault, home) as c:
        assert c.put("/v1/allowances/bot", json=body, headers=agent_auth).status_code == 403
        assert c.put("/v1/allowances/bot", json=body, headers=auditor).status_code == 403
        made = c.put("/v1/allowances/bot", json=body, headers=operator)
        assert made.status_code == 200, made.text
        assert made.json()["narrowed"] is True and made.json()["toolkits"] == ["secretive"]
        assert c.get("/v1/allowances/bot", headers=auditor).json() == made.json()
        listed = c.get("/v1/allowances", headers=auditor).json()["allowances"]
        assert [a["name"] for a in listed] == ["bot"]
        bad = {"tools": [{"toolkit": "filesystem", "tool": "format_disk"}]}
        assert c.put("/v1/allowances/bot", json=bad, headers=operator).status_code == 422
        assert c.put("/v1/allowances/nobody", json=body, headers=operator).status_code == 404
        unknown = {"toolkits": ["nope"]}
        assert c.put("/v1/allowances/bot", json=unknown, headers=operator).status_code == 404
        assert agent.tools() == {
            ("secretive", "call_api"),
            ("secretive", "upload"),
            ("filesystem", "list_dir"),
        }
        removed = c.delete("/v1/allowances/bot", headers=operator).json()
        assert removed["narrowed"] is False and removed["removed_now"] is True
        assert c.get("/v1/allowances", headers=auditor).json() == {"allowances": []}
    with vault.store.engine.connect() as db:
        actors = db.execute(
            select(AuditEvent.actor).where(
                AuditEvent.action.in_([AuditAction.ALLOWANCE_SET, AuditAction.ALLOWANCE_REMOVED])
            )
        ).scalars()
        assert list(actors) == [operator_id, operator_id]  # as the signed-in operator


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found[1]


def test_the_console_page(vault: Vault, agent: Agent, home: VaultSettings) -> None:
    token = create_token(vault.store, "operator", "ops")[1]
    with app(vault, home) as c:
        page = c.get("/console/")
        signed = c.post("/console/signin", data={"csrf": csrf_of(page.text), "token": token})
        assert signed.status_code == 200, signed.text
        page = c.get("/console/allowances")
        assert page.status_code == 200 and "No agent is narrowed." in page.text
        assert "<option>bot</option>" in page.text
        form = {"csrf": csrf_of(page.text), "principal": "bot", "toolkits": "", "tools": ""}
        empty = c.post("/console/allowances/set", data=form)
        assert empty.status_code == 422 and "no tool at all" in empty.text
        typo = c.post("/console/allowances/set", data={**form, "tools": "filesystem/rm"})
        assert typo.status_code == 422 and "has no tool" in typo.text
        done = c.post(
            "/console/allowances/set",
            data={**form, "tools": "filesystem/read_file\nfilesystem/list_dir\n"},
        )
        assert done.status_code == 200 and "filesystem/list_dir, filesystem/read_file" in done.text
        assert agent.tools() == {("filesystem", "read_file"), ("filesystem", "list_dir")}
        widen = {"csrf": csrf_of(done.text), "principal": agent.principal.principal_id}
        assert c.post("/console/allowances/remove", data=widen).status_code == 200
        assert len(agent.tools()) == len(FILESYSTEM_TOOLS) + 2
    set_allowance(vault.store, "operator", vault.toolkit, "bot", toolkits=["secretive"])
    auditor = create_token(vault.store, "auditor", "aud")[1]
    with app(vault, home) as c:  # an auditor looks, and changes nothing
        page = c.get("/console/")
        c.post("/console/signin", data={"csrf": csrf_of(page.text), "token": auditor})
        page = c.get("/console/allowances")
        assert page.status_code == 200 and "secretive (every tool)" in page.text
        assert "Narrow the agent" not in page.text and "Widen" not in page.text
        form = {"csrf": csrf_of(page.text), "principal": "bot", "nothing": "1"}
        assert c.post("/console/allowances/set", data=form).status_code == 403
        assert c.post("/console/allowances/remove", data=form).status_code == 403
    assert agent.tools() == {("secretive", "call_api"), ("secretive", "upload")}
