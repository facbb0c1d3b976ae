"""Console sign-in through an OpenID provider (issue 54) in headless Chromium: a real
`toolkit-vault serve` set up with `TOOLKIT_VAULT_OIDC_*`, and a real OpenID provider on
loopback (authlib's, `oidc_provider`), a confidential client whose secret must never show.

A person signs in with the button, consents at the provider, and comes back signed in with
the role their group is mapped to; what they do is audited as them (`audit list` names
them); sign-out ends the session. A person of an auditors' group gets the auditor's pages
only; one in no mapped group is refused. A forged `id_token` (another audience, an old
nonce, expired, signed by a key the provider does not publish) and a genuine one replayed
from an earlier sign-in are each refused, and no session starts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from cli_support import run_cli
from oidc_provider import CLIENT_ID, SIGN_IN_BUTTON, Person, Provider, running_provider
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.core.console_roles import set_mapping
from toolkit_vault.core.people import person_id
from toolkit_vault.core.vault import Vault

from web_support import Server, click_through, screenshot, serve

SECRET = "tkv-canary-oidc-secret-8d2f"  # the vault's client secret at the provider


@pytest.fixture
def provider() -> Iterator[Provider]:
    with running_provider(client_secret=SECRET) as running:
        yield running


@pytest.fixture
def oidc_server(
    vault: Vault, cli_env: dict[str, str], tmp_path: Path, provider: Provider
) -> Iterator[Server]:
    env = {
        **cli_env,
        "TOOLKIT_VAULT_OIDC_ISSUER": provider.issuer,
        "TOOLKIT_VAULT_OIDC_CLIENT_ID": CLIENT_ID,
        "TOOLKIT_VAULT_OIDC_CLIENT_SECRET": SECRET,
        "TOOLKIT_VAULT_OIDC_SCOPES": "openid profile email",
    }
    with serve(env, tmp_path, vault) as running:
        yield running
    log = running.log.read_text()
    assert SECRET not in log
    assert all(token not in log for token in provider.id_tokens)


def sign_in(browser: WebDriver, server: Server) -> str:
    """Press the identity provider's button, then the provider's; the page it ends on:
    the console (its path) or a refusal (`refused: ` and its text)."""
    browser.get(server.base + "/console/")
    click_through(browser, browser.find_element(By.CSS_SELECTOR, "#oidc-signin button"))
    consent = f"//button[text()='{SIGN_IN_BUTTON}']"
    WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.XPATH, consent))
    click_through(browser, browser.find_element(By.XPATH, consent))

    def settled(d: WebDriver) -> bool:
        return "/oidc/" not in d.current_url or "Not signed in" in d.title

    WebDriverWait(browser, 15).until(settled)
    if "Not signed in" in browser.title:
        return "refused: " + browser.find_element(By.CSS_SELECTOR, "[role=alert]").text
    return browser.current_url.removeprefix(server.base)


def who(browser: WebDriver) -> str:
    found = browser.find_elements(By.CSS_SELECTOR, "header .who")
    return found[0].text if found else ""


def audit_list(cli_env: dict[str, str], action: str) -> list[dict[str, Any]]:
    listed = run_cli(("audit", "list", "--action", action, "--json"), cli_env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout)["events"])


def test_a_person_signs_in_by_their_group_is_audited_as_themselves_and_signs_out(
    oidc_server: Server,
    browser: WebDriver,
    provider: Provider,
    vault: Vault,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    set_mapping(vault.store, "operator", "groups", "vault-operators", "operator")
    assert sign_in(browser, oidc_server) == "/console/sessions"
    assert who(browser) == "Ada Lovelace operator"
    names = screenshot(browser, tmp_path / "console-oidc-signed-in.png")
    assert names[0] == "Sign out"

    browser.get(oidc_server.base + "/console/tokens")  # act as the person: make a token
    browser.find_element(By.ID, "name").send_keys("adas-agent")
    click_through(browser, browser.find_element(By.XPATH, "//button[text()='Create the token']"))
    assert "adas-agent" in browser.page_source

    ada = person_id(provider.issuer, provider.person.sub)
    signed_in = audit_list(cli_env, "person_signed_in")
    assert [(e["actor"], e["actor_name"]) for e in signed_in] == [(ada, "Ada Lovelace")]
    assert signed_in[0]["details"]["mapped_by"] == ["groups=vault-operators"]
    made = audit_list(cli_env, "token_created")
    assert (made[-1]["actor"], made[-1]["actor_name"]) == (ada, "Ada Lovelace")
    printed = run_cli(("audit", "list", "--action", "token_created"), cli_env, timeout=60)
    assert "Ada Lovelace" in printed.stdout  # the table names the person, not a token

    click_through(browser, browser.find_element(By.XPATH, "//button[text()='Sign out']"))
    assert browser.find_elements(By.ID, "oidc-signin") != []  # the sign-in page again
    browser.get(oidc_server.base + "/console/sessions")
    assert who(browser) == "" and browser.find_elements(By.ID, "oidc-signin") != []
    out = audit_list(cli_env, "person_signed_out")
    assert [(e["actor"], e["summary"]) for e in out] == [
        (ada, "Ada Lovelace signed out of the console")
    ]

    assert sign_in(browser, oidc_server) == "/console/sessions"  # a fresh sign-in works
    assert provider.authorize_requests[-1]["code_challenge_method"] == "S256"


def test_the_role_comes_from_the_group_claim_and_no_mapped_group_is_refused(
    oidc_server: Server, browser: WebDriver, provider: Provider, vault: Vault
) -> None:
    set_mapping(vault.store, "operator", "groups", "vault-operators", "operator")
    set_mapping(vault.store, "operator", "groups", "security-auditors", "auditor")
    provider.person = Person(sub="77", name="Grace Hopper", groups=["security-auditors"])
    assert sign_in(browser, oidc_server) == "/console/history"
    assert who(browser) == "Grace Hopper auditor"
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a")]
    assert nav == ["Templates", "Allowances", "History", "Audit", "Figures"]
    browser.get(oidc_server.base + "/console/tokens")
    assert "Not for your role" in browser.title
    click_through(browser, browser.find_element(By.XPATH, "//button[text()='Sign out']"))

    provider.person = Person(sub="78", name="Mallory", groups=["visitors"])
    refused = sign_in(browser, oidc_server)
    assert refused.startswith("refused: ") and "no group or claim of yours" in refused
    browser.get(oidc_server.base + "/console/sessions")
    assert who(browser) == ""


@pytest.mark.parametrize(
    ("knob", "value", "reason"),
    [
        ("audience", "another-client", "audience"),
        ("nonce", "an-old-sign-ins-nonce", "nonce"),
        ("lifetime", -7200, "expired"),
        ("foreign_key", True, "signature"),
        ("replay", "earlier", "nonce"),
    ],
)
def test_a_forged_or_replayed_id_token_is_refused(
    oidc_server: Server,
    browser: WebDriver,
    provider: Provider,
    vault: Vault,
    knob: str,
    value: Any,
    reason: str,
) -> None:
    set_mapping(vault.store, "operator", "groups", "vault-operators", "operator")
    if knob == "replay":  # a genuine id_token of an earlier sign-in of the same person
        assert sign_in(browser, oidc_server) == "/console/sessions"
        click_through(browser, browser.find_element(By.XPATH, "//button[text()='Sign out']"))
        value = provider.id_tokens[-1]
    setattr(provider.knobs, knob, value)
    refused = sign_in(browser, oidc_server)
    assert refused == (
        f"refused: The identity provider's answer was refused ({reason}); nothing changed."
    )
    browser.get(oidc_server.base + "/console/sessions")
    assert who(browser) == ""  # no session started
    signed_in = list_events(vault.store, EventFilter(actions=("person_signed_in",))).events
    assert len(signed_in) == (1 if knob == "replay" else 0)
