"""Console sign-in through an OpenID provider (issue 54), without a browser: the `id_token`
checks one by one, the relying party against a real authlib OpenID provider on loopback
(`oidc_provider`), the operator's role mappings (service API, command line, `/v1`, the
audit chain), people as principals named after their identity, and the console's start and
callback routes driven over HTTP. `test_oidc_browser.py` drives the same in Chromium."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey
from sqlalchemy import select, update
from starlette.testclient import TestClient

from cli_support import run_cli
from oidc_provider import CLIENT_ID, SIGN_IN_BUTTON, Person, Provider, running_provider
from toolkit_vault.access.principals import Principal, create_token, list_principals
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.audit.wording import describe
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core import people
from toolkit_vault.core.console_roles import (
    MappingNotFound,
    RoleMapping,
    list_mappings,
    remove_mapping,
    role_for,
    set_mapping,
)
from toolkit_vault.core.people import NoConsoleRole, person_id, sign_in, still_allowed
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import SecretBytes
from toolkit_vault.errors import VaultError
from toolkit_vault.oauth import OAuthFailed
from toolkit_vault.oauth.openid import IdTokenRefused, RelyingParty, check_claims
from toolkit_vault.settings import OidcSettings, VaultSettings, oidc_settings
from toolkit_vault.store.ledger import StateUnknown
from toolkit_vault.store.models import AuditEvent
from toolkit_vault.transports.http_api import create_app
from toolkit_vault.transports.web.security import ConsoleSessions

pytestmark = pytest.mark.one_database

NOW = 1_800_000_000.0
GOOD = {
    "iss": "https://id.example.test",
    "aud": CLIENT_ID,
    "sub": "248289761001",
    "exp": NOW + 300,
    "iat": NOW - 5,
    "nonce": "n-0S6_WzA2Mj",
}
REDIRECT = "http://127.0.0.1:9/console/oidc/callback"


def checked(**changed: Any) -> None:
    claims = {k: v for k, v in {**GOOD, **changed}.items() if v is not None}
    check_claims(claims, issuer=GOOD["iss"], client_id=CLIENT_ID, nonce=GOOD["nonce"], now=NOW)


# -- the id_token's claims, one check at a time ------------------------------------------------


def test_claims_for_this_sign_in_pass() -> None:
    checked()
    checked(aud=[CLIENT_ID])
    checked(aud=[CLIENT_ID, "other"], azp=CLIENT_ID)
    checked(exp=NOW - 30)  # within the leeway for clocks


@pytest.mark.parametrize(
    ("changed", "reason"),
    [
        ({"iss": "https://evil.example.test"}, "issuer"),
        ({"iss": None}, "issuer"),
        ({"aud": "someone-else"}, "audience"),
        ({"aud": ["someone-else"]}, "audience"),
        ({"aud": None}, "audience"),
        ({"aud": [CLIENT_ID, "other"]}, "audience"),  # several audiences need azp = us
        ({"azp": "someone-else"}, "audience"),
        ({"exp": NOW - 61}, "expired"),
        ({"exp": None}, "expired"),
        ({"exp": "tomorrow"}, "malformed"),
        ({"iat": NOW + 600}, "not_yet_valid"),
        ({"nbf": NOW + 600}, "not_yet_valid"),
        ({"iat": None}, "malformed"),
        ({"nonce": "n-an-old-one"}, "nonce"),
        ({"nonce": None}, "nonce"),
        ({"nonce": 7}, "nonce"),
        ({"sub": None}, "malformed"),
        ({"sub": ""}, "malformed"),
    ],
)
def test_claims_not_for_this_sign_in_are_refused(changed: dict[str, Any], reason: str) -> None:
    with pytest.raises(IdTokenRefused) as refused:
        checked(**changed)
    assert refused.value.reason == reason
    assert "n-0S6" not in str(refused.value)  # never the token's text


# -- the relying party against a real OpenID provider -----------------------------------------


@pytest.fixture
def provider() -> Iterator[Provider]:
    with running_provider() as running:
        yield running


def consent(url: str) -> dict[str, str]:
    """What the person's browser does at the provider: open the page, press the button;
    the query the provider sends back (code and state)."""
    assert SIGN_IN_BUTTON in httpx.get(url).text
    answer = httpx.post(url, data={"confirm": "yes"})
    assert answer.status_code == 302, answer.text
    return {k: v[0] for k, v in parse_qs(urlsplit(answer.headers["location"]).query).items()}


def signed_in(party: RelyingParty, nonce: str = "n-sign-in-1") -> dict[str, Any]:
    verifier = "v" * 50
    url = party.authorization_url(REDIRECT, "state-1", nonce, verifier)
    sent = parse_qs(urlsplit(url).query)
    assert sent["code_challenge_method"] == ["S256"] and sent["nonce"] == [nonce]
    assert sent["scope"][0].split()[0] == "openid"
    back = consent(url)
    assert back["state"] == "state-1"
    return party.verify(party.exchange(REDIRECT, back["code"], verifier), nonce)


def test_a_sign_in_at_the_provider_gives_its_checked_claims(provider: Provider) -> None:
    claims = signed_in(RelyingParty(provider.issuer, CLIENT_ID))
    assert claims["sub"] == provider.person.sub and claims["groups"] == ["vault-operators"]
    assert claims["iss"] == provider.issuer and claims["aud"] == CLIENT_ID


@pytest.mark.parametrize(
    ("knob", "value", "reason"),
    [
        ("audience", "another-client", "audience"),
        ("issuer", "http://127.0.0.1:1", "issuer"),
        ("lifetime", -7200, "expired"),
        ("nonce", "n-an-old-sign-in", "nonce"),
        ("foreign_key", True, "signature"),
    ],
)
def test_a_forged_id_token_is_refused(
    provider: Provider, knob: str, value: Any, reason: str
) -> None:
    setattr(provider.knobs, knob, value)
    with pytest.raises(IdTokenRefused) as refused:
        signed_in(RelyingParty(provider.issuer, CLIENT_ID))
    assert refused.value.reason == reason


def test_an_earlier_sign_ins_id_token_replayed_is_refused(provider: Provider) -> None:
    party = RelyingParty(provider.issuer, CLIENT_ID)
    signed_in(party, "n-first")
    provider.knobs.replay = provider.id_tokens[-1]  # genuine, signed, unexpired, not ours
    with pytest.raises(IdTokenRefused) as refused:
        signed_in(party, "n-second")
    assert refused.value.reason == "nonce"


@pytest.mark.parametrize("alg", ["none", "HS256"])
def test_an_unsigned_or_hmac_id_token_is_refused(provider: Provider, alg: str) -> None:
    """`none`, or an HMAC under a key the forger knows (a client secret is no signature)."""
    party = RelyingParty(provider.issuer, CLIENT_ID)
    claims = {**GOOD, "iss": provider.issuer, "exp": time.time() + 300, "iat": time.time()}
    key = OctKey.import_key("a-client-secret-the-forger-knows-0123456789")
    token = jwt.encode({"alg": alg}, claims, key, algorithms=[alg])
    with pytest.raises(IdTokenRefused) as refused:
        party.verify(token, GOOD["nonce"])
    assert refused.value.reason == "signature"


def test_discovery_must_name_the_issuer_asked_for(provider: Provider) -> None:
    with pytest.raises(OAuthFailed, match="another issuer"):
        RelyingParty(provider.issuer + "/", CLIENT_ID).provider()
    with pytest.raises(VaultError, match="https"):
        RelyingParty("http://id.example.test", CLIENT_ID)


def test_a_confidential_client_sends_its_secret_to_the_token_endpoint_only() -> None:
    secret = "tkv-canary-oidc-client-secret-3c1e"
    with running_provider(client_secret=secret) as provider:
        party = RelyingParty(provider.issuer, CLIENT_ID, SecretBytes(secret.encode()))
        assert secret not in repr(party)
        assert signed_in(party)["sub"] == provider.person.sub
        assert all(secret not in json.dumps(r) for r in provider.authorize_requests)
        public = RelyingParty(provider.issuer, CLIENT_ID)  # without it: refused
        with pytest.raises(OAuthFailed):
            signed_in(public)


# -- the operator's mappings -------------------------------------------------------------------


def test_mappings_are_audited_events_and_the_strongest_role_wins(vault: Vault) -> None:
    store = vault.store
    set_mapping(store, "operator", "groups", "vault-operators", "operator")
    set_mapping(store, "operator", "groups", "auditors", "auditor")
    set_mapping(store, "operator", "email", "ada@example.test", "auditor")
    assert [str(m) for m in list_mappings(store)] == [
        "email=ada@example.test",
        "groups=auditors",
        "groups=vault-operators",
    ]
    mappings = list_mappings(store)
    assert role_for({"groups": ["auditors", "vault-operators"]}, mappings)[0] == "operator"
    assert role_for({"groups": "auditors"}, mappings) == (
        "auditor",
        [RoleMapping("groups", "auditors", "auditor")],
    )
    assert role_for({"groups": ["others"], "email": 7}, mappings) == (None, [])
    removed = remove_mapping(store, "operator", "groups", "auditors")
    assert removed.role == "auditor"
    with pytest.raises(MappingNotFound):
        remove_mapping(store, "operator", "groups", "auditors")
    for bad in [("groups", "x", "agent"), ("", "x", "operator"), ("g r", "x", "operator")]:
        with pytest.raises(VaultError):
            set_mapping(store, "operator", *bad)
    events = list_events(store, EventFilter(actions=("console_role_mapped",))).events
    assert len(events) == 3 and events[0].actor == "operator"
    said = [describe(e) for e in list_events(store).events if "console_role" in e.action]
    assert said[0] == "console role operator given to people whose groups claim holds " + (
        "vault-operators"
    )
    assert said[-1].startswith("console role auditor no longer given")


def test_an_edited_mapping_event_is_not_believed(vault: Vault, home: VaultSettings) -> None:
    set_mapping(vault.store, "operator", "groups", "auditors", "auditor")
    forged = json.dumps({"claim": "groups", "value": "auditors", "role": "operator"})
    with vault.store.engine.begin() as db:
        db.execute(
            update(AuditEvent)
            .where(AuditEvent.action == "console_role_mapped")
            .values(details=forged)
        )
    fresh = open_vault(home, current=False)  # as another process would open it
    try:
        with pytest.raises(StateUnknown):
            list_mappings(fresh.store)
    finally:
        fresh.store.engine.dispose()


def test_the_command_line(vault: Vault, cli_env: dict[str, str]) -> None:
    def cli(*args: str) -> Any:
        return run_cli(("console-roles", *args), cli_env, timeout=60)

    made = cli("set", "groups=vault-operators", "operator", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) == {
        "claim": "groups",
        "value": "vault-operators",
        "role": "operator",
    }
    assert cli("set", "groups=x", "agent").returncode == 2  # not a console role
    assert cli("set", "groups", "operator").returncode == 2  # not CLAIM=VALUE
    listed = json.loads(cli("list", "--json").stdout)
    assert listed == {"mappings": [json.loads(made.stdout)]}
    assert cli("remove", "groups=vault-operators").returncode == 0
    missing = cli("remove", "groups=vault-operators")
    assert missing.returncode == 1 and "no mapping" in missing.stderr
    assert list_mappings(vault.store) == []


def test_the_v1_routes(vault: Vault, home: VaultSettings) -> None:
    operator = {"Authorization": f"Bearer {create_token(vault.store, 'operator', 'ops')[1]}"}
    auditor = {"Authorization": f"Bearer {create_token(vault.store, 'auditor', 'aud')[1]}"}
    body = {"claim": "groups", "value": "vault-operators", "role": "operator"}
    with TestClient(create_app(vault, open_provider(home)), base_url="https://testserver") as c:
        assert c.put("/v1/console-roles", json=body, headers=auditor).status_code == 403
        assert c.put("/v1/console-roles", json=body, headers=operator).json() == body
        bad = c.put("/v1/console-roles", json={**body, "role": "agent"}, headers=operator)
        assert bad.status_code == 422
        assert c.get("/v1/console-roles", headers=auditor).json() == {"mappings": [body]}
        query = {"claim": "groups", "value": "vault-operators"}
        assert c.delete("/v1/console-roles", params=query, headers=operator).json() == body
        assert c.delete("/v1/console-roles", params=query, headers=operator).status_code == 404
    ops = next(p.principal_id for p in list_principals(vault.store) if p.name == "ops")
    with vault.store.engine.connect() as db:
        actors = db.execute(
            select(AuditEvent.actor).where(AuditEvent.action.like("console_role_%"))
        ).scalars()
        assert list(actors) == [ops, ops]  # as the token's principal


# -- people -----------------------------------------------------------------------------------


def test_a_person_is_a_principal_named_after_their_identity(vault: Vault) -> None:
    store, issuer = vault.store, "https://id.example.test"
    claims = {"sub": "248289761001", "name": "Ada Lovelace", "groups": ["vault-operators"]}
    with pytest.raises(NoConsoleRole):
        sign_in(store, issuer, claims)
    set_mapping(store, "operator", "groups", "vault-operators", "operator")
    person = sign_in(store, issuer, claims)
    assert person.principal_id == person_id(issuer, "248289761001")
    assert re.fullmatch(r"oidc-[0-9a-f]{32}", person.principal_id)
    assert person_id("https://other.example.test", "248289761001") != person.principal_id
    assert (person.name, person.role) == ("Ada Lovelace", "operator")
    create_token(store, "agent", "bot", actor=person.principal_id)  # acting as the person
    page = list_events(store, EventFilter(actor=None))
    mine = [e for e in page.events if e.actor == person.principal_id]
    assert [e.action for e in mine] == ["person_signed_in", "token_created"]
    assert page.names[person.principal_id] == "Ada Lovelace"
    by_name = list_events(store, EventFilter(actor="Ada Lovelace")).events
    assert [e.action for e in by_name] == ["person_signed_in", "token_created"]
    assert describe(mine[0]) == (
        f"Ada Lovelace signed in to the console as operator through {issuer} "
        "(subject 248289761001; role from groups=vault-operators)"
    )
    assert still_allowed(store, person)
    remove_mapping(store, "operator", "groups", "vault-operators")
    assert not still_allowed(store, person)  # at their next request


# -- the console's routes over HTTP ------------------------------------------------------------


@pytest.fixture
def console(vault: Vault, home: VaultSettings, provider: Provider) -> Iterator[TestClient]:
    oidc = OidcSettings(provider.issuer, CLIENT_ID, None, session_lifetime=60)
    app = create_app(vault, open_provider(home), public_url="http://127.0.0.1:9", oidc=oidc)
    with TestClient(app, base_url="https://testserver", follow_redirects=False) as client:
        yield client


def start(console: TestClient) -> str:
    """Press the sign-in page's button; the provider URL the page moves on to."""
    page = console.get("/console/").text
    assert "Sign in with your identity provider" in page
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    moved = console.post("/console/oidc/start", data={"csrf": csrf[1]})
    assert moved.status_code == 200
    found = re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', moved.text)
    assert found is not None
    return found[1].replace("&amp;", "&")


def test_the_console_signs_a_person_in_once_per_flow(
    console: TestClient, vault: Vault, provider: Provider
) -> None:
    set_mapping(vault.store, "operator", "groups", "vault-operators", "auditor")
    back = consent(start(console))
    console.cookies.delete("tkv_oidc_flow")  # a callback opened in another browser
    assert console.get("/console/oidc/callback", params=back).status_code == 400
    back = consent(start(console))
    wrong = console.get("/console/oidc/callback", params={**back, "state": "not-the-flow"})
    assert wrong.status_code == 400  # and the flow is spent: no second try with it
    assert console.get("/console/oidc/callback", params=back).status_code == 400
    assert provider.token_requests == []  # no code was exchanged

    back = consent(start(console))
    done = console.get("/console/oidc/callback", params=back)
    assert done.status_code == 200 and "Signed in as Ada Lovelace (auditor)" in done.text
    assert console.get("/console/history").status_code == 200
    assert console.get("/console/tokens").status_code == 403  # an auditor's role
    again = console.get("/console/oidc/callback", params=back)
    assert again.status_code == 400  # a callback replayed: its flow was taken
    remove_mapping(vault.store, "operator", "groups", "vault-operators")
    assert console.get("/console/history").status_code == 303  # signed out at once


def test_the_console_refuses_a_forged_id_token_and_an_unmapped_person(
    console: TestClient, vault: Vault, provider: Provider
) -> None:
    set_mapping(vault.store, "operator", "groups", "vault-operators", "operator")
    provider.knobs.audience = "another-client"
    refused = console.get("/console/oidc/callback", params=consent(start(console)))
    assert refused.status_code == 401 and "refused (audience)" in refused.text
    provider.knobs.audience = None
    provider.person = Person(sub="999", name="Mallory", groups=["visitors"])
    unmapped = console.get("/console/oidc/callback", params=consent(start(console)))
    assert unmapped.status_code == 403 and "no group or claim of yours" in unmapped.text
    assert console.get("/console/sessions").status_code == 303  # not signed in
    assert list_events(vault.store, EventFilter(actions=("person_signed_in",))).events == []


def test_a_persons_console_session_ends_at_its_shorter_lifetime() -> None:
    """A person removed from a group at the provider keeps the console no longer than this:
    their session ends at its lifetime however busy it is; the next sign-in decides again."""
    now = [0.0]
    sessions = ConsoleSessions(idle=3600, lifetime=8 * 3600, clock=lambda: now[0])
    person = people.Person("oidc-" + "0" * 32, "Ada", "https://id.example.test", "1", "operator")
    by_token = sessions.start(Principal("p-1", "operator"), "ops", "tkv_" + "a" * 43)
    by_person = sessions.start(person.principal, person.name, None, person=person, lifetime=900)
    now[0] = 600
    assert sessions.find(by_person) is not None
    now[0] = 901
    assert sessions.find(by_person) is None
    assert sessions.find(by_token) is not None


def test_settings_read_the_secret_from_a_private_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tkv-canary-oidc-settings-6b0e"
    for name in ("ISSUER", "CLIENT_ID", "CLIENT_SECRET", "CLIENT_SECRET_FILE", "SCOPES"):
        monkeypatch.delenv(f"TOOLKIT_VAULT_OIDC_{name}", raising=False)
    assert oidc_settings() is None  # no issuer: bearer tokens only
    with pytest.raises(VaultError, match="client id"):
        oidc_settings("https://id.example.test")
    monkeypatch.setenv("TOOLKIT_VAULT_OIDC_ISSUER", "https://id.example.test")
    monkeypatch.setenv("TOOLKIT_VAULT_OIDC_CLIENT_ID", CLIENT_ID)
    public = oidc_settings()
    assert public is not None and public.client_secret is None
    assert public.scopes == ("openid", "profile", "email") and public.session_lifetime == 900
    monkeypatch.setenv("TOOLKIT_VAULT_OIDC_CLIENT_SECRET", secret)
    from_env = oidc_settings()
    assert from_env is not None and from_env.client_secret is not None
    assert from_env.client_secret.reveal() == secret.encode() and secret not in repr(from_env)
    file = tmp_path / "oidc-secret"
    file.write_text(secret + "\n")
    file.chmod(0o644)
    with pytest.raises(VaultError, match="0600") as loose:
        oidc_settings(client_secret_file=file)
    assert secret not in str(loose.value)
    file.chmod(0o600)
    from_file = oidc_settings(client_secret_file=file, session_minutes=5)
    assert from_file is not None and from_file.client_secret is not None
    assert from_file.client_secret.reveal() == secret.encode()
    assert from_file.session_lifetime == 300
    with pytest.raises(VaultError, match="1 to 1440"):
        oidc_settings(session_minutes=2000)
