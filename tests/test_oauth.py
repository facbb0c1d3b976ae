"""OAuth connections against a real authorization server on loopback (authlib's, see
`oauth_server`), on SQLite and PostgreSQL: refresh once however many initializations ask
at the same time (threads of two vaults opened as two processes open them), a refresh
answer without a refresh token, refresh token rotation, and `invalid_grant` -> a person
must reconnect (status event with a fresh intake link, and no token request again).

The consent step is driven over HTTP here (the browser test does it in Chromium); the
vault's clock is the only seam: tokens expire because time moves, not because of a mock.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import create_engine, select, text

from oauth_server import AuthServer
from toolkit_vault.access.principals import Principal, create_token
from toolkit_vault.actors import shell_actor
from toolkit_vault.audit.history import history
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.connection import connect
from toolkit_vault.core.intake import Intake, IntakeRefused
from toolkit_vault.core.oauth_connect import LEASE_TTL, RETRY_SPACING, OAuthConnections
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.oauth import OAuthFailed
from toolkit_vault.protocol import Message
from toolkit_vault.settings import VaultSettings, load_settings
from toolkit_vault.store.leases import RefreshLeases
from toolkit_vault.store.models import Base, RefreshLease
from toolkit_vault.toolkits.registry import SourceKind, ToolkitRegistry, ToolkitSource
from toolkit_vault.transports.relay import PgEventRelay

OAUTH_PLUGINS = Path(__file__).resolve().parent / "oauth_plugins"
CLI = str(Path(sys.executable).parent / "toolkit-vault")
PUBLIC = {"calendar": "work"}
CALLBACK = "http://127.0.0.1:9/console/oauth/callback"
INTAKE_KEY = SecretBytes(os.urandom(32))


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "tkv_oauth_plugins", OAUTH_PLUGINS / "tkv_oauth_plugins.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tkv_oauth_plugins"] = module
    spec.loader.exec_module(module)
    return module


calendar = _load()
CONFIDENTIAL = (calendar.TeamCalendarToolkit, calendar.TeamCalendarPostToolkit)


class Clock:
    """The vault's time: real time plus however far a test moved it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        import time

        return time.time() + self.offset


@dataclass
class Side:
    """One vault as one process holds it: its intake links and OAuth connections."""

    vault: Vault
    intake: Intake
    connections: OAuthConnections


@dataclass
class Rig:
    auth: AuthServer
    clock: Clock
    sides: list[Side] = field(default_factory=list)

    @staticmethod
    def link_url(link: str) -> str:
        return f"http://127.0.0.1:9/console/intake?link={link}"

    def open(self, vault: Vault) -> Side:
        intake = Intake(vault, INTAKE_KEY, self.link_url, clock=self.clock)
        vault.intake = intake
        side = Side(vault, intake, OAuthConnections(vault, intake, INTAKE_KEY, clock=self.clock))
        self.sides.append(side)
        return side


def _registry() -> ToolkitRegistry:
    registry = ToolkitRegistry.default()
    for plugin in (calendar.CalendarToolkit, *CONFIDENTIAL):
        registry.register(plugin, ToolkitSource(SourceKind.ENTRY_POINT, "test"))
    return registry


@pytest.fixture
def rig(home: VaultSettings, auth: AuthServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.setenv("TKV_OAUTH_ISSUER", auth.issuer)
    made = Rig(auth, Clock())
    made.open(open_vault(home, _registry()))
    yield made
    for side in made.sides:
        side.vault.store.engine.dispose()


def another_process(rig: Rig) -> Side:
    return rig.open(open_vault(load_settings(), _registry()))


class Agent:
    def __init__(self, vault: Vault, principal: Principal) -> None:
        self.events: list[dict[str, Any]] = []
        self.conn = connect(vault, principal, self._pushed)
        hello = self.send({"type": "handshake/req", "capabilities": ["toolkits"]})
        assert hello["type"] == "handshake/resp", hello
        self.session: str = hello["session_id"]

    def _pushed(self, event: Message) -> None:
        self.events.append(event.model_dump(mode="json"))

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        response, *caused = (json.loads(out) for out in self.conn.handle_raw(json.dumps(message)))
        self.events += caused
        return dict(response)

    def listed(self) -> dict[str, bool]:
        answer = self.send({"type": "toolkit/list/req"})
        return {t["name"]: t["configured"] for t in answer["toolkits"]}


def consent(side: Side, intake_url: str, client_secret: str | None = None) -> None:
    """A person opens the link, presses Connect (typing the client secret of a confidential
    client) and allows access at the server."""
    link = parse_qs(urlsplit(intake_url).query)["link"][0]
    url, cookie = side.connections.start(link, CALLBACK, client_secret)
    assert httpx.get(url).status_code == 200  # the consent page
    answer = httpx.post(url, data={"confirm": "yes"})
    assert answer.status_code == 302, answer.text
    side.connections.finish(cookie, *answered(answer.headers["location"]))


def answered(location: str) -> tuple[str, str, str, str | None]:
    """What the callback passes on of an authorization response: its state, its code, the
    URL it arrived at (no query) and its RFC 9207 `iss`, if any."""
    parts = urlsplit(location)
    back = parse_qs(parts.query)
    reached = parts._replace(query="").geturl()
    return back["state"][0], back["code"][0], reached, back.get("iss", [None])[0]


def until_asked(calls: Callable[[], int]) -> None:
    """Wait (up to 10 s) until the authorization server has been asked (`calls` counts)."""
    deadline = time.monotonic() + 10
    while calls() == 0 and time.monotonic() < deadline:
        time.sleep(0.01)


def connected(rig: Rig, name: str = "planner") -> tuple[Principal, Agent]:
    """A principal whose calendar is connected for all its sessions (token for an hour)."""
    side = rig.sides[0]
    principal = Principal(create_token(side.vault.store, "agent", name)[0], "agent")
    first = Agent(side.vault, principal)
    answer = first.send(
        {
            "type": "toolkit/configure/req",
            "toolkit_name": "calendar",
            "config": PUBLIC,
            "scope": "principal",
        }
    )
    assert answer["status"] == "partial" and answer["intake_url"]
    consent(side, answer["intake_url"])
    assert first.listed()["calendar"] is True
    assert rig.auth.token_calls == 1
    return principal, first


def stored_refresh_token(rig: Rig, scope: str) -> str | None:
    """The refresh token of the current version, opened as the vault opens it."""
    vault = rig.sides[0].vault
    (record,) = [r for r in vault.store.current_versions(scope) if r.toolkit_name == "calendar"]
    token_set = json.loads(vault.decrypt(record)["x-oauth-token-set"])
    found: str | None = token_set["refresh_token"]
    return found


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Outage:
    """The authorization server's token endpoint down (503 from its gateway), as a WSGI
    middleware in front of the real server: `calls` counts the token requests it refused."""

    def __init__(self, auth: AuthServer) -> None:
        self.down, self.calls, self._app = True, 0, auth.app.wsgi_app
        auth.app.wsgi_app = self  # type: ignore[method-assign]

    def __call__(self, environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        if self.down and environ["PATH_INFO"] == "/token":
            self.calls += 1
            start("503 Service Unavailable", [("Content-Type", "text/html")])
            return [b"<h1>Service Unavailable</h1>"]
        return self._app(environ, start)  # type: ignore[no-any-return]


def dump(url: str, tmp_path: Path) -> list[bytes]:
    if url.startswith("sqlite"):
        db = Path(url.removeprefix("sqlite:///"))
        return [p.read_bytes() for p in db.parent.iterdir() if p.name.startswith(db.name)]
    engine = create_engine(url)
    rows = []
    with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            query = text(f"SELECT t::text FROM {table.name} t")  # noqa: S608 (our own tables)
            rows += [row.encode() for (row,) in conn.execute(query)]
    engine.dispose()
    return [b"\n".join(rows)]


def test_fifty_concurrent_initializations_of_an_expired_token_make_one_token_request(
    rig: Rig, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    principal, _ = connected(rig)
    other = another_process(rig)
    rig.clock.offset = 7200  # every token is expired now
    rig.auth.knobs.token_delay = 0.3  # a slow server: every initialization is waiting on it
    barrier = threading.Barrier(50)
    agents: list[Agent] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def hello(side: Side) -> None:
        barrier.wait()
        try:
            agent = Agent(side.vault, principal)
            with lock:
                agents.append(agent)
        except BaseException as exc:
            failures.append(exc)

    sides = [rig.sides[0], other]
    threads = [threading.Thread(target=hello, args=(sides[i % 2],)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures and len(agents) == 50
    assert (rig.auth.token_calls, rig.auth.refresh_calls) == (2, 1)  # connect, one refresh
    assert all(agent.listed()["calendar"] for agent in agents)
    assert not [e for agent in agents for e in agent.events if not e.get("configured", True)]
    assert rig.auth.refresh_calls == 1
    scope = f"principal:{principal.principal_id}"
    statuses = [
        (v["status"], v["current"]) for v in history(rig.sides[0].vault.store, scope, "calendar")
    ]
    assert statuses == [("intake", False), ("ok", False), ("ok", True)]
    assert rig.sides[0].vault.verify_audit().ok

    for side in rig.sides:
        side.vault.store.engine.dispose()
    for issued in rig.auth.issued():
        assert issued not in caplog.text
        for blob in dump(database_url, tmp_path):
            assert issued.encode() not in blob


def test_a_refresh_answer_without_a_refresh_token_keeps_the_old_one(rig: Rig) -> None:
    principal, _ = connected(rig)
    scope = f"principal:{principal.principal_id}"
    first_refresh = stored_refresh_token(rig, scope)
    assert first_refresh
    rig.auth.knobs.refresh_returns_refresh_token = False
    for hours in (2, 4):  # twice: the second refresh needs the kept token
        rig.clock.offset = hours * 3600
        assert Agent(rig.sides[0].vault, principal).listed()["calendar"] is True
        assert stored_refresh_token(rig, scope) == first_refresh
    assert rig.auth.refresh_calls == 2
    assert [r["refresh_token"] for r in rig.auth.token_requests[1:]] == [first_refresh] * 2


def test_a_rotated_refresh_token_replaces_the_old_one(rig: Rig) -> None:
    principal, _ = connected(rig)
    scope = f"principal:{principal.principal_id}"
    rig.auth.knobs.rotate_refresh_tokens = True
    seen = [stored_refresh_token(rig, scope)]
    for hours in (2, 4, 6):  # each refresh uses the token the last one rotated in
        rig.clock.offset = hours * 3600
        assert Agent(rig.sides[0].vault, principal).listed()["calendar"] is True
        seen.append(stored_refresh_token(rig, scope))
    assert len(set(seen)) == 4 and rig.auth.refresh_calls == 3
    checked = rig.sides[0].vault.check()  # every version decrypts, the chain verifies
    assert checked["ok"] and not checked["failed"], checked
    assert [r["refresh_token"] for r in rig.auth.token_requests[1:]] == seen[:3]


def test_invalid_grant_asks_a_person_to_reconnect_and_never_retries_by_itself(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    principal, first = connected(rig)
    rig.auth.knobs.invalid_grant = True
    rig.clock.offset = 7200
    agent = Agent(rig.sides[0].vault, principal)
    (event,) = [e for e in agent.events if e["type"] == "toolkit/status/event"]
    assert (event["toolkit_name"], event["configured"]) == ("calendar", False)
    assert "connect again" in event["message"]
    assert event["intake_url"].startswith("http://127.0.0.1:9/console/intake?link=")
    assert agent.listed()["calendar"] is False
    for _ in range(5):  # later sessions, lists: no token request again
        assert Agent(rig.sides[0].vault, principal).listed()["calendar"] is False
    assert rig.auth.refresh_calls == 1
    actions = [e["action"] for e in rig.sides[0].vault.export_audit(0)]
    assert actions.count("oauth_refresh_failed") == 1

    rig.auth.knobs.invalid_grant = False  # a person connects again through the link
    consent(rig.sides[0], event["intake_url"])
    assert Agent(rig.sides[0].vault, principal).listed()["calendar"] is True
    assert rig.auth.refresh_calls == 1
    page = list_events(rig.sides[0].vault.store, EventFilter(toolkit="calendar"), limit=500)
    said = {e.action: e.summary for e in page.events if e.action.startswith("oauth_")}
    assert said["oauth_connected"].startswith(
        f"calendar for principal planner connected at {rig.auth.issuer}"
    )
    assert "(invalid_grant): a person must connect again" in said["oauth_refresh_failed"]
    for issued in rig.auth.issued():
        assert issued not in caplog.text
        assert issued not in json.dumps(agent.events + first.events)


def test_metadata_that_names_another_issuer_is_refused(rig: Rig) -> None:
    """RFC 8414 3.3: a server whose metadata speaks for another issuer (a mix-up, or a
    document served from the wrong place) is not believed; nobody is sent anywhere."""
    side = rig.sides[0]
    principal = Principal(create_token(side.vault.store, "agent", "mixed")[0], "agent")
    agent = Agent(side.vault, principal)
    message = {"type": "toolkit/configure/req", "toolkit_name": "calendar", "config": PUBLIC}
    url = agent.send(message)["intake_url"]
    rig.auth.knobs.metadata_issuer = "https://elsewhere.example.test"
    link = parse_qs(urlsplit(url).query)["link"][0]
    with pytest.raises(OAuthFailed) as refused:
        side.connections.start(link, CALLBACK)
    assert refused.value.code == "metadata"
    assert rig.auth.authorize_requests == [] and rig.auth.token_calls == 0


def test_purging_a_connection_revokes_its_tokens_at_the_server_first(rig: Rig) -> None:
    principal, first = connected(rig)
    issued = rig.auth.latest()
    report = rig.sides[0].vault.purge_principal("operator", principal.principal_id, "calendar")
    assert report.versions >= 1
    assert issued.refresh_token in rig.auth.revocations  # RFC 7009, refresh token first
    assert issued.access_token in rig.auth.revocations
    events = [e for e in rig.sides[0].vault.export_audit(0) if e["action"] == "oauth_disconnected"]
    assert [(e["actor"], e["toolkit_name"]) for e in events] == [("operator", "calendar")]
    assert first.listed()["calendar"] is False
    assert rig.sides[0].vault.verify_audit().ok


def test_toolkits_disconnect_revokes_and_shreds(rig: Rig, cli_env: dict[str, str]) -> None:
    principal, _ = connected(rig, "leaver")
    issued = rig.auth.latest()
    env = {
        **cli_env,
        "TKV_OAUTH_ISSUER": rig.auth.issuer,
        "PYTHONPATH": os.pathsep.join([str(OAUTH_PLUGINS), cli_env.get("PYTHONPATH", "")]),
    }
    args = ["toolkits", "disconnect", "calendar", "--principal", "leaver", "--yes", "--json"]
    done = subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["toolkits"] == ["calendar"]
    assert issued.refresh_token in rig.auth.revocations, done.stderr
    assert issued.refresh_token not in done.stdout + done.stderr
    assert Agent(rig.sides[0].vault, principal).listed()["calendar"] is False
    assert rig.auth.refresh_calls == 0


def test_the_operators_purge_command_revokes_too(rig: Rig, cli_env: dict[str, str]) -> None:
    """`toolkit-vault purge` opens the vault without toolkits (a broken plugin cannot stop
    an operator); it loads them to revoke when it meets an OAuth token set."""
    principal, _ = connected(rig, "purged")
    issued = rig.auth.latest()
    env = {
        **cli_env,
        "TKV_OAUTH_ISSUER": rig.auth.issuer,
        "PYTHONPATH": os.pathsep.join([str(OAUTH_PLUGINS), cli_env.get("PYTHONPATH", "")]),
    }
    args = ["purge", "--principal", "purged", "--yes", "--json"]
    done = subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["toolkits"] == ["calendar"]
    assert issued.refresh_token in rig.auth.revocations, done.stderr
    assert issued.access_token in rig.auth.revocations
    assert issued.refresh_token not in done.stdout + done.stderr
    events = [e for e in rig.sides[0].vault.export_audit(0) if e["action"] == "oauth_disconnected"]
    assert [(e["actor"], e["toolkit_name"]) for e in events] == [(shell_actor(), "calendar")]
    assert Agent(rig.sides[0].vault, principal).listed()["calendar"] is False


def test_a_live_toolkit_gets_its_token_refreshed_before_it_expires(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Proactive refresh (`refresh_ahead`, every half minute in `serve`): an instance that
    stays initialized is given the new access token before the old one expires."""
    monkeypatch.setenv("TKV_WEB_PROOF_DIR", str(tmp_path))
    principal, first = connected(rig)
    side = rig.sides[0]
    before = len(list(tmp_path.glob("calendar-*.json")))
    assert side.connections.refresh_ahead(300) == []  # an hour left: nothing to do
    rig.clock.offset = 3600 - 200  # within five minutes of its expiry, not yet within one
    scope = f"principal:{principal.principal_id}"
    assert side.connections.refresh_ahead(300) == [f"{scope}/calendar"]
    assert rig.auth.refresh_calls == 1
    proofs = sorted(tmp_path.glob("calendar-*.json"), key=lambda p: p.stat().st_mtime)
    assert len(proofs) == before + 1  # the live instance, initialized again
    fresh = rig.auth.latest().access_token
    assert json.loads(proofs[-1].read_text())["sha256"] == calendar.config_digest(
        {**PUBLIC, "access_token": fresh}
    )
    assert any(e.get("configured") for e in first.events if e["type"] == "toolkit/status/event")
    assert side.connections.refresh_ahead(300) == []  # the new token has an hour
    assert rig.auth.refresh_calls == 1 and first.listed()["calendar"] is True


def test_a_token_request_in_flight_blocks_no_other_write(rig: Rig, tmp_path: Path) -> None:
    """The token request is made under a lease, outside any write transaction: while a
    slow server answers one refresh, another toolkit's configure is stored at once."""
    principal, _ = connected(rig)
    side = rig.sides[0]
    busy = Agent(side.vault, Principal(create_token(side.vault.store, "agent", "busy")[0], "agent"))
    rig.clock.offset = 7200
    rig.auth.knobs.token_delay = 3.0
    refreshing = threading.Thread(target=Agent, args=(side.vault, principal))
    refreshing.start()
    until_asked(lambda: rig.auth.refresh_calls)
    started = time.monotonic()
    answer = busy.send(
        {
            "type": "toolkit/configure/req",
            "toolkit_name": "filesystem",
            "config": {"root_dir": str(tmp_path)},
        }
    )
    took = time.monotonic() - started
    assert answer["status"] == "ok", answer
    assert refreshing.is_alive() and took < 1.5, took  # the token request is still in flight
    refreshing.join(timeout=30)
    assert rig.auth.refresh_calls == 1
    assert Agent(side.vault, principal).listed()["calendar"] is True


def test_a_lease_left_by_a_killed_process_expires(rig: Rig) -> None:
    """A process killed while it held the refresh lease holds nobody up for long: the
    others wait until the lease ends, then one of them refreshes."""
    principal, _ = connected(rig)
    side = rig.sides[0]
    scope = f"principal:{principal.principal_id}"
    (record,) = [
        r for r in side.vault.store.current_versions(scope) if r.toolkit_name == "calendar"
    ]
    rig.clock.offset = 7200
    started = time.monotonic()  # before the lease's end is set: a slow claim counts in it
    taken_at = rig.clock() - LEASE_TTL + 1.0  # its lease ends in a second
    leases = RefreshLeases(side.vault.store)
    assert leases.claim(scope, "calendar", record.version, "killed", taken_at, LEASE_TTL).won
    assert Agent(side.vault, principal).listed()["calendar"] is True
    assert 0.9 < time.monotonic() - started < 10
    assert rig.auth.refresh_calls == 1


def test_a_refresh_whose_lease_ran_out_never_overwrites_a_newer_version(rig: Rig) -> None:
    """Belt and braces: a holder whose lease ran out while its server was slow lets another
    process refresh too (here with the refresh token the first one's rotation kills: it is
    refused); whichever answers second appends nothing, as the version it read is no longer
    the last (compare-and-set), and the connection stays good."""
    principal, _ = connected(rig)
    other = another_process(rig)
    rig.auth.knobs.rotate_refresh_tokens = True
    rig.auth.knobs.token_delay = 1.0
    rig.clock.offset = 7200
    listed: list[dict[str, bool]] = []
    first = threading.Thread(
        target=lambda: listed.append(Agent(rig.sides[0].vault, principal).listed())
    )
    first.start()
    until_asked(lambda: rig.auth.refresh_calls)
    rig.clock.offset += LEASE_TTL + 1  # the first holder's lease has run out
    second = Agent(other.vault, principal)
    first.join(timeout=30)
    assert rig.auth.refresh_calls == 2  # the lease alone did not stop the second
    assert listed == [listed[0]] and listed[0]["calendar"] is True
    assert second.listed()["calendar"] is True
    scope = f"principal:{principal.principal_id}"
    versions = history(rig.sides[0].vault.store, scope, "calendar")
    assert [(v["status"], v["current"]) for v in versions] == [
        ("intake", False),
        ("ok", False),
        ("ok", True),
    ]
    actions = [e["action"] for e in rig.sides[0].vault.export_audit(0)]
    assert actions.count("oauth_refreshed") == 1 and "oauth_refresh_failed" not in actions


def test_a_purge_while_the_server_answers_a_refresh_is_not_undone_by_it(rig: Rig) -> None:
    """The token request runs outside any transaction, for as long as the server takes. An
    operator who purges the connection meanwhile has the last word: the token set the
    refresh brings back is not stored (the version it read is no longer current), so no
    version is current afterwards and the agent's list says so."""
    principal, _ = connected(rig)
    side = rig.sides[0]
    rig.auth.knobs.token_gate = answer = threading.Event()  # the server answers when told
    rig.clock.offset = 7200  # the access token has expired: the next list refreshes it
    listed: list[dict[str, bool]] = []
    refreshing = threading.Thread(
        target=lambda: listed.append(Agent(side.vault, principal).listed())
    )
    refreshing.start()
    until_asked(lambda: rig.auth.refresh_calls)
    assert rig.auth.refresh_calls == 1  # the server is answering
    side.vault.purge_principal("operator", principal.principal_id, "calendar")
    answer.set()
    refreshing.join(timeout=30)
    assert listed == [listed[0]] and listed[0]["calendar"] is False
    scope = f"principal:{principal.principal_id}"
    versions = history(side.vault.store, scope, "calendar")
    assert not [v for v in versions if v["current"]]
    assert [v["status"] for v in versions] == ["purged", "purged"]
    assert Agent(side.vault, principal).listed()["calendar"] is False
    actions = [e["action"] for e in side.vault.export_audit(0)]
    after_purge = actions[actions.index("purge") + 1 :]
    assert "configure" not in after_purge and "oauth_refreshed" not in actions


def test_a_purge_while_the_code_is_exchanged_voids_the_connection(rig: Rig) -> None:
    """The person pressed Connect and allowed access; while the vault exchanges the code,
    an operator purges the intake's scope. The purge has the last word: the token set is
    not stored but revoked at its server (nobody will hold it), the link is refused as
    changed, and nothing is configured."""
    side = rig.sides[0]
    principal = Principal(create_token(side.vault.store, "agent", "late")[0], "agent")
    configure = {"type": "toolkit/configure/req", "toolkit_name": "calendar"}
    answer = Agent(side.vault, principal).send(configure | {"config": PUBLIC, "scope": "principal"})
    link = parse_qs(urlsplit(answer["intake_url"]).query)["link"][0]
    url, cookie = side.connections.start(link, CALLBACK, None)
    allowed = httpx.post(url, data={"confirm": "yes"})
    back = answered(allowed.headers["location"])
    rig.auth.knobs.token_gate = answer = threading.Event()  # the server answers when told

    def purge_during_the_exchange() -> None:
        until_asked(lambda: rig.auth.token_calls)
        side.vault.purge_principal("operator", principal.principal_id, "calendar")
        answer.set()

    purging = threading.Thread(target=purge_during_the_exchange)
    purging.start()
    with pytest.raises(IntakeRefused) as refused:
        side.connections.finish(cookie, *back)
    purging.join(timeout=30)
    assert rig.auth.token_calls == 1 and refused.value.reason == "changed"
    assert set(rig.auth.issued()) <= set(rig.auth.revocations)
    scope = f"principal:{principal.principal_id}"
    assert [v["status"] for v in history(side.vault.store, scope, "calendar")] == ["purged"]
    assert Agent(side.vault, principal).listed()["calendar"] is False


def test_a_purge_leaves_no_refresh_lease_of_what_it_shredded(rig: Rig) -> None:
    """A lease (who refreshes, its failures, its backoff) outlives nothing it was about."""
    principal, _ = connected(rig)
    side = rig.sides[0]
    scope = f"principal:{principal.principal_id}"
    leases = RefreshLeases(side.vault.store)
    assert leases.claim(scope, "calendar", 2, "holder", rig.clock(), LEASE_TTL).won
    side.vault.purge_principal("operator", principal.principal_id, "calendar")
    with side.vault.store.engine.connect() as db:
        assert db.execute(select(RefreshLease).where(RefreshLease.session_id == scope)).all() == []


def test_a_failing_server_is_retried_spaced_then_a_person_reconnects(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that cannot refresh (down, 5xx) is tried again only after a growing pause
    (never in a loop, at initialization or in the background), and after three failures in
    a row the connection waits for a person, as after invalid_grant."""
    principal, first = connected(rig)
    side = rig.sides[0]
    outage = Outage(rig.auth)
    rig.clock.offset = 7200
    agent = Agent(side.vault, principal)
    assert agent.listed()["calendar"] is False  # expired, and the server is down
    assert outage.calls == 1
    for _ in range(3):  # within the pause: nobody asks, neither sessions nor the background
        assert Agent(side.vault, principal).listed()["calendar"] is False
        assert side.connections.refresh_ahead(300) == []
    assert outage.calls == 1
    rig.clock.offset += RETRY_SPACING + 1
    assert Agent(side.vault, principal).listed()["calendar"] is False
    assert outage.calls == 2
    rig.clock.offset += RETRY_SPACING + 1  # the pause doubled: not yet
    assert side.connections.refresh_ahead(300) == []
    assert outage.calls == 2
    rig.clock.offset += RETRY_SPACING
    third = Agent(side.vault, principal)
    assert outage.calls == 3
    (event,) = [e for e in third.events if "connect again" in (e.get("message") or "")]
    assert event["configured"] is False
    assert event["intake_url"].startswith("http://127.0.0.1:9/console/intake?link=")
    rig.clock.offset += 3600
    for _ in range(3):  # marked: no token request again, whatever asks
        assert Agent(side.vault, principal).listed()["calendar"] is False
        side.connections.refresh_ahead(300)
    assert outage.calls == 3 and rig.auth.refresh_calls == 0
    failed = [e for e in side.vault.export_audit(0) if e["action"] == "oauth_refresh_failed"]
    assert [(e["details"]["error"], e["details"]["failures_in_a_row"]) for e in failed] == [
        ("unavailable", 3)
    ]

    outage.down = False  # a person connects again through a link given now
    (again,) = [e for e in Agent(side.vault, principal).events if e.get("intake_url")]
    consent(side, again["intake_url"])
    assert Agent(side.vault, principal).listed()["calendar"] is True
    for issued in rig.auth.issued():
        assert issued not in caplog.text
        assert issued not in json.dumps(list(side.vault.export_audit(0)))
        assert issued not in json.dumps(third.events + first.events)


def test_a_refresh_on_one_replica_reaches_the_live_instances_of_the_others(
    rig: Rig, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the relay at once (serve on PostgreSQL); without one, at the other
    process's next round, which sees the version moved. No second token request."""
    monkeypatch.setenv("TKV_WEB_PROOF_DIR", str(tmp_path))
    principal, _ = connected(rig)
    here, elsewhere = rig.sides[0], another_process(rig)
    there = Agent(elsewhere.vault, principal)
    assert there.listed()["calendar"] is True
    relays = []
    if database_url.startswith("postgresql"):
        relays = [PgEventRelay(side.vault).start() for side in (here, elsewhere)]
        assert all(relay.listening.wait(10) for relay in relays)
    try:
        assert elsewhere.connections.refresh_ahead(300) == []  # an hour left
        rig.clock.offset = 3600 - 200
        scope = f"principal:{principal.principal_id}"
        assert here.connections.refresh_ahead(300) == [f"{scope}/calendar"]
        fresh = calendar.config_digest({**PUBLIC, "access_token": rig.auth.latest().access_token})

        def made_with_the_new_token() -> int:
            proofs = [json.loads(p.read_text()) for p in tmp_path.glob("calendar-*.json")]
            return sum(proof["sha256"] == fresh for proof in proofs)

        if relays:
            deadline = time.monotonic() + 10
            while made_with_the_new_token() < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            assert made_with_the_new_token() == 1  # here only, until the other's round
            assert elsewhere.connections.refresh_ahead(300) == []
        assert made_with_the_new_token() == 2
        told = [e for e in there.events if e["type"] == "toolkit/status/event"]
        assert told and told[-1]["configured"] is True
        assert elsewhere.connections.refresh_ahead(300) == []
        assert rig.auth.refresh_calls == 1
    finally:
        for relay in relays:
            relay.stop()


@pytest.mark.parametrize("plugin", CONFIDENTIAL, ids=lambda p: p.method)
def test_a_confidential_client_sends_its_secret_at_exchange_refresh_and_revocation(
    rig: Rig, plugin: type, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client secret declared in `x-oauth` is a secret field: typed by the person who
    connects, sealed with the token set, carried to each refreshed version, sent as the
    declared method says to the token and revocation endpoints, and never shown."""
    side, name, secret = rig.sides[0], plugin.name, rig.auth.client_secret
    principal = Principal(create_token(side.vault.store, "agent", "team")[0], "agent")
    agent = Agent(side.vault, principal)
    message = {"type": "toolkit/configure/req", "toolkit_name": name, "config": PUBLIC}
    answer = agent.send(message | {"scope": "principal"})
    assert answer["status"] == "partial"
    link = parse_qs(urlsplit(answer["intake_url"]).query)["link"][0]
    with pytest.raises(VaultError, match="client secret"):
        side.connections.start(link, CALLBACK)
    _, cookie = side.connections.start(link, CALLBACK, secret)  # the browser holds it sealed
    fields = json.loads(_unb64(cookie.rpartition(".")[0]))
    assert secret.encode() not in b"".join([_unb64(str(f)) for f in fields[8:]])
    with pytest.raises(OAuthFailed) as refused:  # a wrong secret: the server says so
        consent(side, answer["intake_url"], "not-the-secret")
    assert refused.value.code == "invalid_client"
    consent(side, answer["intake_url"], secret)
    assert agent.listed()[name] is True
    for hours in (2, 4):  # refreshed twice: the second from the version the first stored
        rig.clock.offset = hours * 3600
        assert Agent(side.vault, principal).listed()[name] is True
    assert rig.auth.refresh_calls == 2
    posted = [r.get("client_secret") for r in rig.auth.token_requests]
    in_form = plugin.method == "client_secret_post"
    assert posted == (["not-the-secret", *[secret] * 3] if in_form else [None] * 4)
    side.vault.purge_principal("operator", principal.principal_id, name)
    assert rig.auth.revocation_auth == [plugin.method] * 2  # refresh token, access token
    side.vault.store.engine.dispose()
    shown = caplog.text + json.dumps(agent.events) + json.dumps(list(side.vault.export_audit(0)))
    assert secret not in shown
    for blob in dump(database_url, tmp_path):
        assert secret.encode() not in blob
