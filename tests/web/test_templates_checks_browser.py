"""The console's Templates and Checks pages and the intake form's "Check now" (issue 41),
in headless Chromium against a real `toolkit-vault serve`: an operator sets, shows and
removes a template (one that names a secret field is refused, its values never shown
back); a person checks a key before saving it (nothing is saved by a check); the Checks
page shows the last outcome; no page scrolls sideways at 1280 or 390 px."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from toolkit_vault.audit.history import history
from toolkit_vault.core.templates import list_templates
from toolkit_vault.core.vault import Vault

from web_support import (
    VERIFY_GOOD,
    VERIFY_PLUGINS,
    Server,
    agent,
    assert_nowhere,
    click_through,
    screenshot,
    serve,
    sideways,
)

GOOD = VERIFY_GOOD
BAD = "tkv-canary-browser-bad-5c1e"
TYPED_SECRET = "tkv-canary-template-secret-88a0"


@pytest.fixture
def server(vault: Vault, cli_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    with serve(cli_env, tmp_path, vault, VERIFY_PLUGINS) as running:
        yield running


def sign_in(browser: WebDriver, server: Server) -> None:
    browser.get(server.base + "/console/")
    browser.find_element(By.ID, "token").send_keys(server.token("operator", "ops"))
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/signin'] button")
    click_through(browser, button)


def set_template(browser: WebDriver, server: Server, name: str, values: str) -> None:
    browser.get(server.base + "/console/templates")
    Select(browser.find_element(By.ID, "toolkit")).select_by_visible_text("ledger")
    browser.find_element(By.ID, "name").send_keys(name)
    browser.find_element(By.ID, "values").send_keys(values)
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/templates/set'] button")
    click_through(browser, button)


def test_templates_are_set_shown_and_removed_in_the_console(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    sign_in(browser, server)
    set_template(
        browser, server, "prod", '{"endpoint": "https://prod.ledger.test", "region": "eu"}'
    )
    assert browser.find_element(By.TAG_NAME, "h1").text == "Template prod of ledger"
    assert "https://prod.ledger.test" in browser.page_source
    assert '"/api_key"' in browser.page_source or "api_key" in browser.page_source  # skeleton
    assert sideways(browser) == []
    screenshot(browser, tmp_path / "template.png")
    assert list_templates(server.vault.store) == {
        "ledger": {"prod": {"endpoint": "https://prod.ledger.test", "region": "eu"}}
    }
    set_template(browser, server, "leaky", f'{{"api_key": "{TYPED_SECRET}"}}')
    alert = browser.find_element(By.ID, "set-error").text
    assert "/api_key" in alert and "template does not match" in alert
    refused_page = browser.page_source
    browser.get(server.base + "/console/templates")
    rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [r.find_element(By.CSS_SELECTOR, "td[data-label=Name]").text for r in rows] == ["prod"]
    assert sideways(browser) == []
    screenshot(browser, tmp_path / "templates.png")
    click_through(browser, rows[0].find_element(By.CSS_SELECTOR, "button.danger"))
    assert "No template yet." in browser.page_source
    assert list_templates(server.vault.store) == {}
    assert_nowhere(TYPED_SECRET, files=[server.log], texts=[refused_page])


def test_check_now_says_before_saving_and_the_checks_page_shows_the_last_outcome(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with agent(server, server.token("agent", "checker")) as bot:
        answer = bot.configure("checked", {})
        browser.get(answer["intake_url"])

        def check(key: str) -> None:
            browser.find_element(By.NAME, "/api_key").send_keys(key)
            click_through(browser, browser.find_element(By.CSS_SELECTOR, "button[value=check]"))

        check(BAD)
        alert = browser.find_element(By.CSS_SELECTOR, "[role=alert] li.verify").text
        assert alert == "the credential check failed: the toolkit refused it: nothing was saved."
        refused_page = browser.page_source
        check(GOOD)
        result = browser.find_element(By.ID, "check-result").text
        assert "The credential check passed." in result and "Nothing was saved yet" in result
        assert browser.find_element(By.NAME, "/api_key").get_attribute("value") == ""
        checked_page = browser.page_source
        assert sideways(browser) == []
        screenshot(browser, tmp_path / "intake-check-now.png")
        statuses = [v["status"] for v in history(server.vault.store, bot.session_id)]
        assert statuses == ["intake"]  # a check saves nothing; the link is still good
        browser.find_element(By.NAME, "/api_key").send_keys(GOOD)
        save = browser.find_element(By.CSS_SELECTOR, "form[action='/console/intake'] button")
        click_through(browser, save)
        assert browser.find_element(By.TAG_NAME, "h1").text == "Settings saved"
        messages = list(bot.received)
    sign_in(browser, server)
    browser.get(server.base + "/console/checks")
    row = browser.find_element(By.CSS_SELECTOR, "#checks tbody tr")
    assert row.find_element(By.CSS_SELECTOR, "td[data-label=Toolkit]").text == "checked"
    assert "verify(config)" in row.find_element(By.CSS_SELECTOR, "td[data-label='Checked by']").text
    assert row.find_element(By.CSS_SELECTOR, "td[data-label=Outcome]").text == "passed"
    assert sideways(browser) == []
    screenshot(browser, tmp_path / "checks.png")
    assert_nowhere(BAD, files=[server.log], texts=[*messages, refused_page, checked_page])
    assert_nowhere(GOOD, texts=[checked_page, browser.page_source])
