"""`/v1` refusals are RFC 9457 problem details (`application/problem+json`: `type`, `title`,
`status`, `detail`, and the `code` and `details` extension members), the OpenAPI document
declares them on every `/v1` operation, and no detail repeats a value the client sent;
`/a2e` keeps answering with A2E `error` messages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from toolkit_vault.access.principals import create_token
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.transports.http_api import create_app
from toolkit_vault.transports.problems import MEDIA_TYPE, TYPE_PREFIX

CANARY = "tkv-canary-problem-7f3e"


@pytest.fixture
def client(vault: Vault, home: VaultSettings) -> Iterator[TestClient]:
    with TestClient(create_app(vault, open_provider(home))) as client:
        yield client


def bearer(vault: Vault, role: str, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(vault.store, role, name)[1]}"}


def assert_problem(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == MEDIA_TYPE
    body: dict[str, Any] = answer.json()
    assert body["type"] == TYPE_PREFIX + code and body["code"] == code, body
    assert body["status"] == status and body["title"] and body["detail"], body
    assert "message" not in body and "req_id" not in body  # no A2E error shape
    assert CANARY not in answer.text
    return body


def test_v1_refusals_are_problem_details_that_echo_nothing(
    client: TestClient, vault: Vault
) -> None:
    operator, agent = bearer(vault, "operator", "ops"), bearer(vault, "agent", "bot")

    missing = assert_problem(client.get("/v1/tokens"), 401, "unauthorized")
    assert missing["title"] == "Unauthorized"
    wrong = client.get("/v1/tokens", headers={"Authorization": f"Bearer {CANARY}"})
    assert_problem(wrong, 401, "unauthorized")
    assert_problem(client.get("/v1/tokens", headers=agent), 403, "forbidden")

    unknown = client.post(
        "/v1/purge", json={"session": CANARY, "confirm": CANARY}, headers=operator
    )
    assert assert_problem(unknown, 404, "not_found")["detail"] == "unknown session"
    assert_problem(client.get(f"/v1/no-such-route-{CANARY}", headers=operator), 404, "not_found")

    invalid = client.post("/v1/tokens", json={"role": CANARY, "name": ""}, headers=operator)
    body = assert_problem(invalid, 422, "invalid_request")
    assert {d["pointer"] for d in body["details"]} == {"/body/role", "/body/name"}
    since = client.get("/v1/history", params={"since": CANARY}, headers=operator)
    assert assert_problem(since, 422, "invalid_request")["details"] == [
        {"pointer": "/query/since", "keyword": "format"}
    ]

    _, target = create_token(vault.store, "agent", "leaky")
    unconfirmed = client.post("/v1/tokens/revoke", json={"principal": "leaky"}, headers=operator)
    conflict = assert_problem(unconfirmed, 409, "conflict")
    assert "nothing was changed" in conflict["detail"] and conflict["details"][0]["confirm"]
    assert target not in unconfirmed.text

    a2e = client.post("/a2e", json={"type": "handshake/req", "capabilities": ["toolkits"]})
    assert a2e.status_code == 401 and a2e.headers["content-type"] == "application/json"
    assert (a2e.json()["type"], a2e.json()["code"]) == ("error", "UNAUTHORIZED")


def test_the_openapi_document_declares_problem_details_on_every_v1_operation(
    client: TestClient, vault: Vault
) -> None:
    document = client.get("/openapi.json", headers=bearer(vault, "auditor", "reader")).json()
    operations = [
        (path, method, operation)
        for path, methods in document["paths"].items()
        if path.startswith("/v1/")
        for method, operation in methods.items()
    ]
    assert len(operations) > 10
    for path, method, operation in operations:
        for status in ("401", "403", "404", "409", "422", "429"):
            content = operation["responses"][status]["content"]
            assert list(content) == [MEDIA_TYPE], (method, path, status)
            schema = content[MEDIA_TYPE]["schema"]
            assert set(schema["required"]) == {"type", "title", "status", "detail"}
    assert "HTTPValidationError" not in str(document)  # FastAPI's default 422 is not answered
