"""A credential check on the intake form, end to end (issue 41): a real `toolkit-vault
serve` with a toolkit whose plugin checks its key, an agent on a real WebSocket and a
person in headless Chromium. A key that fails the check is not saved, the form says why
and stays usable; the right key is saved and the agent is told."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from toolkit_vault.audit.history import history
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
)

GOOD = VERIFY_GOOD
BAD = "tkv-canary-browser-bad-0a9e"


@pytest.fixture
def server(vault: Vault, cli_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    with serve(cli_env, tmp_path, vault, VERIFY_PLUGINS) as running:
        yield running


def _submit(browser: WebDriver, key: str) -> None:
    browser.find_element(By.NAME, "/api_key").send_keys(key)
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/intake'] button")
    click_through(browser, button)


def test_a_key_that_fails_the_check_is_not_saved_and_the_form_says_why(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with agent(server, server.token("agent", "checker")) as bot:
        answer = bot.configure("checked", {})
        assert answer["status"] == "partial", answer
        browser.get(answer["intake_url"])
        _submit(browser, BAD)
        assert browser.find_element(By.TAG_NAME, "h1").text == "Configure checked"
        alert = browser.find_element(By.CSS_SELECTOR, "[role=alert] li.verify").text
        assert alert == "the credential check failed: the toolkit refused it: nothing was saved."
        refused_page = browser.page_source
        screenshot(browser, tmp_path / "intake-check-failed.png")
        statuses = [v["status"] for v in history(server.vault.store, bot.session_id)]
        assert statuses == ["intake"]  # nothing saved, the link still open
        _submit(browser, GOOD)
        assert browser.find_element(By.TAG_NAME, "h1").text == "Settings saved"
        event = bot.next()
        assert (event["type"], event["status"]) == ("toolkit/status/event", "ok")
        messages = list(bot.received)
    assert_nowhere(BAD, files=[server.log], texts=[*messages, refused_page])
