"""Auditors read the trail: every audited action the product makes shows in `audit list`,
`GET /v1/audit/events` and the console's Audit page, with its actor's name and in words;
filters and the cursor on SQLite and PostgreSQL; `audit tail --follow` sees each commit
and stops cleanly; no secret and no token appears in any listed event."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import escape
from sqlalchemy import delete
from starlette.testclient import TestClient

from cli_support import Forked, run_cli, spawn_cli
from toolkit_vault.access.principals import create_token, revoke
from toolkit_vault.actors import shell_actor, shell_actor_name
from toolkit_vault.audit.trail import (
    MAX_LIMIT,
    BadFilter,
    EventFilter,
    list_events,
    newest_events,
)
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.core.vault import Vault
from toolkit_vault.keys.admin import retire_key
from toolkit_vault.keys.rotation import rotate_master_key, rotate_vault_key
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.actions import AuditAction
from toolkit_vault.store.models import PrincipalRow
from toolkit_vault.store.records import AuditDraft
from toolkit_vault.transports.http_api import Limits, create_app

pytestmark = pytest.mark.key_providers("file")  # `keys retire` of a master key: file holds it
AT_THE_SHELL = shell_actor_name(shell_actor())  # the CLI commands the tests run act as

CORPUS = Path(__file__).parent / "fixtures" / "mcp" / "clients" / "claude"
IMPORTED = CORPUS / "AccelByte__ags-extend-sdk-mcp-server.json"
CANARY = "tkv-canary-trail-5b7e"
HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
# Only an upgrade of a vault made by an earlier release writes these (tests/test_upgrade.py).
UPGRADES_ONLY = {
    AuditAction.INTERNAL_KEY_ADDED,
    AuditAction.KEK_ADDED,
    AuditAction.KEK_RETIRED,
    AuditAction.KEY_HIERARCHY_UPGRADED,
}
# Made where their own rigs are (an authorization server, a lost master key, a second home),
# and read back from the trail there: tests/test_oauth.py (list_events' summaries of the
# oauth_* actions), tests/test_oauth_mixup.py (oauth_callback_refused),
# tests/web/test_oauth_browser.py, test_backup.py, test_recovery.py, test_expiry.py (a
# clock moved past a credential's end), test_oidc.py and web/test_oidc_browser.py (an
# OpenID provider: a person's sign-in and sign-out), tests/test_call_audit.py (tool_called,
# recorded as the call engine records it), tests/test_call_chains.py (calls_anchored),
# tests/test_tool_pins.py (an imported server's tools pinned, changed, accepted),
# tests/test_server_lifecycle.py (a launch without the sandbox) and the MCP endpoint's
# tests (an operator ending a client's session).
ELSEWHERE = {
    AuditAction.CALLS_ANCHORED,
    AuditAction.TOOLS_PINNED,
    AuditAction.TOOLS_CHANGED,
    AuditAction.TOOLS_ACCEPTED,
    AuditAction.SERVER_UNCONFINED,
    AuditAction.MCP_SESSION_ENDED,
    AuditAction.PERSON_SIGNED_IN,
    AuditAction.PERSON_SIGNED_OUT,
    AuditAction.TOOL_CALLED,
    AuditAction.CREDENTIAL_EXPIRING,
    AuditAction.OAUTH_CONNECTED,
    AuditAction.OAUTH_CALLBACK_REFUSED,
    AuditAction.OAUTH_REFRESHED,
    AuditAction.OAUTH_REFRESH_FAILED,
    AuditAction.OAUTH_DISCONNECTED,
    AuditAction.BACKUP_RESTORED,
    AuditAction.RECOVERY_UNSEALED,
    AuditAction.MASTER_KEY_MOVED,  # tests/test_master_key_move.py
}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(args, env, timeout=120)
    assert done.returncode == 0, (args, done.stderr)
    return done


def app_client(vault: Vault, home: VaultSettings) -> TestClient:
    limits = Limits(requests_per_second=10_000, burst=10_000)
    return TestClient(create_app(vault, open_provider(home), limits), base_url="https://testserver")


class A2E:
    """An agent over HTTP POST /a2e, its session bound by the `A2E-Session` header."""

    def __init__(self, client: TestClient, token: str) -> None:
        self.client, self.auth = client, {"Authorization": f"Bearer {token}"}
        self.session = self.ask(HELLO)["session_id"]

    def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        headers = dict(self.auth)
        if getattr(self, "session", None):
            headers["A2E-Session"] = self.session
        answer: dict[str, Any] = self.client.post("/a2e", json=message, headers=headers).json()
        return answer

    def configure(self, config: dict[str, Any], **extra: Any) -> dict[str, Any]:
        message = {"type": "toolkit/configure/req", "toolkit_name": "secretive", "config": config}
        return self.ask(message | extra)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def sign_in(client: TestClient, token: str) -> None:
    page = client.get("/console/")
    done = client.post("/console/signin", data={"csrf": csrf_of(page.text), "token": token})
    assert done.status_code == 200 and "Sign out" in done.text, done.text


def intake(client: TestClient, url: str, form: dict[str, str]) -> httpx.Response:
    page = client.get(url)
    assert page.status_code == 200, page.text
    data = {"csrf": csrf_of(page.text), "link": url.partition("?link=")[2], **form}
    return client.post("/console/intake", data=data)


def every_action(vault: Vault, home: VaultSettings, env: dict[str, str]) -> dict[str, Any]:
    """Drive each audited action through the CLI, A2E over HTTP, the intake form and the
    service; returns the names, session and tokens involved."""
    made = cli(env, "tokens", "create", "--role", "agent", "--name", "alice", "--json")
    tokens = {"alice": json.loads(made.stdout)}
    for role, name in (("auditor", "audrey"), ("operator", "olga")):
        principal_id, token = create_token(vault.store, role, name)
        tokens[name] = {"principal_id": principal_id, "token": token}
    with app_client(vault, home) as client:
        alice = A2E(client, tokens["alice"]["token"])
        ok = {"endpoint": "https://api.example.test", "api_key": CANARY + "-ok"}
        assert alice.configure(ok)["status"] == "ok"
        assert (
            alice.configure({**ok, "mode": "fail", "api_key": CANARY + "-f"})["status"] == "error"
        )
        refused = alice.configure({"endpoint": 5, "api_key": CANARY + "-refused"})
        assert refused["type"] == "error"
        asked = alice.configure({"endpoint": "https://intake.example.test"})
        url = asked["intake_url"]
        bad = intake(client, url, {"/endpoint": "https://x.test"})  # no /api_key
        assert bad.status_code == 422, bad.text
        good = intake(client, url, {"/endpoint": "https://x.test", "/api_key": CANARY + "-in"})
        assert good.status_code == 200, good.text
    revoke(vault.store, "audrey", actor=tokens["olga"]["principal_id"])  # as the console does
    _, audrey_token = create_token(vault.store, "auditor", "audrey2")
    cli(env, "toolkits", "import", str(IMPORTED), "--secret", "accelbyte-jssdk-mcp:PORT")
    cli(env, "toolkits", "remove", "accelbyte-jssdk-mcp")
    cli(env, "templates", "set", "secretive", "prod", "endpoint=https://prod.example.test")
    cli(env, "templates", "remove", "secretive", "prod")
    cli(env, "console-roles", "set", "groups=vault-operators", "operator")
    cli(env, "console-roles", "remove", "groups=vault-operators")
    cli(env, "allowances", "set", "alice", "--tool", "secretive/call_api")
    cli(env, "allowances", "remove", "alice")
    cli(env, "keys", "recovery", "init", "--shares", "2", "--threshold", "2")
    cli(env, "purge", "--session", alice.session, "--yes")
    provider = open_provider(home)  # the key commands' service functions, in this process
    rotate_master_key(vault.store, provider)
    rotate_vault_key(vault.store, provider, vault.ring)
    for key_id in ("vk-1", "kek-1"):
        retire_key(vault.store, provider, key_id)
    vault.accept_restore("operator")
    return {
        "session": alice.session,
        "tokens": [*(t["token"] for t in tokens.values()), audrey_token],
        "ids": {name: t["principal_id"] for name, t in tokens.items()},
        "auditor": audrey_token,
        "secrets": [CANARY],
    }


def test_every_action_shows_in_the_cli_the_api_and_the_console_with_its_actor(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    made = every_action(vault, home, cli_env)
    listed = json.loads(cli(cli_env, "audit", "list", "--limit", "1000", "--json").stdout)
    assert listed["next"] is None
    events = listed["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    producible = {a.value for a in AuditAction} - {a.value for a in UPGRADES_ONLY | ELSEWHERE}
    assert {e["action"] for e in events} == producible

    def one(action: AuditAction, **match: Any) -> dict[str, Any]:
        found = [e for e in events if e["action"] == action and match.items() <= e.items()]
        assert found, (action, match)
        return found[0]

    session, ids = made["session"], made["ids"]
    assert one(AuditAction.VAULT_INITIALIZED)["actor_name"] == "init"
    created = one(AuditAction.TOKEN_CREATED, principal_name="alice")
    assert created["actor_name"] == AT_THE_SHELL and created["summary"] == (
        "token created for alice (agent)"
    )
    revoked = one(AuditAction.TOKEN_REVOKED, principal_name="audrey")
    assert (revoked["actor"], revoked["actor_name"]) == (ids["olga"], "olga")
    assert revoked["summary"] == "token revoked for audrey"
    opened = one(AuditAction.SESSION_CREATED, session_id=session)
    assert opened["actor_name"] == opened["principal_name"] == "alice"
    assert one(AuditAction.CONFIGURE, version=1)["summary"] == (
        f"configured secretive v1 in session {session} (status ok); secret fields /api_key"
    )
    failed = one(AuditAction.CONFIGURE, version=2)
    assert failed["details"]["status"] == "error" and "failed to initialize" in failed["summary"]
    refused = one(AuditAction.CONFIGURE_REFUSED)
    assert refused["actor_name"] == "alice" and "/endpoint type" in refused["summary"]
    asked = one(AuditAction.INTAKE_REQUESTED)
    assert asked["actor_name"] == "alice" and "asking for /api_key" in asked["summary"]
    for action in (AuditAction.INTAKE_REFUSED, AuditAction.INTAKE_COMPLETED):
        person = one(action)
        assert person["actor"].startswith("intake:")
        assert person["actor_name"] == "intake link of alice", person
    assert one(AuditAction.INTAKE_REFUSED)["summary"] == (
        f"intake form for secretive in session {session} refused: /api_key required"
    )
    imported = one(AuditAction.TOOLKIT_IMPORTED)
    assert imported["summary"] == (
        "imported toolkit accelbyte-jssdk-mcp with overrides --secret port; secret fields port"
    )
    assert one(AuditAction.TOOLKIT_REMOVED)["summary"] == (
        "removed imported toolkit accelbyte-jssdk-mcp"
    )
    narrowed = one(AuditAction.ALLOWANCE_SET, principal_name="alice")
    assert narrowed["actor_name"] == AT_THE_SHELL and narrowed["summary"] == (
        "principal alice narrowed to secretive/call_api"
    )
    assert one(AuditAction.ALLOWANCE_REMOVED, principal_name="alice")["summary"] == (
        "principal alice no longer narrowed: it may call every tool configured for it"
    )
    purged = one(AuditAction.PURGE)
    assert purged["actor_name"] == AT_THE_SHELL and purged["principal_name"] == "alice"
    assert purged["summary"].startswith(f"purged session {session}: 4 versions shredded")
    assert one(AuditAction.MASTER_KEY_RETIRED)["summary"] == "master key kek-1 retired"
    assert one(AuditAction.VAULT_KEY_RETIRED)["summary"] == "vault key vk-1 retired"

    with app_client(vault, home) as client:
        auditor = {"Authorization": f"Bearer {made['auditor']}"}
        answer = client.get("/v1/audit/events", params={"limit": 1000}, headers=auditor)
        assert answer.status_code == 200
        assert answer.json() == listed  # one service function, one shape
        sign_in(client, made["auditor"])
        page = client.get("/console/audit")
        assert page.status_code == 200
        newest = events[::-1][:50]
        rows = re.findall(r"<tr>\s*<td[^>]*>(\d+)</td>", page.text)
        assert [int(seq) for seq in rows] == [e["seq"] for e in newest]
        for e in newest:
            assert escape(e["summary"]) in page.text
            assert escape(e["actor_name"]) in page.text
    for text in (json.dumps(listed), answer.text, page.text):
        for secret in [*made["secrets"], *made["tokens"]]:
            assert secret not in text


def test_an_agent_is_refused_and_a_bad_filter_is_a_422_that_echoes_nothing(
    vault: Vault, home: VaultSettings
) -> None:
    agent = create_token(vault.store, "agent", "nosy")[1]
    operator = create_token(vault.store, "operator", "ops")[1]
    with app_client(vault, home) as client:
        assert client.get("/v1/audit/events").status_code == 401
        refused = client.get("/v1/audit/events", headers={"Authorization": f"Bearer {agent}"})
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
        bearer = {"Authorization": f"Bearer {operator}"}
        assert client.get("/v1/audit/events", headers=bearer).status_code == 200
        for params, name in (
            ({"since": CANARY}, "since"),
            ({"until": "2026-01-01", "since": "2026-02-01"}, "until"),
            ({"action": CANARY}, "action"),
            ({"principal": CANARY}, "principal"),
            ({"actor": CANARY}, "actor"),
            ({"session": CANARY + "\x00"}, "session"),
            ({"before": 3}, "before"),
            ({"order": "desc", "after": 3}, "after"),
        ):
            answer = client.get("/v1/audit/events", params=params, headers=bearer)
            assert answer.status_code == 422, (params, answer.text)
            body = answer.json()
            assert body["code"] == "invalid_request" and body["detail"].startswith(f"{name}: ")
            assert answer.headers["content-type"] == "application/problem+json"
            assert body["details"] == [{"pointer": f"/query/{name}", "keyword": "filter"}]
            assert CANARY not in answer.text
        for params in ({"limit": 0}, {"limit": MAX_LIMIT + 1}, {"after": -1}, {"order": "up"}):
            answer = client.get("/v1/audit/events", params=params, headers=bearer)
            assert answer.status_code == 422, params


def seqs(page_events: Any) -> list[int]:
    return [e.seq for e in page_events]


def test_filters_and_the_cursor(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str], database_url: str
) -> None:
    ids = {}
    for role, name in (("agent", "alice"), ("agent", "bob"), ("operator", "olga")):
        ids[name], token = create_token(vault.store, role, name)
        ids[f"{name}-token"] = token
    config = {"endpoint": "https://x.test", "api_key": CANARY}
    with app_client(vault, home) as client:
        alice = A2E(client, ids["alice-token"])
        assert alice.configure(config)["status"] == "ok"
        time.sleep(0.01)
        middle = time.time()
        time.sleep(0.01)
        bob = A2E(client, ids["bob-token"])
        assert bob.configure(config)["status"] == "ok"
        scoped = alice.configure(config, scope="principal")
        assert scoped["status"] == "ok", scoped
    revoke(vault.store, "bob", actor=ids["olga"])
    everything = list_events(vault.store, limit=MAX_LIMIT).events
    assert len(everything) >= 12 and seqs(everything) == sorted(seqs(everything))

    def listed(**given: Any) -> list[tuple[str, str | None]]:
        page = list_events(vault.store, EventFilter(**given), limit=MAX_LIMIT)
        return [(e.action, e.principal_name) for e in page.events]

    made = [("token_created", n) for n in ("alice", "bob", "olga")]
    assert listed(actions=("token_created",)) == made
    assert listed(actions=("token_revoked", "token_created")) == [*made, ("token_revoked", "bob")]
    assert listed(actor="olga") == listed(actor=ids["olga"]) == [("token_revoked", "bob")]
    assert listed(actor="operator") == made  # `create_token`'s actor: the command line
    alice_session = [("session_created", "alice"), ("configure", "alice")]
    assert listed(session=alice.session) == alice_session
    scope = f"principal:{ids['alice']}"
    assert listed(session=scope) == alice_session
    assert listed(principal="alice") == [("token_created", "alice"), *alice_session * 2]
    assert listed(principal=ids["bob"]) == [
        ("token_created", "bob"),
        ("session_created", "bob"),
        ("configure", "bob"),
        ("token_revoked", "bob"),
    ]
    assert listed(toolkit="secretive") == [("configure", n) for n in ("alice", "bob", "alice")]
    before, after = listed(until=middle), listed(since=middle)
    assert before + after == [(e.action, e.principal_name) for e in everything]
    assert ("configure", "bob") in after and ("configure", "bob") not in before
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle + 3600))
    assert listed(since=iso) == [] and listed(until=iso) == listed()
    assert listed(principal="alice", actions=("configure",), since=middle) == [
        ("configure", "alice")
    ]

    # the cursor: pages up from `after`, pages down from the newest, each ending with None
    up, after_seq = [], 0
    while True:
        page = list_events(vault.store, after=after_seq, limit=5)
        up += page.events
        if page.next is None:
            break
        assert len(page.events) == 5
        after_seq = page.next
    assert seqs(up) == seqs(everything)
    down, cursor = [], None
    while True:
        page = newest_events(vault.store, before=cursor, limit=4)
        down += page.events
        if page.next is None:
            break
        cursor = page.next
    assert seqs(down) == seqs(everything)[::-1]
    filtered = list_events(vault.store, EventFilter(actions=("configure",)), limit=2)
    assert filtered.next is not None and len(filtered.events) == 2
    rest = list_events(vault.store, EventFilter(actions=("configure",)), after=filtered.next)
    assert len(rest.events) == 1 and rest.next is None

    for given, name in (
        ({"actions": ("nope",)}, "action"),
        ({"actor": "nobody"}, "actor"),
        ({"principal": "nobody"}, "principal"),
        ({"since": "yesterday"}, "since"),
        ({"until": "nan"}, "until"),
        ({"toolkit": "x\x00"}, "toolkit"),
        ({"session": ""}, "session"),
    ):
        with pytest.raises(BadFilter) as caught:
            list_events(vault.store, EventFilter(**given))
        assert caught.value.name == name
    for kwargs, name in (({"after": -1}, "after"), ({"limit": 0}, "limit")):
        with pytest.raises(BadFilter) as caught:
            list_events(vault.store, **kwargs)
        assert caught.value.name == name

    # the same filters over HTTP (both orders) and on the command line
    with app_client(vault, home) as client:
        bearer = {"Authorization": f"Bearer {ids['olga-token']}"}
        query = {"principal": "bob", "action": ["token_created", "token_revoked"], "limit": 1}
        first = client.get("/v1/audit/events", params=query, headers=bearer).json()
        assert [e["summary"] for e in first["events"]] == ["token created for bob (agent)"]
        second = client.get(
            "/v1/audit/events", params={**query, "after": first["next"]}, headers=bearer
        ).json()
        assert [e["summary"] for e in second["events"]] == ["token revoked for bob"]
        assert second["next"] is None
        newest = client.get(
            "/v1/audit/events", params={"order": "desc", "limit": 3}, headers=bearer
        ).json()
        assert [e["seq"] for e in newest["events"]] == seqs(everything)[::-1][:3]
        older = client.get(
            "/v1/audit/events",
            params={"order": "desc", "limit": 3, "before": newest["next"]},
            headers=bearer,
        ).json()
        assert [e["seq"] for e in older["events"]] == seqs(everything)[::-1][3:6]
    shown = json.loads(cli(cli_env, "audit", "list", "--principal", "bob", "--json").stdout)
    expected = list_events(vault.store, EventFilter(principal="bob"))
    assert shown == expected.as_json()
    prefix = bob.session[:8]
    table = cli(cli_env, "audit", "list", "--session", prefix, "--limit", "1")
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["SEQ", "TIME", "(UTC)", "ACTION", "ACTOR", "EVENT"]
    assert "session_created" in lines[1] and "bob" in lines[1]
    assert f"more follow: --after {shown['events'][1]['seq']}" in table.stderr
    wrong = run_cli(["audit", "list", "--since", CANARY], cli_env)
    assert wrong.returncode == 1 and wrong.stderr.startswith("toolkit-vault: error: --since: ")

    # a principal whose row is gone keeps the name its token_created event gave it
    ghost = create_token(vault.store, "auditor", "ghost")[0]
    with vault.store.engine.begin() as conn:
        conn.execute(delete(PrincipalRow).where(PrincipalRow.principal_id == ghost))
    (gone,) = list_events(vault.store, EventFilter(principal="ghost")).events
    assert (gone.principal_id, gone.principal_name) == (ghost, "ghost")
    assert gone.summary == "token created for ghost (auditor)"
    del database_url


def read_line(proc: Forked, timeout: float = 10) -> str:
    """One line of the process's stdout, or fail after `timeout` seconds."""
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        assert selector.select(timeout), "no line in time"
    return proc.stdout.readline()


@pytest.fixture
def tailing(cli_env: dict[str, str]) -> Iterator[list[Forked]]:
    started: list[Forked] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_tail_follows_commits_and_stops_cleanly(
    vault: Vault, cli_env: dict[str, str], database_url: str, tailing: list[Forked]
) -> None:
    """SQLite ends it with SIGTERM, PostgreSQL with Ctrl-C (SIGINT): both exit 0, quietly."""
    sig = signal.SIGTERM if database_url.startswith("sqlite") else signal.SIGINT
    create_token(vault.store, "agent", "first")
    args = ["audit", "tail", "-n", "1", "--follow", "--json", "--action", "token_created"]
    env = {**cli_env, "PYTHONFAULTHANDLER": "1"}  # a hang's threads, dumped on SIGABRT
    proc = spawn_cli(args, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tailing.append(proc)
    last = json.loads(read_line(proc))
    assert (last["action"], last["principal_name"]) == ("token_created", "first")
    revoke(vault.store, last["principal_id"])  # not a token_created: filtered out
    made = time.monotonic()
    create_token(vault.store, "agent", "second")
    new = json.loads(read_line(proc))
    assert time.monotonic() - made < 3
    assert new["summary"] == "token created for second (agent)"
    assert new["seq"] == last["seq"] + 2
    proc.send_signal(sig)
    try:  # it stops between two polls (0.5 s apart); a loaded CI machine has taken 10 s
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        pytest.fail(f"audit tail did not stop; its threads:\n{proc.communicate()[1][-4000:]}")
    assert (proc.returncode, out, err) == (0, "", "")
    plain = cli(cli_env, "audit", "tail", "-n", "2")
    lines = plain.stdout.splitlines()
    assert len(lines) == 2 and lines[1].split()[2:4] == ["token_created", "operator"]
    assert lines[1].endswith("token created for second (agent)")


def test_a_soaks_secrets_and_tokens_appear_in_no_listed_event(
    vault: Vault, home: VaultSettings, cli_env: dict[str, str]
) -> None:
    """Agents configure, fail, are refused, go through intake, in both scopes; tokens are
    made and revoked. Not one secret value or token shows in any listing of the trail."""
    secrets: list[str] = []
    tokens: list[str] = []

    def secret(tag: str) -> str:
        secrets.append(f"{CANARY}-{tag}-{len(secrets)}")
        return secrets[-1]

    with app_client(vault, home) as client:
        for n in range(3):
            principal_id, token = create_token(vault.store, "agent", f"soak-{n}")
            tokens.append(token)
            for _ in range(2):
                agent = A2E(client, token)
                base = {"endpoint": "https://soak.test", "auth": {"password": secret("pw")}}
                for mode in ("ok", "partial", "fail"):
                    config = {**base, "api_key": secret(mode), "mode": mode}
                    config["tokens"] = [secret("t")]
                    assert agent.configure(config)["status"] in ("ok", "partial", "error")
                assert agent.configure({"endpoint": secret("e"), "api_key": 7})["type"] == "error"
                extra = {"endpoint": "https://soak.test", "api_key": secret("x"), "x": secret("y")}
                assert agent.configure(extra)["type"] == "error"
                url = agent.configure({"endpoint": "https://soak.test"})["intake_url"]
                typed = {"/endpoint": "https://soak.test", "/api_key": secret("intake")}
                assert intake(client, url, {**typed, "/mode": secret("m")}).status_code == 422
                half = {"/endpoint": "https://soak.test", "/auth/password": secret("half")}
                assert intake(client, url, half).status_code == 422  # no /api_key: refused
                assert intake(client, url, typed).status_code == 200
            scoped = {"endpoint": "https://soak.test", "api_key": secret("scope")}
            agent.configure(scoped, scope="principal")
            if n == 1:
                revoke(vault.store, principal_id)
        auditor = create_token(vault.store, "auditor", "soak-auditor")[1]
        tokens.append(auditor)
        bearer = {"Authorization": f"Bearer {auditor}"}
        answers = []
        cursor: int | None = 0
        while cursor is not None:
            answer = client.get("/v1/audit/events", params={"after": cursor}, headers=bearer)
            answers.append(answer.text)
            cursor = answer.json()["next"]
        sign_in(client, auditor)
        pages = [client.get("/console/audit").text]
    service = []
    cursor = 0
    while cursor is not None:
        page = list_events(vault.store, after=cursor, limit=7)
        service.append(json.dumps(page.as_json()))
        service += [repr(e) for e in page.events] + [e.summary for e in page.events]
        cursor = page.next
    shown = [
        cli(cli_env, "audit", "list", "--limit", "1000", "--json").stdout,
        cli(cli_env, "audit", "list", "--limit", "1000", "--wide").stdout,
        cli(cli_env, "audit", "tail", "-n", "1000", "--json").stdout,
    ]
    everything = answers + pages + service + shown
    kinds = [e["action"] for e in json.loads(shown[0])["events"]]
    assert kinds.count("configure_refused") == 12 and kinds.count("intake_refused") == 6
    for text in everything:
        for value in secrets + tokens:
            assert value not in text


def test_the_principal_filter_keeps_its_subject_whatever_its_id_spells(
    vault: Vault, database_url: str
) -> None:
    """The principal filter compares each event's subject with the id, never a JSON
    spelling in SQL: LIKE metacharacters (`%`, `_`) and JSON-looking ids match only
    themselves, on SQLite and PostgreSQL, and a page stays full past the events it skips."""
    real = create_token(vault.store, "agent", "a_b")[0]  # `_` is a LIKE wildcard
    lookalike = create_token(vault.store, "agent", "axb")[0]  # what `a_b` matches as LIKE
    ghosts = [  # token events of principals whose rows are gone (as an older chain has)
        "50%_off",
        "50xyoff",  # what `50%_off` matches as LIKE
        f'{real}", "role": "agent',
        '{"principal_id": "' + real + '"}',
    ]
    for ghost in ghosts:
        details = {"principal_id": ghost, "name": f"ghost {ghost}", "role": "agent"}
        vault.store.record_attempt(
            AuditDraft("operator", AuditAction.TOKEN_CREATED, details=details)
        )
        vault.store.record_attempt(
            AuditDraft(
                "operator",
                AuditAction.TOKEN_REVOKED,
                details={"principal_id": real, "nested": {"principal_id": ghost}},
            )
        )

    def about(principal: str, **page: Any) -> list[tuple[str, str | None, str | None]]:
        events = list_events(vault.store, EventFilter(principal=principal), **page).events
        return [(e.action, e.principal_id, e.principal_name) for e in events]

    mine = [("token_created", real, "a_b")] + [("token_revoked", real, "a_b")] * len(ghosts)
    assert about("a_b") == about(real) == mine
    assert about("axb") == [("token_created", lookalike, "axb")]
    for ghost in ghosts:  # not an id the vault makes: shown as stored, not named
        assert about(ghost) == about(f"ghost {ghost}") == [("token_created", ghost, ghost)]
    pages, after = [], 0
    while True:
        page = list_events(vault.store, EventFilter(principal="a_b"), after=after, limit=2)
        assert len(page.events) == 2 or page.next is None
        pages += [(e.action, e.principal_id, e.principal_name) for e in page.events]
        if page.next is None:
            break
        after = page.next
    assert pages == mine
    newest = newest_events(vault.store, EventFilter(principal="a_b"), limit=2)
    assert [e.seq for e in newest.events] == sorted((e.seq for e in newest.events), reverse=True)
    assert len(newest.events) == 2 and newest.next == newest.events[-1].seq
    del database_url
