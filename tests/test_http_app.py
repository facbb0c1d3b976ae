"""The HTTP app in process: rate limits on both transports, revocation on an open
WebSocket, who may read the docs and run the check, and schemathesis against the spec."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from toolkit_vault.access.principals import ROLES, create_token, revoke
from toolkit_vault.audit.history import history
from toolkit_vault.bootstrap import open_provider
from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings
from toolkit_vault.transports.a2e.outbox import Outbox
from toolkit_vault.transports.http_api import Limits, create_app

pytestmark = pytest.mark.one_database

HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
LIST = {"type": "toolkit/list/req"}


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


def test_rate_limit_per_principal_on_a_websocket(vault: Vault, home: VaultSettings) -> None:
    app = app_for(vault, home, Limits(requests_per_second=0.5, burst=3))
    token = create_token(vault.store, "agent", "chatty-socket")[1]
    with (
        TestClient(app) as client,
        client.websocket_connect("/a2e", headers={"Authorization": f"Bearer {token}"}) as ws,
    ):
        replies = []
        for message in (HELLO, LIST, LIST, LIST, LIST):
            ws.send_json(message)
            replies.append(ws.receive_json())
        assert [r["type"] for r in replies[:3]] == [
            "handshake/resp",
            "toolkit/list/resp",
            "toolkit/list/resp",
        ]
        for refused in replies[3:]:
            assert refused["type"] == "error" and refused["message"].startswith("rate limit")
        other = client.post("/a2e", json=HELLO, headers={"Authorization": f"Bearer {token}"})
        assert other.status_code == 429  # one bucket per principal, both transports


def test_a_revoked_token_is_refused_and_its_open_websocket_closed(
    vault: Vault, home: VaultSettings
) -> None:
    token = create_token(vault.store, "agent", "revoked-midway")[1]
    configure = {
        "type": "toolkit/configure/req",
        "toolkit_name": "filesystem",
        "config": {"root_dir": "/tmp"},
    }
    with (
        TestClient(app_for(vault, home)) as client,
        client.websocket_connect("/a2e", headers={"Authorization": f"Bearer {token}"}) as ws,
    ):
        ws.send_json(HELLO)
        session = ws.receive_json()["session_id"]
        ws.send_json(configure)
        assert ws.receive_json()["status"] == "ok"
        ws.receive_json()  # its status event
        revoke(vault.store, "revoked-midway")
        ws.send_json(configure | {"config": {"root_dir": "/"}})
        refusal = ws.receive_json()
        assert (refusal["type"], refusal["code"]) == ("error", "UNAUTHORIZED")
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1008
    assert [v["public_config"]["root_dir"] for v in history(vault.store, session)] == ["/tmp"]


def test_a_websocket_client_gone_before_its_answer_ends_the_socket_quietly(
    vault: Vault, home: VaultSettings
) -> None:
    """uvicorn raises `ClientDisconnected` (an `OSError`) on a send to a client that left;
    the socket's sender stops there and the socket ends on the disconnect that follows,
    with no error for the server to log."""
    token = create_token(vault.store, "agent", "leaves-early")[1]
    app = app_for(vault, home)
    inbound = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": json.dumps(HELLO)},
        {"type": "websocket.receive", "text": json.dumps(LIST)},
        {"type": "websocket.disconnect", "code": 1006},
    ]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.01)  # the answers are sent meanwhile
        return inbound.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])
        if message["type"] == "websocket.send":
            raise OSError("client disconnected")

    scope = {
        "type": "websocket",
        "path": "/a2e",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
        "query_string": b"",
    }
    asyncio.run(app(scope, receive, send))
    assert sent == ["websocket.accept", "websocket.send"]  # nothing after the client left
    assert not inbound


def test_a_socket_sends_answers_and_pushes_one_at_a_time_in_the_order_given() -> None:
    """A push from a worker thread arriving while a send waits (a full transport buffer)
    goes out after it, never beside it; an answer put behind both waits for its turn, so
    a client that stops reading stops being read."""
    sent: list[str] = []
    in_flight, most_in_flight = 0, 0
    unblock = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        nonlocal in_flight, most_in_flight
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        if not unblock.is_set():
            await unblock.wait()  # the socket's buffer is full
        sent.append(message["text"])
        in_flight -= 1

    async def scenario() -> None:
        outbox = Outbox(send)
        answer = asyncio.create_task(outbox.put("answer-1"))  # runs on the next loop turn
        outbox.put_nowait("event-1")  # a push: its own send is scheduled behind the answer's
        await asyncio.sleep(0)
        outbox.put_nowait("event-2")
        late = asyncio.create_task(outbox.put("answer-2"))
        await asyncio.sleep(0.01)
        assert sent == [] and not answer.done() and not late.done()
        unblock.set()
        await asyncio.gather(answer, late)
        await outbox.drained()

    asyncio.run(scenario())
    assert most_in_flight == 1
    assert sent == ["event-1", "answer-1", "event-2", "answer-2"]


def test_an_intake_link_asked_for_over_a_websocket_names_the_server(
    vault: Vault, home: VaultSettings
) -> None:
    """The WebSocket route is served before FastAPI's stack (`_VaultApp`) too: an intake
    link made while it runs names the address the server took the connection on, not the
    one its `Host` header gives."""
    token = create_token(vault.store, "agent", "socket-intake")[1]
    headers = {"Authorization": f"Bearer {token}", "Host": "vault.example:8443"}
    configure = {"type": "toolkit/configure/req", "toolkit_name": "secretive"}
    with (
        TestClient(app_for(vault, home)) as client,
        client.websocket_connect("/a2e", headers=headers) as ws,
    ):
        ws.send_json(HELLO)
        ws.receive_json()
        ws.send_json(configure | {"config": {"endpoint": "e"}})
        answer = ws.receive_json()
    assert answer["intake_url"].startswith("http://testserver/console/intake?link=")


def test_docs_need_a_token_and_the_check_is_for_operators(
    vault: Vault, home: VaultSettings
) -> None:
    tokens = {role: create_token(vault.store, role, f"{role}-docs")[1] for role in ROLES}
    with TestClient(app_for(vault, home)) as client:
        assert client.get("/openapi.json").status_code == 401
        for role, token in tokens.items():
            bearer = {"Authorization": f"Bearer {token}"}
            spec = client.get("/openapi.json", headers=bearer)
            assert spec.status_code == 200 and "/a2e" in spec.json()["paths"]
            for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
                assert client.get(page, headers=bearer).status_code == 404
            expected = 200 if role == "operator" else 403
            assert client.get("/v1/check", headers=bearer).status_code == expected


@pytest.fixture
def openapi_app(vault: Vault, home: VaultSettings) -> Iterator[tuple[FastAPI, dict[str, str]]]:
    token = create_token(vault.store, "operator", "fuzzer")[1]
    yield (
        app_for(vault, home, Limits(requests_per_second=10_000, burst=10_000)),
        {"Authorization": f"Bearer {token}"},
    )


def test_openapi_finds_no_server_error(openapi_app: tuple[FastAPI, dict[str, str]]) -> None:
    app, headers = openapi_app
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, headers=headers)
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
    assert response.json()["code"] == "invalid_request"
    assert "tkv-canary-query" not in response.text


def test_the_a2e_route_keeps_its_request_log_and_names_the_server(
    vault: Vault, home: VaultSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """POST /a2e is answered before FastAPI's stack (`_VaultApp`): it still answers with
    and logs a request id, and an intake link made while it runs names the server's address
    (never the request's `Host` header)."""
    token = create_token(vault.store, "agent", "logged")[1]
    auth = {"Authorization": f"Bearer {token}", "Host": "vault.example:8443"}
    caplog.set_level("INFO", logger="toolkit_vault.transports.http_api")
    with TestClient(create_app(vault, open_provider(home))) as client:
        hello = client.post("/a2e", json=HELLO, headers=auth | {"X-Request-ID": "given-7"})
        assert hello.headers["X-Request-ID"] == "given-7"
        session = {"A2E-Session": hello.json()["session_id"]}
        configure = {"type": "toolkit/configure/req", "toolkit_name": "secretive"}
        answer = client.post(
            "/a2e", json=configure | {"config": {"endpoint": "e"}}, headers=auth | session
        )
        refused = client.post("/a2e", json=HELLO)
    assert answer.json()["intake_url"].startswith("http://testserver/console/intake?link=")
    assert len(answer.headers["X-Request-ID"]) == 16
    assert refused.status_code == 401 and refused.json()["code"] == "UNAUTHORIZED"
    lines = [vars(r) for r in caplog.records if r.getMessage() == "request"]
    assert [(line["path"], line["status"]) for line in lines] == [
        ("/a2e", 200),
        ("/a2e", 200),
        ("/a2e", 401),
    ]
    assert lines[0]["principal"] is not None
