"""The console's Audit page in headless Chromium against a real `toolkit-vault serve`: the
trail newest first with actors by name and each event in words, its filters, the cursor
link to older events and back, a filter it cannot read, and the chain verification, for
an auditor and an operator. Screenshots are checked for their accessible labels."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from toolkit_vault.access.principals import create_token, revoke
from toolkit_vault.audit.trail import list_events

from web_support import Server, agent, click_through, screenshot

CANARY = "tkv-canary-audit-page-61f0"
FILTERS = ["Action", "Actor", "Session", "Principal", "Toolkit", "Since", "Until"]
FILTERS += ["Arguments HMAC", "Filter"]
HASH_FORM = ["Arguments (a JSON object)", "Find calls"]
LABELS = ["Sign out", "Verify the audit chain", *FILTERS, *HASH_FORM]


def sign_in(browser: WebDriver, server: Server, token: str) -> None:
    browser.get(server.base + "/console/")
    browser.find_element(By.ID, "token").send_keys(token)
    click_through(
        browser, browser.find_element(By.CSS_SELECTOR, "form[action='/console/signin'] button")
    )


def rows(browser: WebDriver) -> list[list[str]]:
    """The events table: seq, time, action, actor, what (the first line of each)."""
    found = []
    for row in browser.find_elements(By.CSS_SELECTOR, "tbody tr"):
        cells = [cell.text.splitlines()[0] for cell in row.find_elements(By.TAG_NAME, "td")]
        found.append(cells)
    return found


def shown(browser: WebDriver, shot: Path) -> list[str]:
    names = screenshot(browser, shot)
    assert browser.find_elements(By.CSS_SELECTOR, "script, [style]") == []
    assert CANARY not in browser.page_source
    return names


def filter_by(browser: WebDriver, **typed: str) -> None:
    for name, value in typed.items():
        if name == "action":
            Select(browser.find_element(By.ID, "action")).select_by_value(value)
            continue
        field = browser.find_element(By.ID, name)
        field.clear()
        field.send_keys(value)
    click_through(browser, browser.find_element(By.XPATH, "//button[text()='Filter']"))


def test_auditor_reads_filters_and_pages_the_trail(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with agent(server, server.token("agent", "worker")) as bot:
        config = {"endpoint": "https://api.example.test", "api_key": CANARY}
        assert bot.configure("secretive", config)["status"] == "ok"
        session = bot.session_id
    sign_in(browser, server, server.token("auditor", "audrey"))
    browser.get(server.base + "/console/audit")
    assert shown(browser, tmp_path / "console-audit-trail.png") == LABELS
    assert rows(browser)[0][2:] == [
        "token_created",
        "operator",
        "token created for audrey (auditor)",
    ]
    assert browser.find_elements(By.CSS_SELECTOR, ".pager a") == []  # one page: no links

    for n in range(50):
        create_token(server.vault.store, "agent", f"fleet-{n:02}")
    head = list_events(server.vault.store, limit=1000).events[-1].seq
    browser.get(server.base + "/console/audit")
    first = rows(browser)
    assert [int(r[0]) for r in first] == list(range(head, head - 50, -1))
    assert first[0][2:] == ["token_created", "operator", "token created for fleet-49 (agent)"]
    assert browser.find_elements(By.LINK_TEXT, "Newest events") == []

    click_through(browser, browser.find_element(By.LINK_TEXT, "Older events"))
    older = rows(browser)
    assert [int(r[0]) for r in older] == list(range(head - 50, 0, -1))
    assert browser.find_elements(By.LINK_TEXT, "Older events") == []
    opened = next(r for r in older if r[2] == "session_created")
    assert opened[3] == "worker" and opened[4] == f"session {session} opened by worker"
    configured = next(r for r in older if r[2] == "configure")
    assert configured[3:] == [
        "worker",
        f"configured secretive v1 in session {session} (status ok); secret fields /api_key",
    ]
    click_through(browser, browser.find_element(By.LINK_TEXT, "Newest events"))
    assert rows(browser) == first

    filter_by(browser, action="configure", principal="worker")
    assert "action=configure" in browser.current_url and "principal=worker" in browser.current_url
    assert [r[2:4] for r in rows(browser)] == [["configure", "worker"]]
    assert "filtered" in browser.find_element(By.TAG_NAME, "caption").text
    shown(browser, tmp_path / "console-audit-filtered.png")

    filter_by(browser, action="", principal="", actor="operator", since="2000-01-01")
    assert {r[3] for r in rows(browser)} == {"operator"}
    filter_by(browser, actor="", since="yesterday")
    alert = browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    assert "since: not a time" in alert and rows(browser) == []
    assert browser.find_element(By.ID, "since").get_attribute("value") == "yesterday"

    filter_by(browser, since="")
    click_through(
        browser, browser.find_element(By.XPATH, "//button[text()='Verify the audit chain']")
    )
    assert browser.find_element(By.ID, "report-title").text == "Intact"
    assert len(rows(browser)) == 50
    shown(browser, tmp_path / "console-audit-verified-trail.png")


def test_operator_sees_who_revoked_whom(server: Server, browser: WebDriver, tmp_path: Path) -> None:
    ops, ops_token = create_token(server.vault.store, "operator", "ops")
    victim = create_token(server.vault.store, "agent", "to-be-revoked")[0]
    revoke(server.vault.store, victim, actor=ops)  # as the console's revoke does
    sign_in(browser, server, ops_token)
    browser.get(server.base + "/console/audit")
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a")]
    assert nav[-3:] == ["History", "Audit", "Figures"]
    assert shown(browser, tmp_path / "console-audit-operator.png") == LABELS
    newest = rows(browser)[0]
    assert newest[2:] == ["token_revoked", "ops", "token revoked for to-be-revoked"]
    filter_by(browser, actor="ops")
    assert [r[2:] for r in rows(browser)] == [newest[2:]]
