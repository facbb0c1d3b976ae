"""Principal-scoped configs (issue 15): configure once for the principal, and every session of
that principal (new or resumed, in any process) is configured unless it has its own; another
principal's sessions are not; purge, history, check, rotation and intake links know both
scopes. Through the service API, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select
from starlette.testclient import TestClient

from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.audit.history import history
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.cli import main
from toolkit_vault.core.connection import connect
from toolkit_vault.core.intake import Intake
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import UnknownSession
from toolkit_vault.protocol import Message, ToolkitListRequest, ToolkitListResponse
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.models import AuditEvent
from toolkit_vault.transports.http_api import create_app
from toolkit_vault.transports.relay import PgEventRelay

from tkv_test_plugins import SecretiveToolkit

AGENT = Principal("local", "agent")
SCOPE = "principal:local"
INHERITED = "Toolkit configured from its principal's config"
PERSONAL = "tkv-canary-scope-principal-1"
OWN = "tkv-canary-scope-session-2"
SECRETIVE_TOOLS = [("call_api", "secretive"), ("upload", "secretive")]


def secret_config(api_key: str) -> dict[str, Any]:
    return {"endpoint": "https://api.example.test", "api_key": api_key}


def keys_received() -> list[str]:
    """The api keys `secretive` instances were initialized with, since the last clear."""
    keys = [config["api_key"] for config in SecretiveToolkit.received]
    SecretiveToolkit.received.clear()
    return keys


class Agent:
    """One connection of a principal, after its handshake (`toolkits` and `tools`); keeps
    every status event it got, pushed or after a response."""

    def __init__(self, vault: Vault, principal: Principal, session_id: str | None = None):
        self.events: list[dict[str, Any]] = []
        self.conn = connect(vault, principal, self._pushed)
        hello: dict[str, Any] = {"type": "handshake/req", "capabilities": ["toolkits", "tools"]}
        if session_id is not None:
            hello["session_id"] = session_id
        response = self.send(hello)
        assert response["type"] == "handshake/resp", response
        self.session: str = response["session_id"]

    def _pushed(self, event: Message) -> None:
        self.events.append(event.model_dump(mode="json"))

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        response, *caused = (json.loads(out) for out in self.conn.handle_raw(json.dumps(message)))
        self.events += caused
        return dict(response)

    def configure(self, toolkit: str, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
        message = {"type": "toolkit/configure/req", "toolkit_name": toolkit, "config": config}
        return self.send({**message, **extra})

    def listed(self) -> dict[str, bool]:
        answer = self.send({"type": "toolkit/list/req"})
        return {t["name"]: t["configured"] for t in answer["toolkits"]}

    def tools(self) -> list[tuple[str, str]]:
        answer = self.send({"type": "tool/list/req"})
        return [(t["name"], t["toolkit"]) for t in answer["tools"]]

    def statuses(self) -> list[tuple[str, bool, str]]:
        """The status events since the last call: (toolkit, configured, message)."""
        seen = [
            (e["toolkit_name"], e["configured"], e["message"])
            for e in self.events
            if e["type"] == "toolkit/status/event"
        ]
        self.events.clear()
        return seen


@pytest.fixture(autouse=True)
def nothing_received_yet() -> None:
    """`SecretiveToolkit.received` is shared by every test of a worker."""
    SecretiveToolkit.received.clear()


@pytest.fixture
def bob(vault: Vault) -> Principal:
    return Principal(create_token(vault.store, "agent", "bob")[0], "agent")


@pytest.fixture
def later(home: VaultSettings) -> Iterator[list[Vault]]:
    """Vaults opened as other processes open them (closed at teardown)."""
    opened: list[Vault] = []
    yield opened
    for other in opened:
        other.store.engine.dispose()


def another_process(later: list[Vault]) -> Vault:
    vault = open_vault(load_settings())
    later.append(vault)
    return vault


def cli(*args: str) -> tuple[int, dict[str, Any], str]:
    done = CliRunner().invoke(main, [*args, "--json"])
    return done.exit_code, json.loads(done.stdout or "{}"), done.stderr


# -- configure once, every session of the principal -------------------------------------------


def test_configured_once_for_the_principal_its_sessions_are_configured(
    vault: Vault, bob: Principal, later: list[Vault]
) -> None:
    first = Agent(vault, AGENT)
    answer = first.configure("secretive", secret_config(PERSONAL), scope="principal")
    assert (answer["status"], answer["message"]) == ("ok", "Toolkit configured successfully")
    assert first.statuses() == [("secretive", True, INHERITED)]
    assert keys_received() == [PERSONAL, PERSONAL]  # the configure's own, then first's
    second = Agent(vault, AGENT)
    assert keys_received() == [PERSONAL]  # initialized at its handshake
    assert second.listed() == {"filesystem": False, "secretive": True}
    assert second.tools() == SECRETIVE_TOOLS
    assert first.listed()["secretive"] is True
    stranger = Agent(vault, bob)
    assert stranger.listed()["secretive"] is False and stranger.tools() == []
    assert keys_received() == []

    elsewhere = another_process(later)
    fresh, resumed = Agent(elsewhere, AGENT), Agent(elsewhere, AGENT, first.session)
    assert fresh.listed()["secretive"] is True and resumed.listed()["secretive"] is True
    assert keys_received() == [PERSONAL, PERSONAL]
    assert fresh.statuses() == [] and resumed.statuses() == []  # nothing failed at hello
    assert Agent(elsewhere, bob).listed()["secretive"] is False


def test_the_session_scope_overrides_the_principals_in_that_session_only(
    vault: Vault, later: list[Vault]
) -> None:
    own, other = Agent(vault, AGENT), Agent(vault, AGENT)
    own.configure("secretive", secret_config(PERSONAL), scope="principal")
    answer = own.configure("secretive", secret_config(OWN))
    assert answer["status"] == "ok"
    keys_received()
    own.statuses(), other.statuses()

    renewed = "tkv-canary-scope-principal-renewed"
    answer = own.configure("secretive", secret_config(renewed), scope="principal")
    assert answer["message"].endswith("for the principal; this session keeps its own config")
    assert keys_received() == [renewed, renewed]  # the configure's own, then `other` only
    assert own.statuses() == []
    assert other.statuses() == [("secretive", True, INHERITED)]

    elsewhere = another_process(later)
    Agent(elsewhere, AGENT, own.session), Agent(elsewhere, AGENT, other.session)
    assert keys_received() == [OWN, renewed]
    assert Agent(elsewhere, AGENT).listed()["secretive"] is True
    assert keys_received() == [renewed]


def test_a_failed_principal_configure_changes_nothing(vault: Vault) -> None:
    agent = Agent(vault, AGENT)
    agent.configure("secretive", secret_config(PERSONAL), scope="principal")
    agent.statuses()
    failing = {**secret_config("tkv-canary-scope-rejected"), "mode": "fail"}
    answer = agent.configure("secretive", failing, scope="principal")
    assert answer["status"] == "error" and agent.statuses() == []
    keys_received()
    Agent(vault, AGENT)
    assert keys_received() == [PERSONAL]  # the previous version stays current


def test_a_principal_reconfigure_reaches_live_sessions_of_other_processes(
    vault: Vault, later: list[Vault], database_url: str
) -> None:
    """Here at once; in another process at once through the PostgreSQL relay, else at that
    session's next list (no event: the list tells it)."""
    elsewhere = another_process(later)
    here, there = Agent(vault, AGENT), Agent(elsewhere, AGENT)
    relays = []
    if database_url.startswith("postgresql"):
        relays = [PgEventRelay(v).start() for v in (vault, elsewhere)]
        assert all(relay.listening.wait(10) for relay in relays)
    try:
        keys_received()
        here.configure("secretive", secret_config(PERSONAL), scope="principal")
        assert here.statuses() == [("secretive", True, INHERITED)]
        if relays:
            deadline = time.monotonic() + 10
            while not there.events and time.monotonic() < deadline:
                time.sleep(0.05)
            assert there.statuses() == [("secretive", True, INHERITED)]
            assert keys_received() == [PERSONAL] * 3
        else:
            assert there.statuses() == [] and keys_received() == [PERSONAL] * 2
        assert there.listed()["secretive"] is True and there.tools() == SECRETIVE_TOOLS
        assert keys_received() == ([] if relays else [PERSONAL])
        assert there.statuses() == []
    finally:
        for relay in relays:
            relay.stop()


# -- purge: one scope at a time ---------------------------------------------------------------


def test_purging_one_scope_leaves_the_other(vault: Vault, later: list[Vault]) -> None:
    inherits, overrides = Agent(vault, AGENT), Agent(vault, AGENT)
    inherits.configure("secretive", secret_config(PERSONAL), scope="principal")
    overrides.configure("secretive", secret_config(OWN))
    overrides.configure("filesystem", {"root_dir": "/tmp"})
    inherits.statuses(), overrides.statuses()

    report = vault.purge("operator", overrides.session, "secretive")
    assert (report.session_id, report.principal_id) == (overrides.session, "local")
    assert report.as_json()["scope"] == "session" and report.unconfigured == ["secretive"]
    assert overrides.statuses() == [("secretive", True, INHERITED)]  # the principal's again
    assert inherits.statuses() == []
    assert overrides.listed() == {"filesystem": True, "secretive": True}
    keys_received()
    Agent(another_process(later), AGENT, overrides.session)
    assert keys_received() == [PERSONAL]

    overrides.configure("secretive", secret_config(OWN))
    overrides.statuses()
    report = vault.purge_principal("operator", "local")
    assert report.as_json() | {"files_scrubbed": None} == {
        "session_id": SCOPE,
        "scope": "principal",
        "principal_id": "local",
        "toolkit_name": None,
        "versions": 1,
        "toolkits": ["secretive"],
        "unconfigured": ["secretive"],
        "files_scrubbed": None,
    }
    assert inherits.statuses() == [("secretive", False, "config purged")]
    assert overrides.statuses() == []
    assert inherits.listed()["secretive"] is False
    assert overrides.listed() == {"filesystem": True, "secretive": True}
    assert Agent(vault, AGENT).listed()["secretive"] is False
    current = {
        (v["scope"], v["toolkit_name"], v["status"])
        for v in history(vault.store, principal="local")
        if v["current"]
    }
    assert current == {("session", "secretive", "ok"), ("session", "filesystem", "ok")}
    assert vault.purge_principal("operator", "local").versions == 0  # again: harmless


def test_purge_in_another_process_is_taken_up_at_the_next_list(
    vault: Vault, later: list[Vault]
) -> None:
    agent = Agent(vault, AGENT)
    agent.configure("secretive", secret_config(PERSONAL), scope="principal")
    agent.configure("secretive", secret_config(OWN))
    keys_received()
    another_process(later).purge("operator", agent.session)
    assert agent.listed()["secretive"] is True
    assert keys_received() == [PERSONAL]  # made again from the principal's
    another_process(later).purge_principal("operator", "local")
    assert agent.listed()["secretive"] is False and agent.tools() == []


def test_a_session_config_made_in_another_process_is_taken_up_at_the_next_list(
    vault: Vault, later: list[Vault]
) -> None:
    agent = Agent(vault, AGENT)
    agent.configure("secretive", secret_config(PERSONAL), scope="principal")
    Agent(another_process(later), AGENT, agent.session).configure("secretive", secret_config(OWN))
    keys_received()
    assert agent.listed()["secretive"] is True
    assert keys_received() == [OWN]  # its own now, made again from the store
    assert agent.listed()["secretive"] is True and keys_received() == []


# -- what the vault refuses -------------------------------------------------------------------


def test_a_principal_scope_id_is_no_session(vault: Vault, bob: Principal) -> None:
    agent = Agent(vault, AGENT)
    agent.configure("secretive", secret_config(PERSONAL), scope="principal")
    bobs = Agent(vault, bob)
    bobs.configure("filesystem", {"root_dir": "/tmp"}, scope="principal")
    for principal, scope_id in [
        (AGENT, SCOPE),
        (AGENT, f"principal:{bob.principal_id}"),
        (bob, f"principal:{bob.principal_id}"),
        (bob, SCOPE),
    ]:
        conn = connect(vault, principal)
        hello = {"type": "handshake/req", "capabilities": ["toolkits"], "session_id": scope_id}
        (refused,) = [json.loads(out) for out in conn.handle_raw(json.dumps(hello))]
        assert (refused["type"], refused["code"], refused["message"]) == (
            "error",
            "RUNTIME_ERROR",
            "unknown session",
        )
        with pytest.raises(UnknownSession):
            connect(vault, principal).bind(scope_id)  # HTTP's A2E-Session header
    named = agent.configure("filesystem", {"root_dir": "/tmp"}, session_id=SCOPE)
    assert (named["type"], named["message"]) == ("error", "unknown session")
    wrong = agent.configure("filesystem", {"root_dir": "/tmp"}, scope="everyone")
    assert (wrong["code"], wrong["details"]) == (
        "INVALID_MESSAGE",
        [{"pointer": "/scope", "keyword": "literal_error"}],
    )
    with pytest.raises(Exception, match="purge it with --principal"):
        vault.purge("operator", SCOPE)


# -- history, audit, check, rotation ----------------------------------------------------------


def test_history_audit_and_check_show_both_scopes(vault: Vault, bob: Principal) -> None:
    agent = Agent(vault, AGENT)
    agent.configure("secretive", secret_config(PERSONAL), scope="principal")
    agent.configure("filesystem", {"root_dir": "/tmp"})
    Agent(vault, bob).configure("filesystem", {"root_dir": "/srv"}, scope="principal")
    mine = [(v["scope"], v["session_id"], v["toolkit_name"]) for v in history(vault.store)]
    assert mine == [
        ("principal", SCOPE, "secretive"),
        ("session", agent.session, "filesystem"),
        ("principal", f"principal:{bob.principal_id}", "filesystem"),
    ]
    assert [v["principal_id"] for v in history(vault.store)] == ["local", "local", bob.principal_id]
    assert len(history(vault.store, principal="bob")) == 1
    with pytest.raises(Exception, match="no principal named or with id 'nobody'"):
        history(vault.store, principal="nobody")
    with vault.store.read() as conn:
        events = conn.execute(
            select(AuditEvent.action, AuditEvent.details)
            .where(AuditEvent.session_id == SCOPE)
            .order_by(AuditEvent.seq)
        ).all()
    assert [(action, json.loads(details).get("scope")) for action, details in events] == [
        ("session_created", "principal"),
        ("configure", "principal"),
    ]
    result = vault.check()
    assert result["ok"] and result["intact"] == 3 and result["state_problem_count"] == 0
    assert result["scopes"] == {"session": 1, "principal": 2}
    assert vault.verify_audit().ok


def test_the_commands_know_both_scopes(vault: Vault, later: list[Vault]) -> None:
    agent = Agent(vault, AGENT)
    agent.configure("secretive", secret_config(PERSONAL), scope="principal")
    agent.configure("filesystem", {"root_dir": "/tmp"})
    code, shown, _ = cli("history", "--principal", "local")
    assert code == 0 and [(v["scope"], v["principal_id"]) for v in shown["versions"]] == [
        ("principal", "local"),
        ("session", "local"),
    ]
    table = CliRunner().invoke(main, ["history"], env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "principal local" in table.stdout
    for args, message in [
        (["--session", SCOPE], "that is a principal scope: purge it with --principal"),
        ([], "name one scope to purge: --session S or --principal P"),
        (["--session", agent.session, "--principal", "local"], "name one scope"),
        (["--principal", "nobody"], "no principal named or with id 'nobody'"),
    ]:
        code, _, err = cli("purge", *args, "--yes")
        assert code == 1 and message in err, err
    code, report, _ = cli("purge", "--principal", "local", "--yes")
    assert code == 0 and (report["scope"], report["versions"]) == ("principal", 1)
    keys_received()
    fresh = Agent(another_process(later), AGENT, agent.session)
    assert fresh.listed() == {"filesystem": True, "secretive": False}
    code, checked, _ = cli("check")
    assert code == 0 and checked["scopes"] == {"session": 1, "principal": 1}
    assert CliRunner().invoke(main, ["audit", "verify"]).exit_code == 0


def test_rotation_rewraps_principal_configs(vault: Vault, later: list[Vault]) -> None:
    Agent(vault, AGENT).configure("secretive", secret_config(PERSONAL), scope="principal")
    code, rotated, _ = cli("keys", "rotate", "--vault-key")  # every data key moves
    assert code == 0 and rotated["rewrapped"] == 1 and rotated["failed"] == []
    code, _, err = cli("keys", "retire", rotated["previous"][0])
    assert code == 0, err
    keys_received()
    assert Agent(another_process(later), AGENT).listed()["secretive"] is True
    assert keys_received() == [PERSONAL]


# -- intake links -----------------------------------------------------------------------------


def test_an_intake_link_for_the_principal_completes_into_its_config(vault: Vault) -> None:
    intake = Intake(vault, SecretBytes(b"i" * 32), lambda link: f"https://vault.test/i?link={link}")
    vault.intake = intake
    asking, waiting = Agent(vault, AGENT), Agent(vault, AGENT)
    answer = asking.configure("secretive", {"endpoint": "https://x.test"}, scope="principal")
    assert (
        answer["status"] == "partial"
        and "for every session of this principal" in (answer["message"])
    )
    link = answer["intake_url"].partition("?link=")[2]
    view = intake.open(link)
    assert (view.claim.session_id, view.claim.scope) == (SCOPE, "principal")
    assert asking.listed()["secretive"] is False
    keys_received()
    typed = "tkv-canary-scope-typed-by-a-person"
    outcome = intake.complete(link, {"endpoint": "https://x.test", "api_key": typed})
    assert outcome.status == "ok"
    for agent in (asking, waiting):
        assert agent.statuses() == [("secretive", True, INHERITED)]
    assert keys_received() == [typed] * 3
    assert Agent(vault, AGENT).listed()["secretive"] is True
    (version,) = [v for v in history(vault.store, SCOPE) if v["current"]]
    assert version["actor"].startswith("intake:") and version["scope"] == "principal"
    session_link = asking.configure("secretive", {"endpoint": "https://y.test"})["intake_url"]
    assert intake.open(session_link.partition("?link=")[2]).claim.scope == "session"


def test_over_http_a_principal_intake_form_serves_every_session(
    vault: Vault, home: VaultSettings
) -> None:
    """HTTP POST per message (`A2E-Session` bound by `Connection.bind`), the console's form."""
    app = create_app(vault, open_provider(home))
    principal_id, token = create_token(vault.store, "agent", "web-agent")
    auth = {"Authorization": f"Bearer {token}"}
    hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
    with TestClient(app, base_url="https://testserver") as client:

        def a2e(message: dict[str, Any], session: str | None = None) -> dict[str, Any]:
            headers = auth | ({"A2E-Session": session} if session else {})
            answer: dict[str, Any] = client.post("/a2e", json=message, headers=headers).json()
            return answer

        def listed(session: str) -> dict[str, bool]:
            answer = a2e({"type": "toolkit/list/req"}, session)
            return {t["name"]: t["configured"] for t in answer["toolkits"]}

        asking = a2e(hello)["session_id"]
        config = {"endpoint": "https://x.test"}
        message = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
        answer = a2e({**message, "scope": "principal"}, asking)
        url = answer["intake_url"]
        page = client.get(url)
        assert page.status_code == 200 and "for the <strong>principal</strong>" in page.text
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found is not None
        typed = "tkv-canary-scope-typed-over-http"
        form = {"csrf": found.group(1), "link": url.partition("?link=")[2]}
        done = client.post("/console/intake", data={**form, **config_form(typed)})
        assert done.status_code == 200, done.text
        assert "for every session of the agent" in done.text and typed not in done.text
        assert listed(asking)["secretive"] is True
        assert listed(a2e(hello)["session_id"])["secretive"] is True
        assert listed(a2e(hello)["session_id"])["secretive"] is True
        scope = f"principal:{principal_id}"
        refused = a2e({"type": "toolkit/list/req"}, scope)
        assert (refused["type"], refused["message"]) == ("error", "unknown session")
        refused = a2e({**hello, "session_id": scope})
        assert (refused["type"], refused["message"]) == ("error", "unknown session")


def config_form(api_key: str) -> dict[str, str]:
    return {"/endpoint": "https://x.test", "/api_key": api_key}


def test_a_list_racing_a_configure_leaves_the_newer_instance(
    vault: Vault, later: list[Vault], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list reads what this process holds before it reads the store; a configure that
    commits and installs its instance between the two is newer than that read, and stays
    (`_install` is a compare-and-set). Here the store reads of one list are taken, then the
    session's own configure runs to completion, then the list goes on with its stale reads."""
    inherits = Agent(vault, AGENT)
    inherits.configure("secretive", secret_config(PERSONAL), scope="principal")
    racer = Agent(vault, AGENT, inherits.session)  # another connection of the session
    renewed = "tkv-canary-scope-principal-elsewhere"
    Agent(another_process(later), AGENT).configure(
        "secretive", secret_config(renewed), scope="principal"
    )  # this process has not heard of it: no relay
    store = vault.store
    real_sources, real_versions = store.effective_sources, store.effective_versions
    stale: dict[str, Any] = {}

    def pointers_then_configure(session_id: str, scope_id: str) -> Any:
        monkeypatch.setattr(store, "effective_sources", real_sources)
        stale["sources"] = real_sources(session_id, scope_id)
        stale["versions"] = real_versions(session_id, scope_id)
        racer.configure("secretive", secret_config(OWN))
        return stale["sources"]

    def stale_versions(session_id: str, scope_id: str) -> Any:
        monkeypatch.setattr(store, "effective_versions", real_versions)
        return stale["versions"]

    monkeypatch.setattr(store, "effective_sources", pointers_then_configure)
    monkeypatch.setattr(store, "effective_versions", stale_versions)
    keys_received()
    assert inherits.listed()["secretive"] is True
    assert keys_received() == [OWN, renewed]  # the configure's, then the list's (unused)
    assert inherits.listed()["secretive"] is True
    assert keys_received() == []  # the session's own instance was live all along


def test_a_principal_reconfigure_does_no_work_for_sessions_without_a_push_channel(
    vault: Vault,
) -> None:
    """HTTP sessions (no push channel; a POSTed handshake leaves its connection behind) are
    not initialized again when their principal's config changes: each takes it up on its
    next request, so a reconfigure costs the principal's open connections, not its sessions."""
    agent = Agent(vault, AGENT)
    agent.configure("secretive", secret_config(PERSONAL), scope="principal")
    hello = json.dumps({"type": "handshake/req", "capabilities": ["toolkits"]})
    posted = [json.loads(connect(vault, AGENT).handle_raw(hello)[0]) for _ in range(5)]
    keys_received()
    renewed = "tkv-canary-scope-principal-renewed"
    agent.configure("secretive", secret_config(renewed), scope="principal")
    assert keys_received() == [renewed, renewed]  # the configure's own, then `agent`'s
    one_shot = connect(vault, AGENT)
    one_shot.bind(posted[0]["session_id"])  # the next POST of one of them
    assert keys_received() == [renewed]
    listing = one_shot.handle(ToolkitListRequest())
    assert isinstance(listing, ToolkitListResponse)
    assert {t.name: t.configured for t in listing.toolkits}["secretive"] is True
