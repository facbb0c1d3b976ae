"""The console's Allowances page (issue 50), in headless Chromium against a real `toolkit-vault
serve`: an operator narrows an agent to one tool (a typo refused, naming it), the agent's
`tool/list` over the server shows only that tool, and "Widen" gives it every tool back; no
page scrolls sideways at 1280 or 390 px."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select
from websockets.sync.client import connect

from toolkit_vault.core.allowances import list_allowances
from toolkit_vault.core.vault import Vault

from web_support import Agent, Server, click_through, screenshot, serve, sideways

HELLO = {"type": "handshake/req", "capabilities": ["toolkits", "tools"]}


@pytest.fixture
def server(vault: Vault, cli_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:
    with serve(cli_env, tmp_path, vault) as running:
        yield running


@contextlib.contextmanager
def tool_agent(server: Server, token: str) -> Iterator[Agent]:
    """An agent on a real WebSocket that negotiated `tools` too."""
    ws_url = server.base.replace("http://", "ws://") + "/a2e"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        client = Agent(ws)
        client.session_id = client.ask(HELLO)["session_id"]
        yield client


def tools_of(bot: Agent) -> list[tuple[str, str]]:
    """The agent's `tool/list` (past any status event pushed meanwhile)."""
    answer = bot.ask({"type": "tool/list/req"})
    while answer["type"] != "tool/list/resp":
        answer = bot.next()
    return [(t["toolkit"], t["name"]) for t in answer["tools"]]


def narrow(browser: WebDriver, server: Server, tools: str) -> None:
    browser.get(server.base + "/console/allowances")
    Select(browser.find_element(By.ID, "principal")).select_by_visible_text("worker")
    browser.find_element(By.ID, "tools").send_keys(tools)
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/allowances/set'] button")
    click_through(browser, button)


def test_an_operator_narrows_and_widens_an_agent_in_the_console(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with tool_agent(server, server.token("agent", "worker")) as bot:
        assert bot.configure("filesystem", {"root_dir": str(tmp_path)})["status"] == "ok"
        browser.get(server.base + "/console/")
        browser.find_element(By.ID, "token").send_keys(server.token("operator", "ops"))
        signin = browser.find_element(By.CSS_SELECTOR, "form[action='/console/signin'] button")
        click_through(browser, signin)

        narrow(browser, server, "filesystem/format_disk")
        alert = browser.find_element(By.ID, "set-error").text
        assert "toolkit filesystem has no tool 'format_disk'" in alert
        assert list_allowances(server.vault.store) == []

        narrow(browser, server, "filesystem/read_file")
        row = browser.find_element(By.CSS_SELECTOR, "tbody tr")
        assert row.find_element(By.CSS_SELECTOR, "td[data-label=Agent]").text == "worker"
        assert row.find_element(By.CSS_SELECTOR, "td[data-label='May call']").text == (
            "filesystem/read_file"
        )
        assert sideways(browser) == []
        screenshot(browser, tmp_path / "console-allowances.png")
        assert tools_of(bot) == [("filesystem", "read_file")]

        click_through(browser, row.find_element(By.CSS_SELECTOR, "button"))
        assert "No agent is narrowed." in browser.page_source
        assert {name for _, name in tools_of(bot)} == {"read_file", "write_file", "list_dir"}
