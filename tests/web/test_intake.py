"""Intake links through the service API, on SQLite and PostgreSQL: when a link is offered,
what it keeps, and every way it stops working (used, expired, forged, superseded,
purged, its toolkit changed), including two people submitting the same link at once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import delete, select, update

from toolkit_vault.access.principals import Principal
from toolkit_vault.audit.history import history
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.intake import Claim, Intake, IntakeRefused, LinkSigner
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import ConfigInvalid
from toolkit_vault.protocol import Message
from toolkit_vault.store.models import AuditEvent, ConfigVersion
from toolkit_vault.toolkits.registry import SourceKind, ToolkitRegistry, ToolkitSource
from toolkit_vault.transports.web.pages import environment
from toolkit_vault.transports.web.sessions_view import sessions_view

from tkv_test_plugins import SecretiveToolkit
from web_support import database_dump, plugins

AGENT = Principal("local", "agent")
CANARY = "tkv-canary-intake-svc-0c77"
KEY = SecretBytes(b"k" * 32)
LEDGER = {"endpoint": "https://ledger.test", "region": "us"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'vault.db'}"
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def intake(vault: Vault, clock: Clock) -> Intake:
    service = Intake(vault, KEY, lambda link: f"https://vault.test/intake?link={link}", clock=clock)
    vault.intake = service
    return service


class Session:
    """One agent connection; push events are kept."""

    def __init__(self, vault: Vault) -> None:
        self.events: list[Message] = []
        self.conn: A2EConnection = connect(vault, AGENT, self.events.append)
        hello = self.send({"type": "handshake/req", "capabilities": ["toolkits"]})
        self.id: str = hello["session_id"]

    def send(self, message: dict[str, Any]) -> dict[str, Any]:
        return dict(json.loads(self.conn.handle_raw(json.dumps(message))[0]))

    def configure(self, toolkit: str, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
        request = {"type": "toolkit/configure/req", "toolkit_name": toolkit, "config": config}
        return self.send({**request, **extra})

    def configured(self) -> dict[str, bool]:
        listed = self.send({"type": "toolkit/list/req"})
        return {t["name"]: t["configured"] for t in listed["toolkits"]}


@pytest.fixture
def session(vault: Vault, intake: Intake) -> Iterator[Session]:
    opened = Session(vault)
    yield opened
    opened.conn.close()


def link_of(answer: dict[str, Any]) -> str:
    assert answer["status"] == "partial", answer
    return str(answer["intake_url"].partition("?link=")[2])


def statuses(vault: Vault, session: Session) -> list[str]:
    return [v["status"] for v in history(vault.store, session.id)]


def audit(vault: Vault, action: str) -> list[dict[str, Any]]:
    with vault.store.read() as conn:
        query = select(AuditEvent.details).where(AuditEvent.action == action)
        return [json.loads(d) for (d,) in conn.execute(query)]


def test_a_missing_secret_gets_a_link_and_only_the_public_half_is_kept(
    vault: Vault, session: Session, database_url: str
) -> None:
    given = {"endpoint": "e", "auth": {"user": "u", "password": CANARY}, "tokens": [CANARY]}
    answer = session.configure("secretive", given)
    url = answer["intake_url"]
    assert url.startswith("https://vault.test/intake?link=") and url in answer["message"]
    (version,) = history(vault.store, session.id)
    assert version["status"] == "intake" and not version["current"]
    assert version["public_config"] == {"endpoint": "e", "auth": {"user": "u"}, "tokens": [None]}
    assert version["secret_fingerprints"] == {}
    (requested,) = audit(vault, "intake_requested")
    assert requested["missing"] == ["/api_key"] and requested["link_id"] in version["message"]
    assert session.configured()["secretive"] is False
    plain = session.configure("filesystem", {"root_dir": "/tmp"})
    assert "intake_url" not in plain  # a spec client sees the spec's fields only
    vault.store.engine.dispose()
    for path in database_dump(database_url):
        assert CANARY.encode() not in path.read_bytes()


def test_only_missing_secret_fields_offer_a_link_unasked(vault: Vault, session: Session) -> None:
    refused = session.configure("ledger", {})  # /endpoint is public: the agent must give it
    assert refused["type"] == "error" and refused["code"] == "RUNTIME_ERROR"
    assert {d["pointer"] for d in refused["details"]} == {"/endpoint", "/api_key"}
    wrong_type = session.configure("ledger", {"endpoint": 5})
    assert wrong_type["type"] == "error"
    assert {"pointer": "/endpoint", "keyword": "type"} in wrong_type["details"]
    assert session.configure("ledger", {"endpoint": 5}, intake=True)["type"] == "error"
    assert statuses(vault, session) == []
    asked = session.configure("ledger", {}, intake=True)  # a person may fill public ones too
    assert asked["status"] == "partial"
    assert audit(vault, "intake_requested")[0]["missing"] == ["/api_key", "/endpoint"]


def test_without_a_console_configure_is_as_before(vault: Vault, session: Session) -> None:
    vault.intake = None
    assert session.configure("ledger", LEDGER)["details"] == [
        {"pointer": "/api_key", "keyword": "required"}
    ]
    refused = session.configure("ledger", LEDGER, intake=True)
    assert refused["type"] == "error" and "web console" in refused["message"]
    assert statuses(vault, session) == []


def test_a_link_configures_the_session_once(vault: Vault, session: Session, intake: Intake) -> None:
    link = link_of(session.configure("secretive", {"endpoint": "https://x.test"}))
    view = intake.open(link)
    assert (view.claim.session_id, view.claim.version) == (session.id, 2)
    assert view.public_config == {"endpoint": "https://x.test"}
    full = {"endpoint": "https://x.test", "api_key": CANARY}
    outcome = intake.complete(link, full)
    assert (outcome.status, SecretiveToolkit.received[-1]) == ("ok", full)
    (event,) = [e for e in session.events if e.type == "toolkit/status/event"]
    assert event.model_dump()["configured"] is True
    assert session.configured()["secretive"] is True
    for again in (intake.open, lambda link: intake.complete(link, full)):
        with pytest.raises(IntakeRefused) as refused:
            again(link)
        assert refused.value.reason == "used"
    assert statuses(vault, session) == ["intake", "ok"]
    (completed,) = audit(vault, "intake_completed")
    assert completed == {"link_id": view.claim.link_id, "status": "ok"}
    assert vault.verify_audit().ok  # intake versions have their configure events too


def test_the_sessions_page_says_a_pending_intake_is_pending(
    vault: Vault, session: Session, intake: Intake
) -> None:
    """A session whose toolkit waits on an intake link has nothing configured, yet is not
    "nothing configured": the console's Sessions page says the link is pending, until it is
    used (then configured) or superseded."""

    def row_and_page() -> tuple[dict[str, Any], str]:
        rows = sessions_view(vault.store)
        (row,) = [r for r in rows if r["session_id"] == session.id]
        page = (
            environment()
            .get_template("sessions.html")
            .render(user=None, sessions=rows, page="sessions", csrf="")
        )
        (cell,) = [c for c in page.split("<tr>") if session.id in c]
        return row, " ".join(cell.split())

    row, cell = row_and_page()
    assert (row["configured"], row["pending"]) == ([], [])
    assert "nothing configured" in cell and "pending" not in cell
    link = link_of(session.configure("secretive", {"endpoint": "https://x.test"}))
    row, cell = row_and_page()
    assert (row["configured"], row["pending"]) == (
        [],
        [{"toolkit_name": "secretive", "version": 1}],
    )
    assert "nothing configured" not in cell
    assert '<span class="pending">pending</span> secretive' in cell and "intake link" in cell
    assert session.configure("ledger", LEDGER)["status"] == "partial"  # a second one pending
    intake.complete(link, {"endpoint": "https://x.test", "api_key": CANARY})
    row, cell = row_and_page()
    assert [c["toolkit_name"] for c in row["configured"]] == ["secretive"]
    assert row["pending"] == [{"toolkit_name": "ledger", "version": 1}]
    assert "configured</span> secretive" in cell and "pending</span> ledger" in cell
    assert session.configure("ledger", {**LEDGER, "api_key": "k"})["status"] == "ok"
    row, cell = row_and_page()  # a configure supersedes the link: nothing pending
    assert row["pending"] == [] and "pending</span>" not in cell
    assert CANARY not in cell


def test_links_expire(vault: Vault, session: Session, intake: Intake, clock: Clock) -> None:
    link = link_of(session.configure("ledger", LEDGER))
    clock.now += intake.ttl - 1
    intake.open(link)
    clock.now += 1
    with pytest.raises(IntakeRefused) as refused:
        intake.complete(link, {**LEDGER, "api_key": CANARY})
    assert refused.value.reason == "expired"
    short = link_of(session.configure("ledger", LEDGER, intake={"expires_in": 5}))
    clock.now += 4
    intake.open(short)
    clock.now += 1
    with pytest.raises(IntakeRefused):
        intake.open(short)
    assert "expired" in str(IntakeRefused("expired"))
    too_long = session.configure("ledger", LEDGER, intake={"expires_in": 10**6})
    clock.now += intake.ttl
    with pytest.raises(IntakeRefused):
        intake.open(link_of(too_long))  # an agent can shorten a link's life, never extend it


def _tampered(link: str) -> list[str]:
    payload, _, mac = link.rpartition(".")
    flipped = "A" if payload[5] != "A" else "B"
    other = LinkSigner(SecretBytes(b"x" * 32)).issue(
        Claim("id", "s", "ledger", "sha256:0", 2, "local", 2e9)
    )
    return [
        "", "garbage", ".", link + "x", link[:-2], payload + "." + mac[::-1],
        payload[:5] + flipped + payload[6:] + "." + mac, other, payload + "." + "A" * 3000,
    ]  # fmt: skip


def test_forged_links_are_refused(vault: Vault, session: Session, intake: Intake) -> None:
    link = link_of(session.configure("ledger", LEDGER))
    for forged in _tampered(link):
        with pytest.raises(IntakeRefused) as refused:
            intake.complete(forged, {**LEDGER, "api_key": CANARY})
        assert refused.value.reason == "invalid", forged
    assert statuses(vault, session) == ["intake"]
    intake.open(link)


def test_a_newer_configure_supersedes_the_link(
    vault: Vault, session: Session, intake: Intake
) -> None:
    link = link_of(session.configure("ledger", LEDGER))
    assert session.configure("ledger", {**LEDGER, "api_key": CANARY})["status"] == "ok"
    with pytest.raises(IntakeRefused) as refused:
        intake.complete(link, {**LEDGER, "api_key": CANARY + "-late"})
    assert refused.value.reason == "used"
    assert statuses(vault, session) == ["intake", "ok"]


def test_a_changed_toolkit_or_a_purge_voids_the_link(
    vault: Vault, session: Session, intake: Intake
) -> None:
    link = link_of(session.configure("ledger", LEDGER))
    original = vault.registry

    class Changed(plugins.LedgerToolkit):  # type: ignore[misc]
        definition: ClassVar[dict[str, Any]] = {
            **plugins.LedgerToolkit.definition,
            "schema": {**plugins.LEDGER_SCHEMA, "required": ["endpoint"]},
        }

    for registry_with in ([Changed], []):
        vault.registry = ToolkitRegistry()
        for factory in registry_with:
            vault.registry.register(factory, ToolkitSource(SourceKind.ENTRY_POINT, "test"))
        with pytest.raises(IntakeRefused) as refused:
            intake.open(link)
        assert refused.value.reason == "changed"
    vault.registry = original
    intake.open(link)
    vault.purge("operator", session.id)
    with pytest.raises(IntakeRefused) as refused:
        intake.open(link)
    assert refused.value.reason == "changed"


def test_a_purge_while_the_submission_is_checked_voids_it(
    vault: Vault, session: Session, intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submission waits on its checks (a credential check may ask a server for seconds)
    after the link was opened. A purge that lands meanwhile has the last word: the config
    is not stored (the purged version keeps its number, which alone would let it through)."""
    link = link_of(session.configure("ledger", LEDGER))
    checked = Intake._checked

    def purged_meanwhile(self: Intake, *args: Any, **kwargs: Any) -> Any:
        vault.purge("operator", session.id)
        return checked(self, *args, **kwargs)

    monkeypatch.setattr(Intake, "_checked", purged_meanwhile)
    with pytest.raises(IntakeRefused) as refused:
        intake.complete(link, {**LEDGER, "api_key": CANARY})
    assert refused.value.reason == "changed"
    assert statuses(vault, session) == ["purged"]
    assert session.configured()["ledger"] is False


def test_a_bad_config_is_refused_and_the_link_stays_good(
    vault: Vault, session: Session, intake: Intake
) -> None:
    link = link_of(session.configure("ledger", LEDGER))
    for bad in ({**LEDGER}, {**LEDGER, "api_key": 5}, {**LEDGER, "api_key": CANARY, "x": 1}):
        with pytest.raises(ConfigInvalid) as invalid:
            intake.complete(link, bad)
        assert CANARY not in repr(invalid.value.details) + str(invalid.value)
    refusals = audit(vault, "intake_refused")
    assert [r["errors"][0]["keyword"] for r in refusals] == [
        "required",
        "type",
        "additionalProperties",
    ]
    assert intake.complete(link, {**LEDGER, "api_key": CANARY}).status == "ok"


def test_a_toolkit_that_refuses_the_config_spends_the_link(
    vault: Vault, session: Session, intake: Intake
) -> None:
    link = link_of(session.configure("secretive", {"endpoint": "e", "mode": "fail"}))
    outcome = intake.complete(link, {"endpoint": "e", "mode": "fail", "api_key": CANARY})
    assert outcome.status == "error" and CANARY not in outcome.message
    assert statuses(vault, session) == ["intake", "error"]
    assert session.configured()["secretive"] is False
    with pytest.raises(IntakeRefused):
        intake.open(link)


class SlowToolkit:
    """Holds every initialize until two have started: two submissions of one link then
    both pass the link checks before either stores anything."""

    barrier: ClassVar[threading.Barrier] = threading.Barrier(2, timeout=20)
    definition: ClassVar[dict[str, Any]] = {
        **plugins.LedgerToolkit.definition,
        "name": "slow",
    }

    def initialize(self, config: dict[str, Any]) -> None:
        SlowToolkit.barrier.wait()


def test_two_submissions_of_one_link_store_one_version(
    vault: Vault, session: Session, intake: Intake
) -> None:
    vault.registry.register(SlowToolkit, ToolkitSource(SourceKind.ENTRY_POINT, "test"))
    link = link_of(session.configure("slow", LEDGER))
    results: list[Any] = []

    def submit(n: int) -> None:
        try:
            results.append(intake.complete(link, {**LEDGER, "api_key": f"{CANARY}-{n}"}))
        except IntakeRefused as exc:
            results.append(exc.reason)

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(r if isinstance(r, str) else r.status for r in results) == ["ok", "used"]
    assert [v["status"] for v in history(vault.store, session.id, "slow")] == ["intake", "ok"]
    assert len(audit(vault, "intake_completed")) == 1


def test_the_intake_service_refuses_weak_settings(vault: Vault) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Intake(vault, SecretBytes(b"short"), str)
    with pytest.raises(ValueError, match="between"):
        Intake(vault, KEY, str, ttl=0)


def test_an_edited_pending_row_never_steers_the_form(
    vault: Vault, session: Session, intake: Intake
) -> None:
    """Issue 35, attack 4: the public half a form prefills comes only from the pending row
    as the vault wrote it; an endpoint edited into it by SQL voids the link."""
    SecretiveToolkit.received.clear()
    link = link_of(session.configure("secretive", {"endpoint": "https://x.test"}))
    evil = json.dumps({"endpoint": "https://attacker.test"})
    with vault.store.engine.begin() as db:
        db.execute(update(ConfigVersion).values(public_config=evil))
    for attempt in (intake.open, lambda link: intake.complete(link, {"api_key": CANARY})):
        with pytest.raises(IntakeRefused):
            attempt(link)
    assert SecretiveToolkit.received == []


def test_a_used_link_whose_version_was_deleted_stays_used(
    vault: Vault, session: Session, intake: Intake
) -> None:
    link = link_of(session.configure("secretive", {"endpoint": "https://x.test"}))
    full = {"endpoint": "https://x.test", "api_key": CANARY}
    assert intake.complete(link, full).status == "ok"
    with vault.store.engine.begin() as db:
        db.execute(delete(ConfigVersion).where(ConfigVersion.status == "ok"))
    for attempt in (intake.open, lambda link: intake.complete(link, full)):
        with pytest.raises(IntakeRefused) as refused:
            attempt(link)
        assert refused.value.reason == "used"
    assert statuses(vault, session) == ["intake"]
