"""Fixtures of the adversarial suite: every transport as a `Channel` (see adversarial_support).

Add a transport by adding its name to `TRANSPORTS` and a branch to `open_channel`; every
test that takes `channel` then runs through it too, on SQLite and on PostgreSQL. HTTP and
WebSocket channels share one real `toolkit-vault serve` per test, on loopback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from adversarial_support import (
    Channel,
    ConnectionChannel,
    HttpChannel,
    ServeProcess,
    StdioChannel,
    WebSocketChannel,
)

from toolkit_vault.core.vault import Vault
from toolkit_vault.settings import VaultSettings

TRANSPORTS = ["connection", "stdio", "http", "websocket"]

OpenChannel = Callable[..., Channel]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def open_channel(transport: str, vault: Vault, cli_env: dict[str, str]) -> Iterator[OpenChannel]:
    """Open channels of this test's transport (closed, and checked clean, at teardown)."""
    opened: list[Channel] = []
    servers: list[ServeProcess] = []  # at most one, started by the first channel that needs it

    def server() -> ServeProcess:
        if not servers:
            servers.append(ServeProcess(vault, cli_env))
        return servers[0]

    def open_(session_id: str | None = None) -> Channel:
        channel: Channel
        if transport == "connection":
            channel = ConnectionChannel(vault, session_id)
        elif transport == "stdio":
            channel = StdioChannel(cli_env, session_id)
        elif transport == "http":
            channel = HttpChannel(server(), session_id)
        elif transport == "websocket":
            channel = WebSocketChannel(server(), session_id)
        else:  # pragma: no cover - a transport listed without a branch
            raise AssertionError(transport)
        opened.append(channel)
        return channel

    try:
        yield open_
        for channel in opened:
            assert "Traceback" not in channel.close()
    finally:
        for serve in servers:
            assert "Traceback" not in serve.stop()


@pytest.fixture
def channel(open_channel: OpenChannel) -> Channel:
    return open_channel()


@pytest.fixture
def fresh(home: VaultSettings) -> Iterator[list[Vault]]:
    """Vaults opened later, as another process would open them (closed at teardown)."""
    opened: list[Vault] = []
    yield opened
    for vault in opened:
        vault.store.engine.dispose()
