"""OAuth issuer mix-up (RFC 9700 4.4), driven as a person's browser drives it: the vault's
app in process, two real authorization servers on loopback (`oauth_server`), an HTTP
client that follows every redirect and the start page's refresh, and keeps each origin's
cookies.

A toolkit whose `x-oauth` names a hostile server: its `/authorize` sends the person on to
the honest server's `/authorize` with the vault's query (`client_id`, `state`,
`code_challenge`, `redirect_uri`); the honest server sends the code back to the vault; its
`/token` would redeem the code and the verifier at the honest server. The vault must
refuse: a redirect URI per issuer (the answer must arrive at the callback of the flow's
server), RFC 9207's `iss` checked, and the code exchanged only with the server the flow
was started for.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit, urlunsplit

import httpx
import pytest
from starlette.testclient import TestClient

from oauth_server import CLIENT_ID, AuthServer, _Client, running_auth_server
from test_oauth import calendar
from toolkit_vault.access.principals import create_token
from toolkit_vault.audit.history import history
from toolkit_vault.audit.trail import EventFilter, list_events
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.oauth import metadata
from toolkit_vault.settings import VaultSettings
from toolkit_vault.toolkits.registry import SourceKind, ToolkitRegistry, ToolkitSource
from toolkit_vault.transports.http_api import create_app

pytestmark = pytest.mark.one_database

VAULT = "http://testserver"  # the origin of the app in process (TestClient's)
CALLBACK = VAULT + "/console/oauth/callback"
PUBLIC = {"calendar": "work"}
HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
REFUSED = "oauth_callback_refused"


class Browser:
    """The person's browser: follows redirects (and the start page's `<meta refresh>`)
    across the vault and the authorization servers, and keeps each origin's cookies
    (Secure ones too: a browser sends them to a loopback origin)."""

    def __init__(self, app: TestClient) -> None:
        self.app, self.web = app, httpx.Client(timeout=30)
        self.jar: dict[str, dict[str, str]] = {}
        self.url = ""

    def go(
        self, url: str, data: dict[str, str] | None = None, *, until: str | None = None
    ) -> httpx.Response:
        """GET `url` (POST `data`), following on; stops before a URL starting with `until`."""
        method = "POST" if data is not None else "GET"
        for _ in range(10):
            parts = urlsplit(url)
            origin = f"{parts.scheme}://{parts.netloc}"
            cookies = "; ".join(f"{k}={v}" for k, v in self.jar.get(origin, {}).items())
            headers = {"Cookie": cookies} if cookies else {}
            if method == "POST":
                headers["Origin"] = origin
            client = self.app if origin == VAULT else self.web
            answer = client.request(method, url, data=data, headers=headers, follow_redirects=False)
            self.url = url
            for line in answer.headers.get_list("set-cookie"):
                name, _, value = line.split(";")[0].partition("=")
                kept = self.jar.setdefault(origin, {})
                if "max-age=0" in line.lower() or not value.strip('"'):
                    kept.pop(name, None)
                else:
                    kept[name] = value
            moved = re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', answer.text)
            if answer.is_redirect:
                url = urljoin(url, answer.headers["location"])
            elif moved:
                url = html.unescape(moved.group(1))
            else:
                return answer
            method, data = "GET", None
            if until and url.startswith(until):
                return httpx.Response(302, headers={"location": url})
        raise AssertionError("too many redirects")


@dataclass
class Stage:
    vault: Vault
    app: TestClient
    honest: AuthServer
    hostile: AuthServer
    token: str

    def intake_url(self, toolkit: str) -> str:
        auth = {"Authorization": f"Bearer {self.token}"}
        session = self.app.post("/a2e", json=HELLO, headers=auth).json()["session_id"]
        message = {"type": "toolkit/configure/req", "toolkit_name": toolkit, "config": PUBLIC}
        answer = self.app.post("/a2e", json=message, headers=auth | {"A2E-Session": session})
        found = answer.json()
        assert found["status"] == "partial", found
        url: str = found["intake_url"]
        return url

    def connect(
        self, toolkit: str, browser: Browser | None = None, *, until: str | None = None
    ) -> httpx.Response:
        """A person opens the link, presses Connect and allows access wherever it leads
        (up to a URL starting with `until`)."""
        browser = browser or Browser(self.app)
        intake = self.intake_url(toolkit)
        page = browser.go(intake)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf, page.text
        link = parse_qs(urlsplit(intake).query)["link"][0]
        consent = browser.go(VAULT + "/console/oauth/start", {"csrf": csrf.group(1), "link": link})
        if "Allow" not in consent.text:
            return consent  # the server said no before any consent
        return browser.go(browser.url, {"confirm": "yes"}, until=until)

    def statuses(self, toolkit: str) -> list[str]:
        return [v["status"] for v in history(self.vault.store, None, toolkit)]

    def refusals(self) -> list[dict[str, Any]]:
        return [e for e in self.vault.export_audit(0) if e["action"] == REFUSED]


class HostileCalendar(calendar.CalendarToolkit):  # type: ignore[misc]
    """The same calendar API, but its `x-oauth` names the hostile server."""

    issuer = ""

    def __init__(self) -> None:
        super().__init__()
        self.definition = {
            **self.definition,
            "name": "hostile",
            "schema": calendar.schema(self.issuer),
        }


@pytest.fixture
def stage(
    home: VaultSettings, auth: AuthServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Stage]:
    monkeypatch.setenv("TKV_OAUTH_ISSUER", auth.issuer)
    monkeypatch.setattr(metadata, "_cache", {})
    with running_auth_server() as hostile:
        hostile.knobs.forward_to = auth.base
        monkeypatch.setattr(HostileCalendar, "issuer", hostile.issuer)
        registry = ToolkitRegistry.default()
        source = ToolkitSource(SourceKind.ENTRY_POINT, "test")
        registry.register(calendar.CalendarToolkit, source)
        registry.register(HostileCalendar, source)
        vault = open_vault(home, registry)
        try:
            with TestClient(create_app(vault, open_provider(home))) as app:
                token = create_token(vault.store, "agent", "person")[1]
                yield Stage(vault, app, auth, hostile, token)
        finally:
            vault.store.engine.dispose()


@pytest.mark.parametrize("defence", ["iss", "registered", "registered-rewritten"])
def test_a_hostile_issuer_forwarding_to_an_honest_one_gets_no_code_redeemed(
    stage: Stage, defence: str
) -> None:
    """The attack of issue 48, against an honest server that either sends RFC 9207 `iss`
    or holds the client to its registered redirect URI (the hostile one then forwards the
    vault's own `redirect_uri`, or rewrites it to the honest server's). Either way the vault
    refuses: nothing stored, no token request anywhere, the page says so, audited."""
    honest, hostile = stage.honest, stage.hostile
    if defence == "iss":
        honest.knobs.send_iss = honest.knobs.advertise_iss = True
    legit = stage.connect("calendar")  # the honest toolkit connects as ever
    assert "Settings saved" in legit.text, legit.text
    assert honest.token_calls == 1
    honest_callback = honest.authorize_requests[-1]["redirect_uri"]
    if defence.startswith("registered"):
        honest.client.redirect_uris = [honest_callback]
    if defence == "registered-rewritten":
        hostile.knobs.forward_redirect_uri = honest_callback

    page = stage.connect("hostile")
    assert "Settings saved" not in page.text
    assert page.status_code >= 400, page.text
    assert hostile.token_calls == 0 and honest.token_calls == 1  # no code went anywhere
    assert stage.statuses("hostile") == ["intake"]  # no version stored
    (asked,) = hostile.authorize_requests
    assert asked["redirect_uri"] != honest_callback  # a redirect URI per issuer
    if defence == "registered":  # the honest server refused to send the code back at all
        assert stage.refusals() == []
        return
    assert "Not connected" in page.text and "nothing was stored" in page.text
    (event,) = stage.refusals()
    assert event["toolkit_name"] == "hostile"
    assert event["details"]["reason"] == ("iss" if defence == "iss" else "redirect_uri")
    assert event["details"]["issuer"] == hostile.issuer
    page_of_trail = list_events(stage.vault.store, EventFilter(toolkit="hostile"), limit=50)
    (said,) = [e.summary for e in page_of_trail.events if e.action == REFUSED]
    assert said.startswith("refused an authorization response for hostile in session ")
    assert f"not from {hostile.issuer}" in said and said.endswith("no code exchanged")
    assert stage.vault.verify_audit().ok


def test_redirect_uris_differ_per_issuer_and_stay_under_the_callback(stage: Stage) -> None:
    stage.hostile.knobs.forward_to = None  # an ordinary second server
    for name in ("calendar", "hostile"):
        assert "Settings saved" in stage.connect(name).text
    mine, theirs = (s.authorize_requests[-1]["redirect_uri"] for s in (stage.honest, stage.hostile))
    assert mine != theirs
    assert all(uri.startswith(CALLBACK + "/") for uri in (mine, theirs))
    assert stage.honest.token_requests[-1]["redirect_uri"] == mine
    assert stage.hostile.token_requests[-1]["redirect_uri"] == theirs
    again = stage.connect("calendar")  # another link, same issuer: its registered URI
    assert "Settings saved" in again.text
    assert stage.honest.authorize_requests[-1]["redirect_uri"] == mine


def _answer_with(stage: Stage, **change: str | None) -> httpx.Response:
    """The honest flow, its authorization response changed as `change` says (None: left
    out), then delivered to the vault by the person's browser."""
    browser = Browser(stage.app)
    parts = urlsplit(stage.connect("calendar", browser, until=CALLBACK).headers["location"])
    query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    kept = {k: v for k, v in (query | change).items() if v is not None}
    return browser.go(urlunsplit(parts._replace(query=urlencode(kept))))


@pytest.mark.parametrize(
    ("advertised", "iss", "reason"),
    [
        (False, "https://elsewhere.example", "iss"),  # sent unadvertised: must still match
        (True, "https://elsewhere.example", "iss"),
        (True, None, "iss_missing"),  # advertised, then left out
        (False, None, None),  # neither: accepted (the redirect URI is the defence)
        (True, "", "iss"),
    ],
)
def test_the_iss_parameter_must_name_the_flows_issuer(
    stage: Stage, advertised: bool, iss: str | None, reason: str | None
) -> None:
    stage.honest.knobs.advertise_iss = advertised
    stage.honest.knobs.send_iss = advertised
    page = _answer_with(stage, iss=iss)
    if reason is None:
        assert "Settings saved" in page.text, page.text
        assert stage.honest.token_calls == 1
        return
    assert "Settings saved" not in page.text and "Not connected" in page.text
    assert stage.honest.token_calls == 0
    assert stage.statuses("calendar") == ["intake"]
    (event,) = stage.refusals()
    assert event["details"]["reason"] == reason


def test_an_answer_at_another_issuers_callback_is_refused(stage: Stage) -> None:
    """The flow's answer delivered to the shared callback of old, or to the callback of
    another issuer: the code is not exchanged."""
    stage.hostile.knobs.forward_to = None
    for path in ("/console/oauth/callback", "/console/oauth/callback/AAAAAAAAAAAAAAAAAAAAAA"):
        browser = Browser(stage.app)
        answer = stage.connect("calendar", browser, until=CALLBACK)
        parts = urlsplit(answer.headers["location"])
        page = browser.go(urlunsplit(parts._replace(path=path)))
        assert "Settings saved" not in page.text and "Not connected" in page.text
    assert stage.honest.token_calls == 0
    assert [e["details"]["reason"] for e in stage.refusals()] == ["redirect_uri"] * 2


def test_the_code_goes_only_to_the_token_endpoint_the_flow_started_with(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issuer's metadata names another token endpoint after the person consented (the
    discovery cache ran out meanwhile): the code is not sent there, nor anywhere."""
    stage.hostile.knobs.forward_to = None
    browser = Browser(stage.app)
    answer = stage.connect("calendar", browser, until=CALLBACK)
    stage.honest.knobs.metadata_token_endpoint = stage.hostile.base + "/token"
    monkeypatch.setattr(metadata, "_cache", {})
    page = browser.go(answer.headers["location"])
    assert "Settings saved" not in page.text
    assert stage.honest.token_calls == 0 and stage.hostile.token_calls == 0
    (event,) = stage.refusals()
    assert event["details"]["reason"] == "server_changed"


def test_the_test_server_redeems_a_code_only_for_its_client_and_redirect_uri(
    auth: AuthServer,
) -> None:
    """The test authorization server as RFC 6749 4.1.3 asks: a code issued to one client
    is refused to another, and with another redirect URI."""
    auth.registered["other-client"] = _Client("other-client", [])
    verifier = "v" * 64
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    redirect_uri = "http://127.0.0.1:9/cb"

    def code() -> str:
        query = {
            "response_type": "code",
            "client_id": CLIENT_ID,
            "redirect_uri": redirect_uri,
            "state": "s",
            "scope": "calendar.read",
            "code_challenge": challenge.rstrip(b"=").decode(),
            "code_challenge_method": "S256",
        }
        allowed = httpx.post(f"{auth.base}/authorize?{urlencode(query)}", data={"confirm": "yes"})
        return parse_qs(urlsplit(allowed.headers["location"]).query)["code"][0]

    def redeem(issued: str, client_id: str, uri: str) -> httpx.Response:
        form = {"grant_type": "authorization_code", "code": issued, "code_verifier": verifier}
        form |= {"client_id": client_id, "redirect_uri": uri}
        return httpx.post(f"{auth.base}/token", data=form)

    issued = code()
    refused = redeem(issued, "other-client", redirect_uri)
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    refused = redeem(issued, CLIENT_ID, "http://127.0.0.1:9/elsewhere")
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    assert redeem(issued, CLIENT_ID, redirect_uri).status_code == 200
