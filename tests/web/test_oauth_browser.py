"""OAuth connections end to end: a real `toolkit-vault serve`, an agent on a real
WebSocket, a real authorization server on loopback (authlib's, `oauth_server`), and a
person in headless Chromium who presses Connect and then the server's consent button.

Every token the server issued is then looked for in the agent's messages, the server's
log, the pages, the history and audit output and the database files: nowhere in clear.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait
from websockets.sync.client import connect

from oauth_server import CONSENT_BUTTON, AuthServer
from toolkit_vault.audit.history import history
from toolkit_vault.bootstrap import open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.oauth import redirect_uri
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits.registry import SourceKind, ToolkitSource

from web_support import (
    Agent,
    Server,
    agent,
    assert_nowhere,
    click_through,
    database_dump,
    screenshot,
    serve,
    web_registry,
)

OAUTH_PLUGINS = Path(__file__).resolve().parents[1] / "oauth_plugins"
PUBLIC = {"calendar": "work"}


def _load() -> ModuleType:
    """The OAuth test toolkit, imported by path (on sys.path, its entry point would join
    every other test's registry)."""
    spec = importlib.util.spec_from_file_location(
        "tkv_oauth_plugins", OAUTH_PLUGINS / "tkv_oauth_plugins.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tkv_oauth_plugins"] = module
    spec.loader.exec_module(module)
    return module


calendar = _load()


@pytest.fixture
def vault(
    home: VaultSettings, auth: AuthServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Vault]:
    monkeypatch.setenv("TKV_OAUTH_ISSUER", auth.issuer)
    registry = web_registry()
    registry.register(calendar.CalendarToolkit, ToolkitSource(SourceKind.ENTRY_POINT, "test"))
    opened = open_vault(home, registry)
    yield opened
    opened.store.engine.dispose()


@pytest.fixture
def server(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path, auth: AuthServer
) -> Iterator[Server]:
    env = {
        **cli_env,
        "TKV_OAUTH_ISSUER": auth.issuer,
        "PYTHONPATH": os.pathsep.join([str(OAUTH_PLUGINS), cli_env.get("PYTHONPATH", "")]),
    }
    with serve(env, tmp_path, vault) as running:
        yield running


@contextlib.contextmanager
def _resumed(server: Server, token: str, session_id: str | None) -> Iterator[Agent]:
    ws_url = server.base.replace("http://", "ws://") + "/a2e"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        client = Agent(ws)
        hello: dict[str, Any] = {"type": "handshake/req", "capabilities": ["toolkits"]}
        if session_id:
            hello["session_id"] = session_id
        answer = client.ask(hello)
        assert answer["type"] == "handshake/resp", answer
        client.session_id = answer["session_id"]
        yield client


def exchange_redirect(auth: AuthServer) -> str:
    """The redirect URI the vault's code exchange named (RFC 6749 4.1.3: the same)."""
    return auth.token_requests[0]["redirect_uri"]


def _connect(browser: WebDriver, url: str, tmp_path: Path) -> list[str]:
    """Open the intake link, press Connect, consent at the server; the pages' sources."""
    browser.get(url)
    (button,) = [b for b in browser.find_elements(By.TAG_NAME, "button") if "Connect" in b.text]
    screenshot(browser, tmp_path / "oauth-intake.png")
    sources = [browser.page_source]
    click_through(browser, button)
    WebDriverWait(browser, 15).until(
        lambda d: any(CONSENT_BUTTON in b.text for b in d.find_elements(By.TAG_NAME, "button"))
    )
    screenshot(browser, tmp_path / "oauth-consent.png")
    allow = browser.find_element(By.XPATH, f"//button[contains(., '{CONSENT_BUTTON}')]")
    click_through(browser, allow)
    WebDriverWait(browser, 15).until(lambda d: "/console/oauth/callback" in d.current_url)
    screenshot(browser, tmp_path / "oauth-connected.png")
    sources.append(browser.page_source)
    return sources


def test_connect_in_the_browser_then_the_token_is_used_and_refreshed(
    server: Server, browser: WebDriver, auth: AuthServer, tmp_path: Path, database_url: str
) -> None:
    token = server.token("agent", "planner")
    with agent(server, token) as bot:
        answer = bot.configure("calendar", PUBLIC, scope="principal")
        assert (answer["type"], answer["status"]) == ("toolkit/configure/resp", "partial")
        url = answer["intake_url"]
        assert url.startswith(server.base + "/console/intake?link=")
        assert bot.configured()["calendar"] is False

        auth.knobs.expires_in = 62  # valid now; within the refresh margin in a few seconds
        sources = _connect(browser, url, tmp_path)
        heading = browser.find_element(By.TAG_NAME, "h1").text
        assert heading == "Settings saved", browser.page_source

        event = bot.next()
        assert event["type"] == "toolkit/status/event"
        assert (event["toolkit_name"], event["configured"]) == ("calendar", True)
        assert bot.configured()["calendar"] is True
        messages = list(bot.received)

    # the protocol as the authorization server saw it
    (asked,) = auth.authorize_requests
    assert asked["code_challenge_method"] == "S256" and len(asked["code_challenge"]) == 43
    assert asked["resource"] == calendar.RESOURCE
    callback = server.base + "/console/oauth/callback"
    assert asked["redirect_uri"] == redirect_uri(callback, auth.issuer)  # its server's own
    assert exchange_redirect(auth) == asked["redirect_uri"]
    assert len(asked["state"]) >= 32 and asked["state"] not in url
    (exchange,) = auth.token_requests
    assert exchange["grant_type"] == "authorization_code"
    assert exchange["resource"] == calendar.RESOURCE and exchange["code_verifier"]
    assert auth.token_calls == 1

    # the toolkit got the access token in its field, and nothing else of the token set
    first = auth.latest()
    expected = calendar.config_digest({**PUBLIC, "access_token": first.access_token})
    proofs = server.proof("calendar")  # the version's own check, then the session's instance
    assert proofs and all(p["keys"] == ["access_token", "calendar"] for p in proofs)
    assert {p["sha256"] for p in proofs} == {expected}

    # a new session of the principal, once the token is about to expire: refreshed first
    auth.knobs.expires_in = 3600
    time.sleep(2.5)
    with _resumed(server, token, None) as second:
        assert second.configured()["calendar"] is True
        messages += second.received
    assert (auth.token_calls, auth.refresh_calls) == (2, 1)
    refreshed = auth.latest()
    assert server.proof("calendar")[-1]["sha256"] == calendar.config_digest(
        {**PUBLIC, "access_token": refreshed.access_token}
    )

    trail = [e for e in server.vault.export_audit(0) if e["toolkit_name"] == "calendar"]
    (connected,) = [e for e in trail if e["action"] == "oauth_connected"]
    (refreshed_event,) = [e for e in trail if e["action"] == "oauth_refreshed"]
    scope = connected["session_id"]
    assert scope.startswith("principal:") and refreshed_event["session_id"] == scope
    assert refreshed_event["details"]["has_refresh_token"] is True
    versions = history(server.vault.store, scope, "calendar")
    assert [(v["status"], v["current"]) for v in versions] == [
        ("intake", False),
        ("ok", False),
        ("ok", True),
    ]
    assert sorted(versions[1]["secret_fingerprints"]) == ["/access_token", "/x-oauth-token-set"]
    assert server.vault.verify_audit().ok

    server.vault.store.engine.dispose()
    history_text = json.dumps(versions, default=str)
    for issued in auth.issued():
        assert_nowhere(
            issued,
            files=[server.log, *database_dump(database_url)],
            texts=[*messages, *sources, history_text, json.dumps(trail)],
        )


def test_a_callback_without_the_flow_cookie_or_with_another_state_stores_nothing(
    server: Server, browser: WebDriver, auth: AuthServer
) -> None:
    with agent(server, server.token("agent", "mallory-target")) as bot:
        url = bot.configure("calendar", PUBLIC)["intake_url"]
        browser.get(url)
        button = browser.find_element(By.XPATH, "//button[contains(., 'Connect')]")
        click_through(browser, button)
        WebDriverWait(browser, 15).until(lambda d: "/authorize" in d.current_url)
        asked = parse_qs(urlsplit(browser.current_url).query)
        state, back = asked["state"][0], asked["redirect_uri"][0]
        # a forged callback with another state, from the same browser (its cookie sent)
        browser.get(back + "?code=stolen&state=" + state[::-1])
        assert browser.find_element(By.TAG_NAME, "h1").text == "Cannot connect"
        browser.delete_all_cookies()  # and the right state from a browser without the cookie
        browser.get(back + f"?code=stolen&state={state}")
        assert browser.find_element(By.TAG_NAME, "h1").text == "Cannot connect"
        assert auth.token_calls == 0
        assert bot.configured()["calendar"] is False


def test_a_confidential_client_secret_is_typed_at_connect_and_never_shown(
    server: Server, browser: WebDriver, auth: AuthServer, tmp_path: Path, database_url: str
) -> None:
    """`x-oauth` with a `client_secret_field`: the Connect button asks for the client
    secret in a password field; the exchange sends it (client_secret_basic), and it shows
    in no page, message, log or database file."""
    token = server.token("agent", "team")
    with agent(server, token) as bot:
        answer = bot.configure("teamcal", PUBLIC, scope="principal")
        assert answer["status"] == "partial", answer
        browser.get(answer["intake_url"])
        field = browser.find_element(By.ID, "oauth-client-secret")
        assert field.get_attribute("type") == "password"
        field.send_keys(auth.client_secret)
        (button,) = [b for b in browser.find_elements(By.TAG_NAME, "button") if "Connect" in b.text]
        click_through(browser, button)
        WebDriverWait(browser, 15).until(
            lambda d: any(CONSENT_BUTTON in b.text for b in d.find_elements(By.TAG_NAME, "button"))
        )
        sources = [browser.page_source]
        allow = browser.find_element(By.XPATH, f"//button[contains(., '{CONSENT_BUTTON}')]")
        click_through(browser, allow)
        WebDriverWait(browser, 15).until(lambda d: "/console/oauth/callback" in d.current_url)
        assert browser.find_element(By.TAG_NAME, "h1").text == "Settings saved"
        sources.append(browser.page_source)
        event = bot.next()
        assert (event["toolkit_name"], event["configured"]) == ("teamcal", True)
        messages = list(bot.received)
    (exchange,) = auth.token_requests
    assert exchange["grant_type"] == "authorization_code" and "client_secret" not in exchange
    server.vault.store.engine.dispose()
    assert_nowhere(
        auth.client_secret,
        files=[server.log, *database_dump(database_url)],
        texts=[*messages, *sources],
    )
