"""The official `mcp` Python SDK's `ClientSession`, over `/mcp` on a real `serve`
(streamable HTTP, bearer token) and over `toolkit-vault mcp` (stdio, the local principal),
each with `filesystem` and an imported server configured for its principal: it writes and
reads a file, and calls the imported server's tools (our API_KEY test server, run in the
sandbox by the vault): `whoami` answers "authorized" (it has a key), and `echo_key`'s
result is withheld, so the key the server holds is the principal's, not the import's
placeholder."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from spec_support import hello, send
from test_http import Server, running_server
from test_imported_servers import KEY, NAME, SITE, served_vault  # noqa: F401 (a fixture)
from test_mcp_endpoint import _text, mcp_over_http
from test_stdio import CLI
from toolkit_vault.core.vault import Vault
from toolkit_vault.sandbox import sandbox_available
from toolkit_vault.toolkits import served

pytestmark = [
    pytest.mark.one_database,
    pytest.mark.skipif(not sandbox_available(), reason="no sandbox on this machine"),
]

WHOAMI = f"{NAME}__whoami"


@pytest.fixture
def served_env(served_vault: Vault, cli_env: dict[str, str]) -> dict[str, str]:  # noqa: F811
    """`cli_env` with where the vault runs imported servers (set by `served_vault`)."""
    env = dict(cli_env)
    for name in (served.SERVERS_DIR_ENV, served.SERVER_BINDS_ENV):
        env[name] = os.environ[name]
    return env


@pytest.fixture
def root(tmp_path: Path) -> Path:
    made = tmp_path / "root"
    made.mkdir()
    return made


def configure_requests(root: Path) -> list[dict[str, object]]:
    """Principal-scope configs: filesystem's root, the imported server's key."""
    configs = {
        "filesystem": {"root_dir": str(root)},
        NAME: {"api_key": KEY, "pythonpath": str(SITE)},
    }
    return [
        {
            "type": "toolkit/configure/req",
            "toolkit_name": toolkit,
            "config": config,
            "scope": "principal",
        }
        for toolkit, config in configs.items()
    ]


async def write_read_and_call_imported(session: ClientSession, root: Path) -> None:
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert {"filesystem__read_file", "filesystem__write_file", WHOAMI} <= names
    written = await session.call_tool("filesystem__write_file", {"path": "py.txt", "content": "ü"})
    assert not written.is_error, written
    read = await session.call_tool("filesystem__read_file", {"path": "py.txt"})
    assert not read.is_error and _text(read) == "ü"
    assert (root / "py.txt").read_text() == "ü"
    whoami = await session.call_tool(WHOAMI, {})
    assert not whoami.is_error and _text(whoami) == "authorized", whoami
    echoed = await session.call_tool(f"{NAME}__echo_key", {})
    assert echoed.is_error and "withheld" in _text(echoed), echoed
    assert KEY not in echoed.model_dump_json()


def test_the_python_sdk_over_streamable_http(
    served_vault: Vault,  # noqa: F811
    served_env: dict[str, str],
    root: Path,
    tmp_path: Path,
) -> None:
    with running_server(served_env, tmp_path / "serve.log") as base:
        server = Server(base, served_vault)
        token = server.token("agent", "py-client")
        opened = server.post(token, {"type": "handshake/req", "capabilities": ["toolkits"]})
        for configure in configure_requests(root):
            answer = server.post(token, configure, opened.json()["session_id"])
            assert answer.json()["status"] == "ok", answer.text

        async def run() -> None:
            async with mcp_over_http(base, token) as session:
                await write_read_and_call_imported(session, root)

        asyncio.run(run())
    assert KEY not in (tmp_path / "serve.log").read_text()


def test_the_python_sdk_over_stdio_as_the_local_principal(
    served_vault: Vault,  # noqa: F811
    served_env: dict[str, str],
    root: Path,
) -> None:
    conn, _ = hello(served_vault)  # the local principal, as `toolkit-vault mcp` runs
    for configure in configure_requests(root):
        assert send(conn, configure)[0]["status"] == "ok"

    async def run() -> None:
        params = StdioServerParameters(command=CLI, args=["mcp"], env=served_env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await write_read_and_call_imported(session, root)

    asyncio.run(run())
