"""The operator's actions under `/v1/` (transports/http_operator.py over core/operators.py),
in process on SQLite and PostgreSQL: create a token (shown once, working at once, in no
log line and no audit event), revoke one (only confirmed, never one's own), start an
intake link for a session or an agent, purge (only confirmed, the answer naming what would
go). Each is audited with the operator's principal as its actor; auditors and agents are
refused every one of them."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import select
from starlette.testclient import TestClient

from toolkit_vault.access.principals import authenticate, create_token, list_principals
from toolkit_vault.audit.history import history
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.store.models import AuditEvent
from toolkit_vault.transports.http_api import Limits, create_app

HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
SECRETIVE = {"endpoint": "https://api.example.test", "api_key": "tkv-canary-op-api-51d0"}


class Api:
    """The app in process, an operator signed in as `ops`."""

    def __init__(self, client: TestClient, vault: Vault) -> None:
        self.client, self.vault = client, vault
        self.operator_id, token = create_token(vault.store, "operator", "ops")
        self.headers = {"Authorization": f"Bearer {token}"}

    def post(self, path: str, body: dict[str, Any], token: str | None = None) -> Any:
        headers = self.headers if token is None else {"Authorization": f"Bearer {token}"}
        return self.client.post(path, json=body, headers=headers)

    def agent_session(self, token: str) -> str:
        hello = self.client.post("/a2e", json=HELLO, headers={"Authorization": f"Bearer {token}"})
        assert hello.status_code == 200, hello.text
        return str(hello.json()["session_id"])

    def configure(self, token: str, session: str, **extra: Any) -> dict[str, Any]:
        message = {"type": "toolkit/configure/req", "toolkit_name": "secretive"}
        headers = {"Authorization": f"Bearer {token}", "A2E-Session": session}
        answer = self.client.post(
            "/a2e", json=message | {"config": SECRETIVE} | extra, headers=headers
        )
        return dict(answer.json())

    def events(self, action: str) -> list[Any]:
        with self.vault.store.read() as conn:
            query = select(AuditEvent).where(AuditEvent.action == action).order_by(AuditEvent.seq)
            return list(conn.execute(query).all())


@pytest.fixture
def api(vault: Vault, home: VaultSettings) -> Iterator[Api]:
    app = create_app(vault, open_provider(home), Limits(requests_per_second=1000, burst=1000))
    with TestClient(app) as client:
        yield Api(client, vault)


def test_a_created_token_works_at_once_and_is_in_no_log_line_nor_audit_event(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    made = api.post("/v1/tokens", {"role": "agent", "name": "made-by-api"})
    assert made.status_code == 201, made.text
    assert made.headers["cache-control"] == "no-store"
    body = made.json()
    token = body["token"]
    assert token.startswith("tkv_") and (body["name"], body["role"]) == ("made-by-api", "agent")
    assert api.agent_session(token)  # works at once, on the A2E route
    assert authenticate(api.vault.store, token) is not None

    (event,) = api.events("token_created")[-1:]
    assert event.actor == api.operator_id  # the signed-in operator, not "local"/"operator"
    assert json.loads(event.details)["principal_id"] == body["principal_id"]
    digest = hashlib.sha256(token.encode()).hexdigest()
    with api.vault.store.read() as conn:
        trail = [repr(tuple(row)) for row in conn.execute(select(AuditEvent)).all()]
    assert trail and not any(token in row or digest in row for row in trail)
    logged = [r.getMessage() for r in caplog.records] + [caplog.text]
    assert logged and not any(token in line for line in logged)
    listed = api.client.get("/v1/tokens", headers=api.headers)
    assert listed.status_code == 200 and token not in listed.text
    assert "made-by-api" in {p["name"] for p in listed.json()["principals"]}

    taken = api.post("/v1/tokens", {"role": "agent", "name": "made-by-api"})
    assert taken.status_code == 422 and "already exists" in taken.json()["detail"]
    assert body["expires_at"] is None  # without a ttl, as tokens create without --ttl

    timed = api.post("/v1/tokens", {"role": "auditor", "name": "for-a-day", "ttl": "12h"})
    assert timed.status_code == 201, timed.text
    expires_at = timed.json()["expires_at"]
    assert abs(expires_at - (time.time() + 12 * 3600)) < 60
    (listed_entry,) = [p for p in list_principals(api.vault.store) if p.name == "for-a-day"]
    assert listed_entry.expires_at == expires_at
    for ttl in ("forever", "0s", "367d"):
        bad = api.post("/v1/tokens", {"role": "agent", "name": f"never-{ttl}", "ttl": ttl})
        assert bad.status_code == 422 and "token lifetime" in bad.json()["detail"], ttl
    assert not any(p.name.startswith("never-") for p in list_principals(api.vault.store))


def test_a_revoke_needs_its_confirmation_and_never_takes_ones_own_token(api: Api) -> None:
    target_id, target = create_token(api.vault.store, "agent", "leaky")
    for confirm in (None, "", "someone-else"):
        refused = api.post("/v1/tokens/revoke", {"principal": "leaky", "confirm": confirm})
        assert refused.status_code == 409, refused.text
        assert "nothing was changed" in refused.json()["detail"]
        assert refused.json()["details"][0]["confirm"] == "leaky"
    assert authenticate(api.vault.store, target) is not None
    assert api.events("token_revoked") == []

    for own in ("ops", api.operator_id):
        mine = api.post("/v1/tokens/revoke", {"principal": own, "confirm": own})
        assert mine.status_code == 409
        assert "that is your own token" in mine.json()["detail"]
    assert api.client.get("/v1/tokens", headers=api.headers).status_code == 200  # still in
    assert api.events("token_revoked") == []

    done = api.post("/v1/tokens/revoke", {"principal": target_id, "confirm": "leaky"})
    assert done.status_code == 200, done.text
    assert (done.json()["name"], done.json()["revoked_now"]) == ("leaky", True)
    assert authenticate(api.vault.store, target) is None
    hello = api.client.post("/a2e", json=HELLO, headers={"Authorization": f"Bearer {target}"})
    assert hello.status_code == 401
    (event,) = api.events("token_revoked")
    assert event.actor == api.operator_id
    again = api.post("/v1/tokens/revoke", {"principal": "leaky", "confirm": "leaky"})
    assert again.status_code == 200 and again.json()["revoked_now"] is False
    unknown = api.post("/v1/tokens/revoke", {"principal": "nobody", "confirm": "nobody"})
    assert unknown.status_code == 404


def test_an_intake_link_for_a_session_or_an_agent_configures_it(api: Api) -> None:
    _, agent = create_token(api.vault.store, "agent", "needs-a-key")
    session = api.agent_session(agent)
    asked = api.post("/v1/intake", {"toolkit": "secretive", "session": session})
    assert asked.status_code == 201, asked.text
    link = asked.json()
    assert link["intake_url"].startswith("http://testserver/console/intake?link=")
    assert (link["session_id"], link["scope"], link["owner"]) == (session, "session", "needs-a-key")
    (event,) = api.events("intake_requested")
    assert (event.actor, event.session_id, event.toolkit_name) == (
        api.operator_id,
        session,
        "secretive",
    )
    assert api.vault.intake is not None
    form = api.client.get(link["intake_url"].removeprefix("http://testserver"))
    assert form.status_code == 200 and "secretive" in form.text
    (code,) = parse_qs(urlsplit(link["intake_url"]).query)["link"]
    complete = api.vault.intake.complete  # type: ignore[attr-defined]
    assert complete(code, SECRETIVE).status == "ok"
    listed = api.client.post(
        "/a2e",
        json={"type": "toolkit/list/req"},
        headers={"Authorization": f"Bearer {agent}", "A2E-Session": session},
    ).json()
    assert {t["name"]: t["configured"] for t in listed["toolkits"]}["secretive"] is True

    for_agent = api.post(
        "/v1/intake", {"toolkit": "secretive", "principal": "needs-a-key", "expires_in": 60}
    )
    assert for_agent.status_code == 201, for_agent.text
    assert for_agent.json()["scope"] == "principal"
    assert "about 1 min" in for_agent.json()["message"]
    assert (for_agent.json()["expires_in"], link["expires_in"]) == (60, 600)
    assert len(api.events("intake_requested")) == 2

    create_token(api.vault.store, "auditor", "reader")
    refusals = {
        422: [
            {"toolkit": "secretive", "principal": "reader"},  # an auditor has no sessions
            {"toolkit": "secretive", "session": session, "principal": "needs-a-key"},
            {"toolkit": "secretive"},
        ],
        404: [
            {"toolkit": "no-such-toolkit", "session": session},
            {"toolkit": "secretive", "session": "no-such-session"},
            {"toolkit": "secretive", "session": f"principal:{api.operator_id}"},
            {"toolkit": "secretive", "principal": "nobody"},
        ],
    }
    for status, bodies in refusals.items():
        for body in bodies:
            assert api.post("/v1/intake", body).status_code == status, body
    assert len(api.events("intake_requested")) == 2


def test_a_purge_needs_its_confirmation_which_names_what_it_destroys(api: Api) -> None:
    _, agent = create_token(api.vault.store, "agent", "shredded")
    session = api.agent_session(agent)
    assert api.configure(agent, session)["status"] == "ok"
    for confirm in (None, "", session[:8]):
        refused = api.post("/v1/purge", {"session": session, "confirm": confirm})
        assert refused.status_code == 409, refused.text
        would = refused.json()["details"][0]
        assert (would["versions"], would["toolkits"], would["configured"]) == (
            1,
            ["secretive"],
            ["secretive"],
        )
        assert "destroys 1 stored version(s)" in refused.json()["detail"]
    assert [v["status"] for v in history(api.vault.store, session)] == ["ok"]
    assert api.events("purge") == []

    done = api.post("/v1/purge", {"session": session, "confirm": session})
    assert done.status_code == 200, done.text
    assert (done.json()["versions"], done.json()["unconfigured"]) == (1, ["secretive"])
    assert [v["status"] for v in history(api.vault.store, session)] == ["purged"]
    (event,) = api.events("purge")
    assert (event.actor, event.session_id) == (api.operator_id, session)

    assert api.configure(agent, session, scope="principal")["status"] == "ok"
    own = api.post("/v1/purge", {"principal": "shredded", "toolkit": "secretive"})
    assert own.status_code == 409 and own.json()["details"][0]["versions"] == 1
    confirmed = {"principal": "shredded", "toolkit": "secretive", "confirm": "shredded"}
    done = api.post("/v1/purge", confirmed)
    assert done.status_code == 200 and done.json()["scope"] == "principal"
    assert done.json()["versions"] == 1
    assert [e.actor for e in api.events("purge")] == [api.operator_id] * 2

    assert api.post("/v1/purge", {"session": "nope", "confirm": "nope"}).status_code == 404
    both = {"session": session, "principal": "shredded", "confirm": session}
    assert api.post("/v1/purge", both).status_code == 422
    assert len(api.events("purge")) == 2


@pytest.mark.parametrize("role", ["auditor", "agent"])
def test_auditors_and_agents_are_refused_every_operator_action(api: Api, role: str) -> None:
    _, agent = create_token(api.vault.store, "agent", "bystander")
    session = api.agent_session(agent)
    assert api.configure(agent, session)["status"] == "ok"
    _, token = create_token(api.vault.store, role, f"not-an-operator-{role}")
    actions = [
        ("/v1/tokens", {"role": "operator", "name": "escalated"}),
        ("/v1/tokens/revoke", {"principal": "ops", "confirm": "ops"}),
        ("/v1/tokens/revoke", {"principal": "bystander", "confirm": "bystander"}),
        ("/v1/intake", {"toolkit": "secretive", "session": session}),
        ("/v1/purge", {"session": session, "confirm": session}),
    ]
    before = len(api.events("token_created"))
    for path, body in actions:
        refused = api.post(path, body, token)
        assert refused.status_code == 403, (path, refused.text)
        assert refused.json()["code"] == "forbidden"
    assert (
        api.client.get("/v1/tokens", headers={"Authorization": f"Bearer {token}"}).status_code
        == 403
    )
    assert all(p.revoked_at is None for p in list_principals(api.vault.store))
    assert "escalated" not in {p.name for p in list_principals(api.vault.store)}
    assert len(api.events("token_created")) == before
    assert api.events("intake_requested") == [] and api.events("purge") == []
    assert [v["status"] for v in history(api.vault.store, session)] == ["ok"]
