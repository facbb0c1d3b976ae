"""The HTTP app in process: rate limits, and schemathesis against its OpenAPI spec."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from starlette.testclient import TestClient

from toolkit_vault.bootstrap import open_provider
from toolkit_vault.http import Limits, create_app
from toolkit_vault.principals import create_token
from toolkit_vault.service import Vault
from toolkit_vault.settings import VaultSettings


def app_for(vault: Vault, home: VaultSettings, limits: Limits | None = None) -> FastAPI:
    return create_app(vault, open_provider(home), limits)


def test_rate_limit_per_principal(vault: Vault, home: VaultSettings) -> None:
    app = app_for(vault, home, Limits(requests_per_second=0.5, burst=3))
    first = create_token(vault.store, "agent", "busy")[1]
    second = create_token(vault.store, "agent", "calm")[1]
    with TestClient(app) as client:
        hello = {"type": "handshake/req", "capabilities": ["toolkits"]}
        codes = [
            client.post(
                "/a2e", json=hello, headers={"Authorization": f"Bearer {first}"}
            ).status_code
            for _ in range(5)
        ]
        assert codes == [200, 200, 200, 429, 429]
        limited = client.post("/a2e", json=hello, headers={"Authorization": f"Bearer {first}"})
        assert limited.json()["message"].startswith("rate limit exceeded")
        assert limited.headers["Retry-After"] == "1"
        other = client.post("/a2e", json=hello, headers={"Authorization": f"Bearer {second}"})
        assert other.status_code == 200  # buckets are per principal


@pytest.fixture
def openapi_app(vault: Vault, home: VaultSettings) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    token = create_token(vault.store, "operator", "fuzzer")[1]
    yield (
        app_for(vault, home, Limits(requests_per_second=10_000, burst=10_000)),
        {"Authorization": f"Bearer {token}"},
    )


def test_openapi_finds_no_server_error(openapi_app: tuple[FastAPI, dict[str, str]]) -> None:
    app, headers = openapi_app
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = list(schema.get_all_operations())
    assert len(operations) >= 5
    for result in operations:
        operation = result.ok()

        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(case=operation.as_strategy())
        def exercise(case: schemathesis.Case) -> None:
            response = case.call(headers=headers)
            case.validate_response(response, checks=[not_a_server_error])

        exercise()


def test_invalid_parameters_never_echo_the_input(vault: Vault, home: VaultSettings) -> None:
    token = create_token(vault.store, "auditor", "curious")[1]
    canary = "tkv-canary-query-" + "x" * 300
    with TestClient(app_for(vault, home)) as client:
        response = client.get(
            "/v1/history", params={"session": canary}, headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 422
    assert response.json()["code"] == "INVALID_MESSAGE"
    assert "tkv-canary-query" not in response.text
