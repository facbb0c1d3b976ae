"""Issue 52 end to end in Chromium: an MCP client (the official Python SDK over `/mcp`)
calls a tool of a toolkit that is not configured, is answered with URL elicitation whose
url is the intake link; a person opens it in the browser and submits the form; the client
hears `notifications/elicitation/complete` and `tools/list_changed`, and the same call
succeeds."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp import types
from mcp.shared.exceptions import MCPError
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from test_mcp_endpoint import Heard, _text, mcp_over_http

from web_support import Server, click_through, screenshot


def _person_fills(browser: WebDriver, url: str, root: Path, shot: Path) -> str:
    browser.get(url)
    heading = str(browser.find_element(By.TAG_NAME, "h1").text)
    browser.find_element(By.NAME, "/root_dir").send_keys(str(root))
    screenshot(browser, shot)
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/intake'] button")
    click_through(browser, button)
    return heading + " / " + str(browser.find_element(By.TAG_NAME, "h1").text)


def test_an_mcp_client_is_sent_to_the_intake_page_and_its_call_then_runs(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "hello.txt").write_text("from the person's folder")
    token = server.token("agent", "mcp-browser")
    heard = Heard()

    async def run() -> None:
        async with mcp_over_http(server.base, token, heard) as session:
            with pytest.raises(MCPError) as asked:
                await session.call_tool("filesystem__read_file", {"path": "hello.txt"})
            assert asked.value.error.code == types.URL_ELICITATION_REQUIRED
            (elicitation,) = asked.value.error.data["elicitations"]
            shot = tmp_path / "mcp-intake.png"
            seen = await asyncio.to_thread(_person_fills, browser, elicitation["url"], root, shot)
            assert seen == "Configure filesystem / Settings saved"
            await asyncio.wait_for(heard.changed.wait(), 15)
            assert "notifications/elicitation/complete" in heard.methods
            read = await session.call_tool("filesystem__read_file", {"path": "hello.txt"})
            assert (read.is_error, _text(read)) == (False, "from the person's folder")

    asyncio.run(run())
