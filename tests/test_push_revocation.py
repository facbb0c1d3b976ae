"""Push events stop at revocation: a WebSocket whose token was revoked hears no more
`toolkit/status/event`s, even while its client sends nothing (issue 35).

Before each push the token is checked as it is for each message (the one-second cache,
else the store); a revoked one gets the `UNAUTHORIZED` error and close code 1008 instead
of the event. Revoked here (the cache forgets at once) and through another engine (as
`tokens revoke` in another process: the push after the cache's second is refused).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from toolkit_vault.access.principals import create_token, revoke
from toolkit_vault.bootstrap import open_provider, open_vault
from toolkit_vault.core.vault import Vault
from toolkit_vault.protocol import ToolkitStatusEvent
from toolkit_vault.settings import VaultSettings
from toolkit_vault.transports.http_api import create_app

HELLO = {"type": "handshake/req", "capabilities": ["toolkits"]}
CANARY = "tkv-push-after-revocation"


@pytest.fixture
def replica(home: VaultSettings) -> Iterator[Vault]:
    """A second vault on the same home and database: another process, as far as caches go."""
    other = open_vault(home)
    yield other
    other.store.engine.dispose()


def _event(session: str, message: str) -> ToolkitStatusEvent:
    return ToolkitStatusEvent(
        session_id=session, toolkit_name="filesystem", configured=True, message=message
    )


@pytest.mark.parametrize("where", ["here", "elsewhere"])
def test_a_revoked_tokens_websocket_hears_no_more_pushes(
    vault: Vault, home: VaultSettings, replica: Vault, where: str
) -> None:
    name = f"pushed-{where}"
    token = create_token(vault.store, "agent", name)[1]
    with (
        TestClient(create_app(vault, open_provider(home))) as client,
        client.websocket_connect("/a2e", headers={"Authorization": f"Bearer {token}"}) as ws,
    ):
        ws.send_json(HELLO)
        session = ws.receive_json()["session_id"]
        vault.publish(_event(session, "before"))
        heard = ws.receive_json()
        assert (heard["type"], heard["message"]) == ("toolkit/status/event", "before")
        revoke((vault if where == "here" else replica).store, name)
        if where == "elsewhere":
            time.sleep(1.1)  # what the cache may still believe, at most
        vault.publish(_event(session, CANARY))
        refusal = ws.receive_json()
        assert (refusal["type"], refusal.get("code")) == ("error", "UNAUTHORIZED"), refusal
        assert CANARY not in str(refusal)
        vault.publish(_event(session, CANARY))  # nothing more is sent
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1008


def test_pushes_to_a_valid_token_keep_coming(vault: Vault, home: VaultSettings) -> None:
    """The check costs nothing a client sees: pushes and answers in order, the socket open."""
    token = create_token(vault.store, "agent", "still-here")[1]
    with (
        TestClient(create_app(vault, open_provider(home))) as client,
        client.websocket_connect("/a2e", headers={"Authorization": f"Bearer {token}"}) as ws,
    ):
        ws.send_json(HELLO)
        session = ws.receive_json()["session_id"]
        for n in range(3):
            vault.publish(_event(session, f"event-{n}"))
        assert [ws.receive_json()["message"] for _ in range(3)] == [
            "event-0",
            "event-1",
            "event-2",
        ]
        ws.send_json({"type": "toolkit/list/req"})
        assert ws.receive_json()["type"] == "toolkit/list/resp"
