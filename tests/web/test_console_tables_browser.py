"""Every table of every console page fits, in headless Chromium against a real `serve`: at
1280 px each table is no wider than its box (the toolkits table was 2,358 px wide), and at
390 px each is a column of labelled cards (`table.stack`, a `data-label` on every cell),
so a row's actions and what happened are on screen without a sideways swipe. The page's
own width is not enough to check: a table in a scrolling box keeps the page narrow."""

from __future__ import annotations

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from web_support import WIDTHS, Server, agent, click_through, sideways, wide_tables

SECRETIVE = {"endpoint": "https://api.example.test", "api_key": "tkv-canary-tables-41d2"}
UNLABELLED = "tbody td:not([data-label]):not([colspan])"  # a colspan row says "none yet"
PAGES = (
    "sessions", "toolkits", "toolkits/ledger", "keys", "tokens", "ask", "purge", "checks",
    "templates", "templates/ledger/prod", "history", "audit", "allowances", "figures",
    "mcp-sessions",
)  # fmt: skip


def test_every_table_of_every_console_page_fits_at_1280_and_390_px(
    server: Server, browser: WebDriver
) -> None:
    operator = server.token("operator", "an-operator-with-a-rather-long-name")
    v1 = {"Authorization": f"Bearer {operator}"}
    worker = server.token("agent", "a-worker-whose-name-is-long-too")
    with agent(server, worker) as bot:
        for n in range(2):
            config = {**SECRETIVE, "endpoint": f"https://api{n}.example.test"}
            assert bot.configure("secretive", config)["status"] == "ok"
    template = {"values": {"endpoint": "https://prod.ledger.test", "region": "eu"}}
    made = httpx.put(f"{server.base}/v1/templates/ledger/prod", json=template, headers=v1)
    assert made.status_code == 200, made.text
    narrowed = {"toolkits": ["secretive"], "tools": [{"toolkit": "ledger", "tool": "balance"}]}
    allowed = httpx.put(
        f"{server.base}/v1/allowances/a-worker-whose-name-is-long-too", json=narrowed, headers=v1
    )
    assert allowed.status_code == 200, allowed.text

    browser.get(server.base + "/console/")
    browser.find_element(By.ID, "token").send_keys(operator)
    click_through(
        browser, browser.find_element(By.CSS_SELECTOR, "form[action='/console/signin'] button")
    )
    seen, unfit = 0, []
    for page in PAGES:
        browser.get(f"{server.base}/console/{page}")
        assert browser.find_elements(By.CSS_SELECTOR, ".signout button"), page
        tables = browser.find_elements(By.CSS_SELECTOR, "main table")
        seen += len(tables)
        for table in tables:  # cards at a phone's width: every cell says what it is
            unlabelled = browser.execute_script(
                f"return arguments[0].querySelectorAll('{UNLABELLED}').length",
                table,
            )
            if "stack" not in (table.get_attribute("class") or "") or unlabelled:
                unfit.append((page, "not labelled cards", unlabelled))
        unfit += [(page, *wide) for wide in wide_tables(browser)]
        unfit += [(page, *wide) for wide in sideways(browser)]
    assert unfit == [], "\n".join(map(str, unfit))
    assert seen >= 12  # the pages above had their tables to measure

    browser.get(f"{server.base}/console/toolkits?q=ledger")
    short = browser.find_element(By.CSS_SELECTOR, "td[data-label='Schema digest'] code").text
    click_through(browser, browser.find_element(By.LINK_TEXT, "ledger"))
    whole = browser.find_element(By.ID, "schema-digest").text
    assert whole.startswith("sha256:") and len(whole) == 71  # the whole digest, on its page
    assert short == whole[:19] + "…"  # the table's: its algorithm and 12 hex digits

    browser.set_window_size(WIDTHS[1], 900)
    browser.get(f"{server.base}/console/tokens")
    revoke = browser.find_element(By.CSS_SELECTOR, "form[action='/console/tokens/revoke'] button")
    edge = browser.execute_script("return document.documentElement.clientWidth")
    assert revoke.is_displayed() and revoke.rect["x"] + revoke.rect["width"] <= edge
