"""The console in headless Chromium against a real `toolkit-vault serve`: each role's
pages, sign-in refusals, cookie attributes, CSRF and origin checks, and no secret on any
page. Every page visited is screenshotted and checked for its accessible labels."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from websockets.sync.client import connect

from http_support import loopback_http
from toolkit_vault.access.principals import list_principals, revoke
from toolkit_vault.audit.history import history
from toolkit_vault.transports.web.console import HISTORY_PAGE
from toolkit_vault.transports.web.security import SECURITY_HEADERS

from web_support import Server, agent, click_through, screenshot, sideways

CANARY = "tkv-canary-console-93c2aa"
SECRETIVE = {"endpoint": "https://api.example.test", "api_key": CANARY}


def sign_in(browser: WebDriver, server: Server, token: str) -> None:
    browser.get(server.base + "/console/")
    browser.find_element(By.ID, "token").send_keys(token)
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/signin'] button")
    click_through(browser, button)


def heading(browser: WebDriver) -> str:
    return str(browser.find_element(By.TAG_NAME, "h1").text)


def visit(browser: WebDriver, server: Server, page: str, shot: Path) -> list[str]:
    """Open a console page; check it has no script, no inline style and no canary."""
    browser.get(f"{server.base}/console/{page}")
    names = screenshot(browser, shot)
    assert browser.find_elements(By.CSS_SELECTOR, "script, [style]") == []
    assert CANARY not in browser.page_source
    return names


@pytest.fixture
def configured(server: Server) -> Iterator[str]:
    """A session whose `secretive` toolkit holds the canary; yields its id."""
    with agent(server, server.token("agent", "worker")) as bot:
        assert bot.configure("secretive", SECRETIVE)["status"] == "ok"
        yield bot.session_id


def test_operator_pages_and_token_revocation(
    server: Server, browser: WebDriver, tmp_path: Path, configured: str
) -> None:
    victim = server.token("agent", "to-be-revoked")
    sign_in(browser, server, server.token("operator", "ops"))
    assert browser.current_url == server.base + "/console/sessions"
    cookies = {c["name"]: c for c in browser.get_cookies()}
    for name in ("tkv_console", "tkv_csrf"):
        cookie = cookies[name]
        assert (cookie["secure"], cookie["httpOnly"], cookie["sameSite"]) == (True, True, "Strict")
        assert cookie["path"] == "/console"

    assert visit(browser, server, "sessions", tmp_path / "console-sessions.png") == ["Sign out"]
    row = browser.find_element(By.XPATH, f"//tr[td/code[text()='{configured}']]")
    assert "worker" in row.text and "configured secretive" in row.text
    visit(browser, server, "toolkits", tmp_path / "console-toolkits.png")
    row = browser.find_element(By.XPATH, "//tr[td//strong[text()='secretive']]")
    assert "/api_key" in row.text and "/auth/password" in row.text
    visit(browser, server, "keys", tmp_path / "console-keys.png")
    tables = " ".join(t.text for t in browser.find_elements(By.TAG_NAME, "table"))
    assert "vk-1" in tables  # the vault key, under the master key of the test's provider
    names = visit(browser, server, "tokens", tmp_path / "console-tokens.png")
    assert "Revoke the token of to-be-revoked" in names
    assert "Revoke the token of ops" not in names  # one's own: never offered

    click_through(browser, browser.find_element(By.XPATH, "//button[contains(., 'to-be-revoked')]"))
    assert heading(browser) == "Revoke the token of to-be-revoked?"  # a confirmation first
    click_through(browser, browser.find_element(By.XPATH, "//button[contains(., 'to-be-revoked')]"))
    assert browser.current_url == server.base + "/console/tokens"
    row = browser.find_element(By.XPATH, "//tr[td[text()='to-be-revoked']]")
    assert "revoked" in row.text
    ws_url = server.base.replace("http", "ws") + "/a2e"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {victim}"}) as ws:
        assert '"UNAUTHORIZED"' in str(ws.recv(timeout=10))
    history_names = visit(browser, server, "history", tmp_path / "console-history-op.png")
    assert history_names == ["Sign out", "Session", "Toolkit", "Filter"]


def test_auditor_sees_history_fingerprints_and_verifies_the_chain(
    server: Server, browser: WebDriver, tmp_path: Path, configured: str
) -> None:
    sign_in(browser, server, server.token("auditor", "audit"))
    assert browser.current_url == server.base + "/console/history"
    shot = tmp_path / "console-history.png"
    names = visit(browser, server, f"history?session={configured}", shot)
    assert names == ["Sign out", "Session", "Toolkit", "Filter"]
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a")]
    # templates, allowances and figures: read, as over /v1
    assert nav == ["Templates", "Allowances", "History", "Audit", "Figures"]
    (version,) = history(server.vault.store, configured)
    fingerprint = version["secret_fingerprints"]["/api_key"]
    assert fingerprint and fingerprint in browser.page_source
    assert len(browser.find_elements(By.CSS_SELECTOR, "tbody tr")) == 1

    assert visit(browser, server, "audit", tmp_path / "console-audit.png")[:2] == [
        "Sign out",
        "Verify the audit chain",
    ]  # then the trail's filters (tests/web/test_console_audit_browser.py)
    verify = browser.find_element(By.XPATH, "//button[text()='Verify the audit chain']")
    click_through(browser, verify)
    assert browser.find_element(By.ID, "report-title").text == "Intact"
    screenshot(browser, tmp_path / "console-audit-verified.png")

    browser.get(server.base + "/console/tokens")
    assert heading(browser) == "Not for your role"
    assert "Revoke" not in browser.page_source


def _nonce_and_token(server: Server) -> tuple[str, str]:
    """A CSRF nonce and its token, as anyone can get them from the sign-in page."""
    page = httpx.get(server.base + "/console/")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None
    return page.cookies["tkv_csrf"], csrf[1]


def _signin_status(server: Server, token: str) -> httpx.Response:
    nonce, csrf = _nonce_and_token(server)
    return httpx.post(
        server.base + "/console/signin",
        data={"csrf": csrf, "token": token},
        headers={"Cookie": f"tkv_csrf={nonce}"},  # a Secure cookie: httpx keeps it off http
    )


def test_an_agent_token_cannot_sign_in(server: Server, browser: WebDriver, tmp_path: Path) -> None:
    token = server.token("agent", "an-agent")
    sign_in(browser, server, token)
    assert heading(browser) == "Sign in to the console"
    alert = browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    assert "agent role cannot sign in" in alert
    names = screenshot(browser, tmp_path / "console-signin-agent.png")
    assert names == ["Bearer token", "Sign in"]
    assert "tkv_console" not in {c["name"] for c in browser.get_cookies()}
    assert token not in browser.page_source
    browser.get(server.base + "/console/sessions")
    assert heading(browser) == "Sign in to the console"

    assert _signin_status(server, token).status_code == 403
    assert _signin_status(server, "tkv_" + "A" * 43).status_code == 401
    assert _signin_status(server, server.token("auditor", "fine")).status_code == 303


def test_sign_out_and_a_revoked_token_end_the_session(server: Server, browser: WebDriver) -> None:
    sign_in(browser, server, server.token("operator", "leaving"))
    click_through(browser, browser.find_element(By.XPATH, "//button[text()='Sign out']"))
    assert heading(browser) == "Sign in to the console"
    browser.get(server.base + "/console/sessions")
    assert heading(browser) == "Sign in to the console"

    sign_in(browser, server, server.token("operator", "revoked-soon"))
    assert heading(browser) == "Sessions"
    revoke(server.vault.store, "revoked-soon", actor="test")
    browser.get(server.base + "/console/sessions")
    assert heading(browser) == "Sign in to the console"
    assert "tkv_console" not in {c["name"] for c in browser.get_cookies()}


@contextlib.contextmanager
def attacker_site(target: str, principal_id: str) -> Iterator[str]:
    """Another origin (same host, other port) whose page posts a revoke to the console."""
    page = (
        f'<!doctype html><title>win a prize</title><form method="post" action="{target}">'
        f'<input type="hidden" name="principal_id" value="{principal_id}">'
        '<button type="submit">Claim</button></form>'
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    with loopback_http(Handler) as url:
        yield url + "/"


def _active(server: Server, name: str) -> bool:
    return next(p for p in list_principals(server.vault.store) if p.name == name).revoked_at is None


def test_forms_without_their_csrf_token_are_refused(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    server.token("agent", "victim")
    sign_in(browser, server, server.token("operator", "target"))
    browser.get(server.base + "/console/tokens")
    form = browser.find_element(By.XPATH, "//form[.//button[contains(., 'victim')]]")
    principal_id = form.find_element(By.NAME, "principal_id").get_attribute("value")
    browser.execute_script("arguments[0].querySelector('input[name=csrf]').remove()", form)
    click_through(browser, form.find_element(By.TAG_NAME, "button"))
    assert heading(browser) == "Form refused"
    assert screenshot(browser, tmp_path / "console-no-csrf.png") == []
    assert _active(server, "victim")

    # a nonce cookie planted from a sibling origin, with the token its planter got for it
    planted, token = _nonce_and_token(server)
    browser.get(server.base + "/console/tokens")
    browser.delete_cookie("tkv_csrf")
    browser.add_cookie({"name": "tkv_csrf", "value": planted, "path": "/console", "secure": True})
    form = browser.find_element(By.XPATH, "//form[.//button[contains(., 'victim')]]")
    browser.execute_script(
        "arguments[0].querySelector('input[name=csrf]').value = arguments[1]", form, token
    )
    click_through(browser, form.find_element(By.TAG_NAME, "button"))
    assert heading(browser) == "Form refused"
    assert _active(server, "victim")

    with attacker_site(server.base + "/console/tokens/revoke", principal_id) as site:
        browser.get(site)
        click_through(browser, browser.find_element(By.TAG_NAME, "button"))
        assert heading(browser) == "Form refused"
    assert _active(server, "victim")

    browser.get(server.base + "/console/tokens")  # the genuine form still works
    click_through(browser, browser.find_element(By.XPATH, "//button[contains(., 'victim')]"))
    assert _active(server, "victim")  # its confirmation page, then the revoke
    click_through(browser, browser.find_element(By.XPATH, "//button[contains(., 'victim')]"))
    assert not _active(server, "victim")


def test_every_page_carries_the_security_headers(server: Server) -> None:
    with agent(server, server.token("agent", "headers")) as bot:
        url = bot.configure("ledger", {"endpoint": "https://l.test"})["intake_url"]
    for target in (server.base + "/console/", url, server.base + "/console/static/console.css"):
        response = httpx.get(target)
        assert response.status_code == 200
        for name, value in SECURITY_HEADERS.items():
            assert response.headers[name] == value
        assert "<script" not in response.text and "style=" not in response.text


CONSOLE_PAGES = (
    "sessions", "toolkits", "keys", "tokens", "ask", "purge", "checks", "templates", "history",
    "audit", "allowances",
)  # fmt: skip


def test_history_reads_as_the_cli_and_no_page_scrolls_sideways(
    server: Server, browser: WebDriver, tmp_path: Path
) -> None:
    with agent(server, server.token("agent", "worker")) as bot:
        for n in range(HISTORY_PAGE + 1):  # one more than a page
            config = {**SECRETIVE, "endpoint": f"https://api{n}.example.test"}
            assert bot.configure("secretive", config)["status"] == "ok"
        session = bot.session_id
    browser.get(server.base + "/")  # `/` leads to the console
    assert browser.current_url == server.base + "/console/"
    hint = browser.find_element(By.ID, "get-token").text
    assert "toolkit-vault tokens create --role operator --name NAME" in hint
    assert sideways(browser) == []
    sign_in(browser, server, server.token("operator", "ops"))
    for page in CONSOLE_PAGES:
        browser.get(f"{server.base}/console/{page}")
        assert sideways(browser) == [], page

    visit(browser, server, f"history?session={session[:8]}&toolkit=CRET", tmp_path / "h.png")
    rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == HISTORY_PAGE  # a prefix as the CLI prints it, any part of a name
    actors = {r.find_element(By.CSS_SELECTOR, "td.actor").text for r in rows}
    assert actors == {"worker"}  # a name, not a principal id
    assert sideways(browser) == []
    click_through(browser, browser.find_element(By.LINK_TEXT, "Older"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "tbody tr")) == 1
    assert "https://api0.example.test" in browser.page_source  # the oldest, on page 2
    browser.find_element(By.LINK_TEXT, "Newer")
    browser.get(f"{server.base}/console/history?toolkit=nothing-like-it")
    assert browser.find_elements(By.CSS_SELECTOR, "tbody tr") == []

    visit(browser, server, "toolkits?q=ledg", tmp_path / "t.png")
    names = [s.text for s in browser.find_elements(By.CSS_SELECTOR, "tbody td strong")]
    assert names == ["ledger"]
    assert "1 of" in browser.find_element(By.ID, "toolkit-count").text


def test_sign_out_stays_on_the_headers_row_at_a_laptops_width(
    server: Server, browser: WebDriver
) -> None:
    """At 1280 px "Sign out" stays on the header's first row, at its end (it wrapped to a
    second row of its own: a 138 px header); an operator's thirteen links, or a long name,
    wrap among themselves in the nav, never under the button."""

    def rects() -> list[dict[str, float]]:
        found = [".top", ".brand", ".top nav", ".signout button"]
        return [browser.find_element(By.CSS_SELECTOR, css).rect for css in found]

    sign_in(browser, server, server.token("operator", "ops"))
    browser.set_window_size(1280, 900)
    assert browser.execute_script("return window.innerWidth") == 1280
    header, brand, nav, button = rects()
    assert button["y"] + button["height"] / 2 < brand["y"] + brand["height"], (brand, button)
    assert button["x"] >= nav["x"] + nav["width"], (nav, button)  # beside the nav, at the end
    assert header["height"] < 3 * button["height"], header  # at most the nav's two rows

    click_through(browser, browser.find_element(By.CSS_SELECTOR, ".signout button"))
    sign_in(browser, server, server.token("operator", "an-operator-with-a-rather-long-name"))
    browser.set_window_size(1280, 900)
    header, brand, nav, button = rects()
    assert button["y"] + button["height"] / 2 < brand["y"] + brand["height"], (brand, button)
    assert sideways(browser) == []
