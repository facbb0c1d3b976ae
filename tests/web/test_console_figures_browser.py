"""The console's Figures page (issue 54) in headless Chromium against a real `serve`: an
auditor signs in and sees the numbers `/metrics` serves (configures by outcome, requests
by transport, the audit chain's head, readiness), the page and every table on it fit
1280 and 390 px without a sideways scroll, and no secret is on it; an agent's token is
refused."""

from __future__ import annotations

from pathlib import Path

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from web_support import (
    WIDTHS,
    Server,
    agent,
    assert_nowhere,
    click_through,
    screenshot,
    sideways,
)

CANARY = "tkv-canary-figures-3b7d"


def sign_in(browser: WebDriver, server: Server, token: str) -> None:
    browser.get(server.base + "/console/")
    browser.find_element(By.ID, "token").send_keys(token)
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/signin'] button")
    click_through(browser, button)


def test_an_auditor_reads_the_figures_and_every_table_fits(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with agent(server, server.token("agent", "figures-agent")) as client:
        done = client.configure("filesystem", {"root_dir": str(tmp_path)})
        assert done["status"] == "ok", done
        assert client.next()["type"] == "toolkit/status/event"
        refused = client.configure("filesystem", {"root_dir": 5, "x": CANARY})
        assert refused["type"] == "error"
    sign_in(browser, server, server.token("auditor", "figures-auditor"))
    browser.get(server.base + "/console/figures")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Figures"
    assert browser.find_element(By.ID, "readiness").text.startswith("Ready")
    configures = browser.find_element(By.ID, "configures").text
    assert "ok 1" in configures and "refused 1" in configures, configures
    assert "websocket ok" in browser.find_element(By.ID, "requests").text
    assert "Chain head: event " in browser.find_element(By.ID, "chain").text
    assert browser.find_element(By.ID, "database").text.startswith("Pool: ")
    page = browser.page_source
    screenshot(browser, tmp_path / "console-figures.png")
    assert_nowhere(CANARY, texts=[page])
    assert sideways(browser) == []
    for width in WIDTHS:
        browser.set_window_size(width, 900)
        inner = int(browser.execute_script("return document.documentElement.clientWidth"))
        for table in browser.find_elements(By.TAG_NAME, "table"):
            wide = int(browser.execute_script("return arguments[0].scrollWidth", table))
            assert wide <= inner, (width, table.get_attribute("id"), wide)
    token = server.token("agent", "figures-peeker")
    assert (
        httpx.get(
            server.base + "/metrics", headers={"Authorization": f"Bearer {token}"}
        ).status_code
        == 403
    )
