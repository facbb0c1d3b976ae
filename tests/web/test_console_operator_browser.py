"""An operator's actions in the console, against a real `toolkit-vault serve`: create a
token (shown once, working at once, in no log line and no audit event), revoke one after
its confirmation page (never one's own: refused with the reason), ask a person for a key
(an intake link a person then fills in Chromium, the agent told), purge after a page
naming what it destroys. Each is audited with the operator's principal as its actor;
auditors and agents are refused each; a POST without its confirmation changes nothing, and
one without its CSRF token is refused. Pages visited are screenshotted."""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select
from sqlalchemy import select

from toolkit_vault.access.principals import authenticate, list_principals
from toolkit_vault.audit.history import history
from toolkit_vault.store.models import AuditEvent

from web_support import Server, agent, click_through, screenshot

CANARY = "tkv-canary-console-op-7f20"
SECRETIVE = {"endpoint": "https://api.example.test", "api_key": CANARY}


def sign_in(browser: WebDriver, server: Server, token: str) -> None:
    browser.get(server.base + "/console/")
    browser.find_element(By.ID, "token").send_keys(token)
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/signin'] button")
    click_through(browser, button)


def heading(browser: WebDriver) -> str:
    return str(browser.find_element(By.TAG_NAME, "h1").text)


def button(browser: WebDriver, text: str) -> Any:
    return browser.find_element(By.XPATH, f"//button[normalize-space(.)={json.dumps(text)}]")


def events(server: Server, action: str) -> list[Any]:
    with server.vault.store.read() as conn:
        query = select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.seq)
        return list(conn.execute(query).all())


def principal_id(server: Server, name: str) -> str:
    return next(p.principal_id for p in list_principals(server.vault.store) if p.name == name)


def active(server: Server, name: str) -> bool:
    return next(p for p in list_principals(server.vault.store) if p.name == name).revoked_at is None


def statuses(server: Server, session: str) -> list[str]:
    return [v["status"] for v in history(server.vault.store, session)]


class Signed:
    """A console session driven over plain HTTP (its cookies are `Secure`, so they are
    sent by hand on this http:// test server), for the refusals and the headers."""

    def __init__(self, server: Server, token: str) -> None:
        self.base = server.base
        page = httpx.get(self.base + "/console/")
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert csrf is not None
        signed = httpx.post(
            self.base + "/console/signin",
            data={"csrf": csrf[1], "token": token},
            headers={"Cookie": f"tkv_csrf={page.cookies['tkv_csrf']}"},
        )
        assert signed.status_code == 303, signed.text
        self.cookie = "; ".join(f"{k}={signed.cookies[k]}" for k in ("tkv_console", "tkv_csrf"))
        home = self.get(signed.headers["location"])
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', home.text)
        assert found is not None
        self.csrf = found[1]

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.base + path, headers={"Cookie": self.cookie})

    def post(self, path: str, data: dict[str, str], csrf: bool = True) -> httpx.Response:
        form = data | ({"csrf": self.csrf} if csrf else {})
        return httpx.post(self.base + path, data=form, headers={"Cookie": self.cookie})


def test_an_operator_creates_revokes_asks_a_person_and_purges(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    sign_in(browser, server, server.token("operator", "ops"))
    ops = principal_id(server, "ops")
    browser.get(server.base + "/console/tokens")
    names = screenshot(browser, tmp_path / "console-tokens-create.png")
    assert names[:5] == ["Sign out", "Name", "Role", "Expires after", "Create the token"]
    assert "Revoke the token of ops" not in names  # one's own: no button, a word instead
    assert "yours: you are signed in with it" in browser.page_source

    # create: shown once, on its own page, and it works at once
    browser.find_element(By.ID, "name").send_keys("new-agent")
    Select(browser.find_element(By.ID, "role")).select_by_visible_text("agent")
    browser.find_element(By.ID, "ttl").send_keys("30d")
    click_through(browser, button(browser, "Create the token"))
    assert heading(browser) == "Token created for new-agent"
    screenshot(browser, tmp_path / "console-token-created.png")
    token = browser.find_element(By.ID, "new-token").get_attribute("value") or ""
    assert token.startswith("tkv_") and authenticate(server.vault.store, token) is not None
    assert "It expires 20" in browser.page_source  # in 30 days, the date shown
    (made,) = [p for p in list_principals(server.vault.store) if p.name == "new-agent"]
    assert made.expires_at is not None and 29 * 86400 < made.expires_at - time.time() <= 30 * 86400
    (created,) = events(server, "token_created")[-1:]
    assert created.actor == ops and json.loads(created.details)["name"] == "new-agent"
    browser.get(server.base + "/console/tokens")
    assert token not in browser.page_source  # never shown again

    with agent(server, token) as bot:  # the new token speaks A2E at once
        assert bot.configure("secretive", SECRETIVE)["status"] == "ok"
        session = bot.session_id

        # ask a person: from the session's row, a link a person fills in
        browser.get(server.base + "/console/sessions")
        row = f"//tr[td/code[text()='{session}']]"
        click_through(browser, browser.find_element(By.XPATH, row + "//a[contains(., 'Ask')]"))
        assert browser.find_element(By.ID, "session").get_attribute("value") == session
        Select(browser.find_element(By.ID, "toolkit")).select_by_visible_text("ledger")
        screenshot(browser, tmp_path / "console-ask.png")
        click_through(browser, button(browser, "Make the intake link"))
        assert heading(browser) == "Intake link for ledger"
        screenshot(browser, tmp_path / "console-ask-link.png")
        url = browser.find_element(By.ID, "intake-link").get_attribute("value") or ""
        assert url.startswith(server.base + "/console/intake?link=")
        (asked,) = events(server, "intake_requested")
        assert (asked.actor, asked.session_id) == (ops, session)

        browser.get(url)  # the person
        assert heading(browser) == "Configure ledger"
        browser.find_element(By.NAME, "/endpoint").send_keys("https://ledger.example.test")
        browser.find_element(By.NAME, "/api_key").send_keys(CANARY)
        click_through(browser, button(browser, "Save settings"))
        pushed = bot.next()
        while pushed.get("toolkit_name") == "secretive":  # its own configure's event first
            pushed = bot.next()
        assert (pushed["type"], pushed["toolkit_name"], pushed["configured"]) == (
            "toolkit/status/event",
            "ledger",
            True,
        )
        assert bot.configured()["ledger"] is True

    # purge: the confirmation names what goes; only its button destroys
    browser.get(server.base + "/console/sessions")
    click_through(browser, browser.find_element(By.XPATH, row + "//a[contains(., 'Purge')]"))
    assert browser.find_element(By.ID, "session").get_attribute("value") == session
    click_through(browser, button(browser, "Review the purge"))
    assert heading(browser) == f"Purge session {session}?"
    kept = [s for s in statuses(server, session) if s != "purged"]
    assert browser.find_element(By.ID, "purge-versions").text == str(len(kept)) == "3"
    assert "ledger, secretive" in browser.page_source
    screenshot(browser, tmp_path / "console-purge-confirm.png")
    assert "purged" not in statuses(server, session) and events(server, "purge") == []
    click_through(browser, button(browser, "Destroy 3 stored versions"))
    assert heading(browser) == f"Purged session {session}"
    screenshot(browser, tmp_path / "console-purge-done.png")
    assert set(statuses(server, session)) == {"purged"}
    (purged,) = events(server, "purge")
    assert (purged.actor, purged.session_id) == (ops, session)

    # revoke: a confirmation page first, then the token is refused everywhere
    browser.get(server.base + "/console/tokens")
    click_through(browser, button(browser, "Revoke the token of new-agent"))
    assert heading(browser) == "Revoke the token of new-agent?"
    screenshot(browser, tmp_path / "console-revoke-confirm.png")
    assert active(server, "new-agent")  # the first POST changed nothing
    click_through(browser, button(browser, "Revoke the token of new-agent"))
    assert browser.current_url == server.base + "/console/tokens"
    assert not active(server, "new-agent") and authenticate(server.vault.store, token) is None
    (revoked,) = events(server, "token_revoked")
    assert revoked.actor == ops

    # one's own token: a forged form is refused with the reason, and the session goes on
    server.token("agent", "bystander")
    browser.get(server.base + "/console/tokens")
    form = browser.find_element(By.CSS_SELECTOR, "form[action='/console/tokens/revoke']")
    browser.execute_script(
        "arguments[0].querySelector('input[name=principal_id]').value = arguments[1]", form, ops
    )
    click_through(browser, form.find_element(By.TAG_NAME, "button"))
    assert heading(browser) == "Not revoked: this is your own token"
    assert "lock you out" in browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    screenshot(browser, tmp_path / "console-revoke-own.png")
    assert active(server, "ops") and len(events(server, "token_revoked")) == 1
    browser.get(server.base + "/console/sessions")
    assert heading(browser) == "Sessions"

    # the token was in no log line of the server and in no audit event
    digest = hashlib.sha256(token.encode()).hexdigest()
    for text in (server.log.read_text(), repr(events_all(server))):
        assert token not in text and digest not in text and CANARY not in text


def events_all(server: Server) -> list[Any]:
    with server.vault.store.read() as conn:
        return [tuple(row) for row in conn.execute(select(AuditEvent)).all()]


def test_a_post_without_its_confirmation_or_csrf_changes_nothing(server: Server) -> None:
    ops = Signed(server, server.token("operator", "careful"))
    mine = principal_id(server, "careful")
    server.token("agent", "victim")
    with agent(server, server.token("agent", "holder")) as bot:
        assert bot.configure("secretive", SECRETIVE)["status"] == "ok"
        session = bot.session_id
    target = principal_id(server, "victim")

    for confirm in ({}, {"confirm": ""}, {"confirm": "victim-not"}):
        page = ops.post("/console/tokens/revoke", {"principal_id": target} | confirm)
        assert page.status_code == 200 and "Revoke the token of victim?" in page.text
    for confirm in ({}, {"confirm": ""}, {"confirm": session[:8]}):
        page = ops.post("/console/purge", {"session": session} | confirm)
        assert page.status_code == 200 and 'id="purge-versions">1<' in page.text
    own = ops.post("/console/tokens/revoke", {"principal_id": mine, "confirm": mine})
    assert own.status_code == 409 and "that is your own token" in own.text
    refused = [
        ("/console/tokens/create", {"name": "sneaky", "role": "operator"}),
        ("/console/tokens/revoke", {"principal_id": target, "confirm": target}),
        ("/console/ask", {"toolkit": "ledger", "session": session}),
        ("/console/purge", {"session": session, "confirm": session}),
    ]
    for path, data in refused:
        page = ops.post(path, data, csrf=False)
        assert page.status_code == 403 and "Form refused" in page.text, path
    assert active(server, "victim") and active(server, "careful")
    assert "sneaky" not in {p.name for p in list_principals(server.vault.store)}
    assert statuses(server, session) == ["ok"]
    assert [events(server, a) for a in ("token_revoked", "purge", "intake_requested")] == [[]] * 3

    created = ops.post("/console/tokens/create", {"name": "headers", "role": "auditor"})
    assert created.status_code == 200 and created.headers["cache-control"] == "no-store"
    token = re.search(r'id="new-token" type="text" value="(tkv_[^"]+)"', created.text)
    assert token is not None and authenticate(server.vault.store, token[1]) is not None
    invalid = ops.post("/console/tokens/create", {"name": "headers", "role": "auditor"})
    assert invalid.status_code == 422 and "already exists" in invalid.text
    assert token[1] not in invalid.text and token[1] not in server.log.read_text()


def test_auditors_and_agents_are_refused_every_operator_action(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with agent(server, server.token("agent", "bystander")) as bot:
        assert bot.configure("secretive", SECRETIVE)["status"] == "ok"
        session = bot.session_id
    bystander = principal_id(server, "bystander")
    actions = [
        ("/console/tokens/create", {"name": "escalated", "role": "operator"}),
        ("/console/tokens/revoke", {"principal_id": bystander, "confirm": bystander}),
        ("/console/ask", {"toolkit": "ledger", "session": session}),
        ("/console/purge", {"session": session, "confirm": session}),
    ]

    sign_in(browser, server, server.token("auditor", "reader"))
    for page in ("ask", "purge", "tokens"):
        browser.get(f"{server.base}/console/{page}")
        assert heading(browser) == "Not for your role"
    screenshot(browser, tmp_path / "console-operator-only.png")
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a")]
    assert "Ask a person" not in nav and "Purge" not in nav
    auditor = Signed(server, server.token("auditor", "reader-2"))
    for path, data in actions:
        page = auditor.post(path, data)
        assert page.status_code == 403 and "Not for your role" in page.text, path

    token = server.token("agent", "an-agent")
    browser.delete_all_cookies()
    sign_in(browser, server, token)
    assert "agent role cannot sign in" in browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    page = httpx.get(server.base + "/console/")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None
    for path, data in actions:  # no console session: back to the sign-in page
        sent = httpx.post(
            server.base + path,
            data=data | {"csrf": csrf[1], "token": token},
            headers={
                "Cookie": f"tkv_csrf={page.cookies['tkv_csrf']}",
                "Authorization": f"Bearer {token}",
            },
        )
        assert (sent.status_code, sent.headers["location"]) == (303, "/console/"), path

    assert "escalated" not in {p.name for p in list_principals(server.vault.store)}
    assert active(server, "bystander") and statuses(server, session) == ["ok"]
    assert [events(server, a) for a in ("token_revoked", "purge", "intake_requested")] == [[]] * 3
