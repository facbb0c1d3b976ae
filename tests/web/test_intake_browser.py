"""Intake links end to end: a real `toolkit-vault serve`, an agent on a real WebSocket, and
a person in headless Chromium, on SQLite and PostgreSQL.

Every refusal page is screenshotted (under the test's tmp dir) and checked, at that
moment, for its accessible labels; the canary a person types is looked for in the agent's
messages, the server's log, the page sources and the database.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from sqlalchemy import select

from toolkit_vault.audit.history import history
from toolkit_vault.store.models import AuditEvent

from web_support import (
    Server,
    agent,
    assert_nowhere,
    click_through,
    database_dump,
    plugins,
    screenshot,
    sideways,
)

CANARY = "tkv-canary-intake-4e1b9d"
LEDGER_PUBLIC = {"endpoint": "https://ledger.example.test", "region": "eu"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'home' / 'vault.db'}"
    url: str = request.getfixturevalue("fresh_postgres_url")
    return url


def _submit(browser: WebDriver) -> None:
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/intake'] button")
    click_through(browser, button)


def _heading(browser: WebDriver) -> str:
    return str(browser.find_element(By.TAG_NAME, "h1").text)


def _events(server: Server, action: str) -> list[dict[str, Any]]:
    with server.vault.store.read() as conn:
        query = select(AuditEvent.details, AuditEvent.actor).where(AuditEvent.action == action)
        rows = conn.execute(query).all()
    return [{**json.loads(details), "actor": actor} for details, actor in rows]


def test_agent_gets_a_link_a_person_fills_it_the_agent_is_told(
    server: Server, browser: WebDriver, tmp_path: Path, database_url: str
) -> None:
    with agent(server, server.token("agent", "bookkeeper")) as bot:
        answer = bot.configure("ledger", LEDGER_PUBLIC)
        assert (answer["type"], answer["status"]) == ("toolkit/configure/resp", "partial")
        url = answer["intake_url"]
        assert url.startswith(server.base + "/console/intake?link=") and url in answer["message"]
        assert bot.configured()["ledger"] is False

        browser.get(url)
        assert _heading(browser) == "Configure ledger"
        names = screenshot(browser, tmp_path / "intake-ledger.png")
        assert names == ["API endpoint", "Region", "API key", "Save settings"]
        endpoint = browser.find_element(By.NAME, "/endpoint")
        assert endpoint.get_attribute("value") == LEDGER_PUBLIC["endpoint"]  # public: shown
        key = browser.find_element(By.NAME, "/api_key")
        assert (key.get_attribute("type"), key.get_attribute("value")) == ("password", "")
        assert key.get_attribute("required") == "true"
        key.send_keys(CANARY)
        _submit(browser)
        assert _heading(browser) == "Settings saved"
        done_source = browser.page_source
        screenshot(browser, tmp_path / "intake-saved.png")

        event = bot.next()
        assert event["type"] == "toolkit/status/event"
        assert (event["session_id"], event["toolkit_name"]) == (bot.session_id, "ledger")
        assert (event["configured"], event["status"]) == (True, "ok")
        assert bot.configured()["ledger"] is True
        messages = list(bot.received)

    # the toolkit was initialized with exactly the full config (the agent's half + the secret)
    (proof,) = server.proof("ledger")
    assert proof["sha256"] == plugins.config_digest({**LEDGER_PUBLIC, "api_key": CANARY})

    versions = history(server.vault.store, bot.session_id, "ledger")
    assert [(v["version"], v["status"], v["current"]) for v in versions] == [
        (1, "intake", False),
        (2, "ok", True),
    ]
    assert versions[0]["public_config"] == LEDGER_PUBLIC
    assert list(versions[1]["secret_fingerprints"]) == ["/api_key"]
    (requested,) = _events(server, "intake_requested")
    (completed,) = _events(server, "intake_completed")
    assert requested["link_id"] == completed["link_id"] and requested["missing"] == ["/api_key"]
    assert versions[1]["actor"] == completed["actor"] == f"intake:{requested['link_id']}"
    assert server.vault.verify_audit().ok

    assert url.partition("?link=")[2] not in server.log.read_text()  # the capability neither
    server.vault.store.engine.dispose()
    assert_nowhere(
        CANARY,
        files=[server.log, *database_dump(database_url)],
        texts=[*messages, done_source],
    )


def test_a_link_works_once(server: Server, browser: WebDriver, tmp_path: Path) -> None:
    with agent(server, server.token("agent", "twice")) as bot:
        url = bot.configure("ledger", LEDGER_PUBLIC)["intake_url"]
        browser.get(url)
        first_tab = browser.current_window_handle
        browser.switch_to.new_window("tab")
        browser.get(url)  # the same form, open twice
        browser.find_element(By.NAME, "/api_key").send_keys(CANARY)
        _submit(browser)
        assert _heading(browser) == "Settings saved"
        assert bot.next()["configured"] is True

        browser.get(url)  # opened again
        assert _heading(browser) == "Link already used"
        assert screenshot(browser, tmp_path / "intake-used.png") == []
        browser.switch_to.window(first_tab)  # submitted again, from the older tab
        browser.find_element(By.NAME, "/api_key").send_keys(CANARY + "-other")
        _submit(browser)
        assert _heading(browser) == "Link already used"
        assert "already used" in browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    assert httpx.get(url).status_code == 410
    versions = history(server.vault.store, bot.session_id, "ledger")
    assert [v["status"] for v in versions] == ["intake", "ok"]
    assert len(server.proof("ledger")) == 1


def test_an_expired_link_is_refused(server: Server, browser: WebDriver, tmp_path: Path) -> None:
    with agent(server, server.token("agent", "slow")) as bot:
        answer = bot.configure("ledger", LEDGER_PUBLIC, intake={"expires_in": 1})
        assert "expires in about 1 min" in answer["message"]
        time.sleep(1.2)
        browser.get(answer["intake_url"])
        assert _heading(browser) == "Link expired"
        assert screenshot(browser, tmp_path / "intake-expired.png") == []
        assert "expired" in browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
        assert httpx.get(answer["intake_url"]).status_code == 410
    assert [v["status"] for v in history(server.vault.store, bot.session_id)] == ["intake"]


def _rebind(url: str, other: str) -> str:
    """The link's MAC under another link's (encrypted) payload, naming another session."""
    base, _, link = url.partition("?link=")
    _, _, mac = link.rpartition(".")
    payload = other.partition("?link=")[2].rpartition(".")[0]
    return f"{base}?link={payload}.{mac}"


def _readable(link: str) -> str:
    """Every base64 reading of a link's parts, as text."""
    parts = []
    for part in link.split("."):
        for shift in range(4):
            text = part[shift:][: len(part[shift:]) // 4 * 4]
            parts.append(base64.urlsafe_b64decode(text).decode("latin-1"))
    return " ".join(parts)


def test_a_link_cannot_be_pointed_at_another_session(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with (
        agent(server, server.token("agent", "alice")) as alice,
        agent(server, server.token("agent", "mallory")) as mallory,
    ):
        url = alice.configure("ledger", LEDGER_PUBLIC)["intake_url"]
        theirs = mallory.configure("ledger", LEDGER_PUBLIC)["intake_url"]  # awaits one too
        link = url.partition("?link=")[2]
        for hidden in (alice.session_id, "ledger", "sha256"):
            assert hidden not in _readable(link)  # the link is opaque
        browser.get(_rebind(url, theirs))
        assert _heading(browser) == "Link not valid"
        assert screenshot(browser, tmp_path / "intake-other-session.png") == []
        assert httpx.get(_rebind(url, theirs)).status_code == 404
        browser.get(url)  # the genuine link still serves alice's session only
        browser.find_element(By.NAME, "/api_key").send_keys(CANARY)
        _submit(browser)
        assert _heading(browser) == "Settings saved"
        assert alice.next()["session_id"] == alice.session_id
        assert mallory.configured()["ledger"] is False
    statuses = {
        s: [v["status"] for v in history(server.vault.store, s, "ledger")]
        for s in (alice.session_id, mallory.session_id)
    }
    assert statuses == {alice.session_id: ["intake", "ok"], mallory.session_id: ["intake"]}


def test_a_post_without_its_csrf_token_stores_nothing(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with agent(server, server.token("agent", "forged")) as bot:
        url = bot.configure("ledger", LEDGER_PUBLIC)["intake_url"]
        browser.get(url)
        browser.find_element(By.NAME, "/api_key").send_keys(CANARY)
        browser.execute_script("document.querySelector('input[name=csrf]').remove()")
        _submit(browser)
        assert _heading(browser) == "Form refused"
        assert screenshot(browser, tmp_path / "intake-no-csrf.png") == []
        assert CANARY not in browser.page_source
        assert [v["status"] for v in history(server.vault.store, bot.session_id)] == ["intake"]
        assert server.proof("ledger") == []

        browser.get(url)  # the link was not spent: the genuine form still works
        browser.find_element(By.NAME, "/api_key").send_keys(CANARY)
        _submit(browser)
        assert _heading(browser) == "Settings saved"
        assert bot.next()["configured"] is True


EVERYTHING_LABELS = [
    "Contact email", "Homepage", "Account id", "Plan", "Sampling ratio", "Port",
    "Verbose logging", "Tags", "Retry delays", "Database host", "Database password",
    "Access token", "Signing key", "Extra headers", "Save settings",
]  # fmt: skip
SECRET_NAMES = {"/database/password", "/token", "/signing_key", "/headers"}


def _fill(browser: WebDriver, values: dict[str, str]) -> None:
    for name, value in values.items():
        element = browser.find_element(By.NAME, name)
        if element.get_attribute("type") == "checkbox":
            if element.is_selected() != (value == "true"):
                element.click()
        elif element.tag_name == "select":
            element.find_element(By.XPATH, f".//option[normalize-space()='{value}']").click()
        else:
            element.clear()
            element.send_keys(value)


def _errors_beside(browser: WebDriver) -> dict[str, str]:
    """name -> the error text the input's aria-describedby points at, inside its field."""
    found = {}
    for control in browser.find_elements(By.CSS_SELECTOR, "[aria-invalid=true]"):
        ids = (control.get_attribute("aria-describedby") or "").split()
        error = next(i for i in ids if i.endswith("-err"))
        container = control.find_element(By.XPATH, "..")
        found[control.get_attribute("name")] = container.find_element(By.ID, error).text
    return found


def test_a_schema_with_every_kind_of_field(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    secrets = {"/database/password": CANARY + "-db", "/token": CANARY + "-tok"}
    headers = '{"X-Tenant": "' + CANARY + '-hdr"}'
    with agent(server, server.token("agent", "everything")) as bot:
        given = {"email": "ops@example.test", "plan": "team", "homepage": "https://a.test/x"}
        answer = bot.configure("everything", given)
        assert answer["type"] == "error" and answer["code"] == "RUNTIME_ERROR"  # public missing
        url = bot.configure("everything", given, intake=True)["intake_url"]
        browser.get(url)
        assert screenshot(browser, tmp_path / "intake-everything.png") == EVERYTHING_LABELS
        controls = {
            el.get_attribute("name"): el
            for el in browser.find_elements(By.CSS_SELECTOR, "[name^='/']")
        }
        kinds = {name: (el.tag_name, el.get_attribute("type")) for name, el in controls.items()}
        assert {n for n, k in kinds.items() if k == ("input", "password")} == SECRET_NAMES
        assert {n for n, k in kinds.items() if k[0] == "select"} == {"/plan"}
        assert kinds["/verbose"] == ("input", "checkbox")
        assert kinds["/ratio"] == kinds["/port"] == ("input", "number")
        assert controls["/port"].get_attribute("step") == "1"
        assert controls["/port"].get_attribute("max") == "65535"
        assert {n for n, k in kinds.items() if k[0] == "textarea"} == {"/tags", "/retries"}
        assert kinds["/email"] == ("input", "email") and kinds["/homepage"] == ("input", "url")
        assert browser.find_element(By.ID, "requester").text.startswith(
            "Asked by the agent token everything"
        )
        chosen = browser.find_elements(By.CSS_SELECTOR, ".prefilled dt")
        assert [dt.text for dt in chosen] == ["Homepage", "Contact email", "Plan"]  # URLs first
        marked = {
            mark.find_element(By.XPATH, "./ancestor::div[@class='field']//*[@name]").get_attribute(
                "name"
            )
            for mark in browser.find_elements(By.CSS_SELECTOR, "strong.agent")
        }
        assert marked == {"/email", "/homepage", "/plan"}  # "prefilled by the agent", only those
        assert browser.find_element(By.CSS_SELECTOR, "h2.secret-h")
        assert sideways(browser) == []
        required = {n for n, el in controls.items() if el.get_attribute("required")}
        assert required == {"/email", "/plan", "/port", "/database/host", *secrets}
        assert controls["/email"].get_attribute("value") == "ops@example.test"
        assert controls["/plan"].get_attribute("value") == "1"  # "team", prefilled
        described = controls["/account"].get_attribute("aria-describedby").split()
        assert "Looks like acct-1234." in [browser.find_element(By.ID, i).text for i in described]
        assert browser.find_element(By.XPATH, "//fieldset/legend").text == "Database *"

        wrong = {
            "/account": "nope", "/ratio": "2", "/port": "70000", "/retries": "1\nsoon",
            "/database/host": "db.internal", "/signing_key": "", "/headers": headers,
            "/verbose": "true", "/tags": "blue\ngreen", **secrets,
        }  # fmt: skip
        _fill(browser, wrong)
        _submit(browser)
        assert "Please correct the marked fields" in browser.page_source
        names = screenshot(browser, tmp_path / "intake-everything-errors.png")
        assert names == EVERYTHING_LABELS
        beside = _errors_beside(browser)
        assert set(beside) == {"/account", "/ratio", "/port", "/retries"}
        assert beside["/account"] == "This value does not match the required pattern."
        assert beside["/ratio"] == beside["/port"] == "This number is too large."
        assert beside["/retries"] == "This value has the wrong type. (item 1)"
        for name in SECRET_NAMES:  # never echoed, not even after an error
            assert browser.find_element(By.NAME, name).get_attribute("value") == ""
        assert browser.find_element(By.NAME, "/account").get_attribute("value") == "nope"
        assert CANARY not in browser.page_source
        assert server.proof("everything") == []

        _fill(
            browser,
            {"/account": "acct-1234", "/ratio": "0.25", "/port": "8443", "/retries": "1\n5"}
            | secrets
            | {"/headers": headers},
        )
        _submit(browser)
        assert _heading(browser) == "Settings saved"
        assert bot.next()["configured"] is True
    expected = {
        "email": "ops@example.test", "homepage": "https://a.test/x", "account": "acct-1234",
        "plan": "team", "ratio": 0.25,
        "port": 8443, "verbose": True, "tags": ["blue", "green"], "retries": [1, 5],
        "database": {"host": "db.internal", "password": CANARY + "-db"},
        "token": CANARY + "-tok", "headers": {"X-Tenant": CANARY + "-hdr"},
    }  # fmt: skip
    (proof,) = server.proof("everything")
    assert proof["sha256"] == plugins.config_digest(expected)
    (version,) = [v for v in history(server.vault.store, bot.session_id) if v["status"] == "ok"]
    assert sorted(version["secret_fingerprints"]) == [
        "/database/password", "/headers/X-Tenant", "/token",
    ]  # fmt: skip
    assert_nowhere(CANARY, files=[server.log], texts=bot.received)
