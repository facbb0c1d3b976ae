"""The vault as an MCP server, reached by a client nobody here wrote (the official `mcp`
Python SDK's `ClientSession`), over `/mcp` on a real `serve` and over `toolkit-vault mcp`
(stdio): initialize, list the tools of every toolkit (configured or not) under MCP names,
call `filesystem`'s write then read; a call of an unconfigured toolkit asks a person
through URL elicitation whose url is the intake link, the form is filled over plain HTTP,
then the client hears `notifications/elicitation/complete` and `tools/list_changed` and
the same call succeeds; a client without elicitation gets the link in an `isError` result;
no token, or a revoked one, is refused (401 with `WWW-Authenticate`) on its next message;
a result carrying the secret reaches no client."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from test_http import CANARY, Server, running_server
from test_stdio import CLI
from test_tool_calls_transports import CALLING, _noted, tool_env  # noqa: F401 (a fixture)
from toolkit_vault.access.principals import revoke
from toolkit_vault.core.vault import Vault

pytestmark = pytest.mark.one_database


@pytest.fixture
def server(vault: Vault, tool_env: dict[str, str], tmp_path: Path) -> Iterator[Server]:  # noqa: F811
    with running_server(tool_env, tmp_path / "serve.log") as base:
        yield Server(base, vault)


class Heard:
    """What the server told the client outside answers."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.changed = asyncio.Event()

    async def __call__(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if method:
            self.methods.append(method)
            if method == "notifications/tools/list_changed":
                self.changed.set()


async def _accept(_ctx: Any, _params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept")


@asynccontextmanager
async def mcp_over_http(
    base: str, token: str, heard: Heard | None = None, elicits: bool = True
) -> AsyncIterator[ClientSession]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(base + "/mcp", http_client=http) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(
            read,
            write,
            elicitation_callback=_accept if elicits else None,
            message_handler=heard,
        ) as session:
            await session.initialize()
            yield session


def _text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def _fill_intake(base: str, url: str, root: Path) -> None:
    """A person opens the link and submits the form (plain HTTP, the console's own page)."""
    with httpx.Client(timeout=30) as client:
        page = client.get(url)
        assert page.status_code == 200, page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        form = {"csrf": csrf.group(1), "link": url.partition("?link=")[2], "/root_dir": str(root)}
        # its cookie is `Secure`: a browser sends it to a loopback origin, httpx does not
        cookie = {"Cookie": f"tkv_csrf={page.cookies['tkv_csrf']}"}
        done = client.post(base + "/console/intake", data=form, headers=cookie)
        assert done.status_code == 200, done.text


@pytest.fixture
def root(tmp_path: Path) -> Path:
    made = tmp_path / "root"
    made.mkdir()
    return made


def test_an_sdk_client_lists_calls_and_is_asked_through_the_intake_page(
    server: Server, root: Path
) -> None:
    token = server.token("agent", "mcp-caller")
    heard = Heard()

    async def run() -> None:
        async with mcp_over_http(server.base, token, heard) as session:
            names = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert {"filesystem__read_file", "filesystem__write_file"} <= set(names)
            assert names["filesystem__write_file"].input_schema["required"] == ["path", "content"]
            assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name) for name in names)
            with pytest.raises(MCPError) as asked:
                await session.call_tool("filesystem__read_file", {"path": "a.txt"})
            assert asked.value.error.code == types.URL_ELICITATION_REQUIRED
            (elicitation,) = asked.value.error.data["elicitations"]
            assert elicitation["mode"] == "url"
            assert elicitation["url"].startswith(server.base + "/console/intake?link=")
            await asyncio.to_thread(_fill_intake, server.base, elicitation["url"], root)
            await asyncio.wait_for(heard.changed.wait(), 10)
            assert "notifications/elicitation/complete" in heard.methods
            written = await session.call_tool(
                "filesystem__write_file", {"path": "dir/a.txt", "content": "héllo"}
            )
            assert not written.is_error, _text(written)
            read = await session.call_tool("filesystem__read_file", {"path": "dir/a.txt"})
            assert (read.is_error, _text(read)) == (False, "héllo")
            invalid = await session.call_tool("filesystem__write_file", {"path": "b.txt"})
            assert invalid.is_error and "invalid_arguments" in _text(invalid)
            assert not (root / "b.txt").exists()

    asyncio.run(run())


def test_a_stateless_2026_client_is_asked_by_input_required_and_retries(
    server: Server, root: Path
) -> None:
    """2026-07-28 has no sessions: the link configures the principal, the call is answered
    with an `InputRequiredResult` carrying the url-mode request, the SDK's client asks
    the person (here: the form filled over HTTP) and calls again."""
    token = server.token("agent", "mcp-2026")
    asked: list[str] = []

    async def person(_ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.url)
        await asyncio.to_thread(_fill_intake, server.base, params.url, root)
        return types.ElicitResult(action="accept")

    async def run() -> None:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        transport = streamable_http_client(server.base + "/mcp", http_client=http)
        async with http, Client(transport, mode="2026-07-28", elicitation_callback=person) as c:
            (root / "n.txt").write_text("stateless")
            read = await c.call_tool("filesystem__read_file", {"path": "n.txt"})
            assert (read.is_error, _text(read)) == (False, "stateless")

    asyncio.run(run())
    assert len(asked) == 1 and asked[0].startswith(server.base + "/console/intake?link=")


def test_a_client_without_elicitation_gets_the_link_in_an_error_result(server: Server) -> None:
    token = server.token("agent", "mcp-plain")

    async def run() -> None:
        async with mcp_over_http(server.base, token, elicits=False) as session:
            result = await session.call_tool("filesystem__read_file", {"path": "a.txt"})
            assert result.is_error
            assert server.base + "/console/intake?link=" in _text(result)

    asyncio.run(run())


def test_a_withheld_result_reaches_no_client(server: Server) -> None:
    token = server.token("agent", "mcp-leak")
    _configure_calling(server, token)

    async def run() -> None:
        async with mcp_over_http(server.base, token) as session:
            for form in ("plain", "base64", "hex", "percent", "structured"):
                result = await session.call_tool("calling__leak", {"form": form})
                shown = result.model_dump_json()
                assert result.is_error and "withheld" in _text(result), shown
                assert CANARY not in shown

    asyncio.run(run())


def _configure_calling(server: Server, token: str) -> None:
    """`calling` configured for the principal (every session of it), over A2E."""
    hello = server.post(token, {"type": "handshake/req", "capabilities": ["toolkits"]})
    principal_wide = {
        "type": "toolkit/configure/req",
        "toolkit_name": "calling",
        "config": CALLING,
        "scope": "principal",
    }
    answer = server.post(token, principal_wide, hello.json()["session_id"])
    assert answer.json()["status"] == "ok", answer.text


def test_a_call_the_client_cancels_is_cancelled_in_the_vault(
    server: Server, tmp_path: Path
) -> None:
    token = server.token("agent", "mcp-cancel")
    _configure_calling(server, token)
    note = tmp_path / "slow-note"

    async def run() -> None:
        async with mcp_over_http(server.base, token) as session:
            slow = asyncio.ensure_future(
                session.call_tool("calling__slow", {"seconds": 20, "note": str(note)})
            )
            # cancelled once the tool runs (before, there would be nothing to cancel)
            assert await asyncio.to_thread(_noted, note, False) == "started"
            slow.cancel()  # the SDK sends notifications/cancelled
            with pytest.raises(asyncio.CancelledError):
                await slow
            assert await asyncio.to_thread(_noted, note) == "cancelled"  # the session open
            assert (await session.list_tools()).tools  # and going on

    asyncio.run(run())


def _cookie(jar: dict[str, str]) -> dict[str, str]:
    """The console's cookies are `Secure`: a browser sends them to a loopback origin, httpx
    keeps them back, so they go as a header."""
    return {"Cookie": "; ".join(f"{name}={value}" for name, value in jar.items())}


def test_an_operator_sees_the_mcp_sessions_and_ends_one(server: Server) -> None:
    """The console lists the open MCP session (principal, the client's own name), and an
    operator's End refuses its next call."""
    token = server.token("agent", "mcp-watched")
    operator = server.token("operator", "ops")

    def console(action: str = "") -> str:
        with httpx.Client(base_url=server.base, timeout=30) as web:
            page = web.get("/console/")
            jar = {"tkv_csrf": page.cookies["tkv_csrf"]}  # `Secure`: httpx keeps them back
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            signed = web.post(
                "/console/signin",
                data={"csrf": csrf[1], "token": operator},
                headers=_cookie(jar),
            )
            jar |= dict(signed.cookies) | dict(signed.history[0].cookies if signed.history else {})
            listed = web.get("/console/mcp-sessions", headers=_cookie(jar))
            assert listed.status_code == 200, listed.text
            if not action:
                return listed.text
            key = re.search(r'name="key" value="([^"]+)"', listed.text)
            csrf = re.search(r'name="csrf" value="([^"]+)"', listed.text)
            assert key is not None and csrf is not None
            jar |= dict(listed.cookies)
            ended = web.post(
                "/console/mcp-sessions/end",
                data={"csrf": csrf[1], "key": key[1]},
                headers=_cookie(jar),
            )
            assert ended.status_code in (200, 303), ended.text
            return ended.text

    async def run() -> None:
        async with mcp_over_http(server.base, token) as session:
            assert (await session.list_tools()).tools
            shown = await asyncio.to_thread(console)
            assert "mcp-watched" in shown and "mcp " in shown  # the SDK's client name
            await asyncio.to_thread(console, "end")
            with pytest.raises(MCPError):
                await session.list_tools()

    asyncio.run(run())


def test_no_token_or_a_revoked_one_is_refused_on_its_next_message(server: Server) -> None:
    bare = httpx.post(server.base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert bare.status_code == 401 and bare.headers["www-authenticate"].startswith("Bearer")
    token = server.token("agent", "mcp-revoked")

    async def run() -> None:
        async with mcp_over_http(server.base, token) as session:
            assert (await session.list_tools()).tools
            revoke(server.vault.store, "mcp-revoked")
            await asyncio.sleep(1.2)  # the token cache's second
            with pytest.raises(Exception) as refused:  # the transport's HTTP 401
                await asyncio.wait_for(session.list_tools(), 15)
            assert "401" in repr(refused.value) or isinstance(refused.value, MCPError)

    asyncio.run(run())


def test_over_stdio_as_the_local_principal(
    vault: Vault,
    tool_env: dict[str, str],  # noqa: F811
    root: Path,
) -> None:
    async def run() -> None:
        params = StdioServerParameters(command=CLI, args=["mcp"], env=tool_env)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert "filesystem__read_file" in names
            unconfigured = await session.call_tool("filesystem__read_file", {"path": "a"})
            assert unconfigured.is_error and "filesystem" in _text(unconfigured)

    asyncio.run(run())


def test_the_name_of_each_tool_answers_json(server: Server) -> None:
    """tools/list over raw HTTP: what a client without the SDK reads."""
    token = server.token("agent", "mcp-raw")
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    answer = httpx.post(server.base + "/mcp", json=hello, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert "toolkit-vault" in answer.text
    assert json.dumps("2025-06-18") in answer.text
