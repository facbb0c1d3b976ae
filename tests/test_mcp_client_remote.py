"""The MCP client of imported servers (mcp_client/, issue 51) against a remote
streamable-HTTP server of ours (tests/mcp_servers/bearer_server.py) that needs a bearer
token: with it a call works; without it the failure is the distinct `UpstreamUnauthorized`
(the caller marks the OAuth connection for reconnect); a redirect to another origin is
refused before anything reaches that origin; a body over the bound is refused.

The legacy HTTP+SSE transport (server.json remotes of type `sse`) against our SSE server
(tests/mcp_servers/sse_server.py: the SDK's MCPServer behind the same bearer gate) and
npm's `@modelcontextprotocol/server-everything` in its `sse` mode (the TypeScript SDK's
SSE server): the same token handling, a 401 during a call answered at once (not at the
call's deadline), an event over the bound refused and the session ended.
"""

from __future__ import annotations

import http.server
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from http_support import loopback_http
from mcp_support import free_port, our_server, published, start_http_server
from toolkit_vault.mcp_client import (
    RemoteServer,
    UpstreamFailed,
    UpstreamHost,
    UpstreamRefused,
    UpstreamUnauthorized,
)

TOKEN = "tok-remote-9fKq2LwX7vRz"


class _Elsewhere(http.server.BaseHTTPRequestHandler):
    """Another origin: counts what reaches it (nothing should)."""

    hits: ClassVar[list[str]] = []

    def _any(self) -> None:
        self.hits.append(f"{self.command} {self.path} {self.headers.get('authorization')}")
        self.send_response(404)
        self.end_headers()

    do_GET = do_POST = do_DELETE = _any

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[str]:
    with loopback_http(_Elsewhere) as url:
        yield url


@pytest.fixture(scope="module")
def remote(elsewhere: str) -> Iterator[str]:
    port = free_port()
    process = start_http_server(our_server("bearer_server.py", str(port), TOKEN, elsewhere), port)
    yield f"http://127.0.0.1:{port}"
    process.kill()
    process.wait()


def _server(url: str, token: str | None) -> RemoteServer:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return RemoteServer(label="remote", url=url, headers=headers)


def test_with_the_token_tools_are_listed_and_called(host: UpstreamHost, remote: str) -> None:
    handle = host.open(_server(f"{remote}/mcp", TOKEN), timeout=20)
    assert [tool.name for tool in handle.tools] == ["add", "revoke"]
    result = handle.call_tool("add", {"a": 2, "b": 3}, deadline=time.monotonic() + 10)
    assert result["isError"] is False
    assert result["content"][0]["text"] == "5"
    handle.close()
    assert handle.state == "stopped"


def test_without_the_token_the_failure_is_unauthorized(host: UpstreamHost, remote: str) -> None:
    with pytest.raises(UpstreamUnauthorized) as failure:
        host.open(_server(f"{remote}/mcp", None), timeout=20)
    assert failure.value.reason == "unauthorized"


def test_a_wrong_token_is_unauthorized_and_never_shown(host: UpstreamHost, remote: str) -> None:
    with pytest.raises(UpstreamUnauthorized) as failure:
        host.open(_server(f"{remote}/mcp", "tok-wrong-4d8s9f0g"), timeout=20)
    assert "tok-wrong-4d8s9f0g" not in str(failure.value)
    assert "tok-wrong-4d8s9f0g" not in repr(_server(f"{remote}/mcp", "tok-wrong-4d8s9f0g"))


def test_a_redirect_to_another_origin_is_refused(
    host: UpstreamHost, remote: str, elsewhere: str
) -> None:
    _Elsewhere.hits.clear()
    with pytest.raises(UpstreamRefused) as failure:
        host.open(_server(f"{remote}/elsewhere", TOKEN), timeout=20)
    assert "another origin" in str(failure.value)
    assert _Elsewhere.hits == []  # the token never went there


def test_a_response_over_the_bound_is_refused(host: UpstreamHost, remote: str) -> None:
    with pytest.raises(UpstreamRefused) as failure:
        host.open(_server(f"{remote}/big", TOKEN), timeout=20)
    assert "larger than its bound" in str(failure.value)


def test_an_unreachable_server_fails_at_once(host: UpstreamHost) -> None:
    started = time.monotonic()
    with pytest.raises(UpstreamFailed):
        host.open(_server(f"http://127.0.0.1:{free_port()}/mcp", TOKEN), timeout=20)
    assert time.monotonic() - started < 10


SSE_TOKEN = "tok-sse-remote-Vb3nQ8wZ1k"


@pytest.fixture
def sse_remote() -> Iterator[str]:
    port = free_port()
    process = start_http_server(our_server("sse_server.py", str(port), SSE_TOKEN), port)
    yield f"http://127.0.0.1:{port}/sse"
    process.kill()
    process.wait()


def _sse(url: str, token: str | None) -> RemoteServer:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return RemoteServer(label="sse", url=url, headers=headers, transport="sse")


def test_an_sse_server_is_listed_and_called_with_the_token(
    host: UpstreamHost, sse_remote: str
) -> None:
    handle = host.open(_sse(sse_remote, SSE_TOKEN), timeout=20)
    assert [tool.name for tool in handle.tools] == ["add", "revoke", "big", "change_tools"]
    result = handle.call_tool("add", {"a": 2, "b": 3}, deadline=time.monotonic() + 10)
    assert result["isError"] is False and result["content"][0]["text"] == "5"
    handle.close()
    assert handle.state == "stopped"


def test_an_sse_server_without_the_token_is_unauthorized(
    host: UpstreamHost, sse_remote: str
) -> None:
    for token in (None, "tok-sse-wrong-7hG2"):
        with pytest.raises(UpstreamUnauthorized) as failure:
            host.open(_sse(sse_remote, token), timeout=20)
        assert "tok-sse-wrong" not in str(failure.value)


def test_a_401_during_an_sse_call_is_unauthorized_at_once(
    host: UpstreamHost, sse_remote: str
) -> None:
    """The SDK's writer ends at the first refused POST (every later request would wait for
    its deadline); the guard answers that request's error instead, and the next one's."""
    handle = host.open(_sse(sse_remote, SSE_TOKEN), timeout=20)
    assert handle.call_tool("revoke", {}, deadline=time.monotonic() + 10)["isError"] is False
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(UpstreamUnauthorized):
            handle.call_tool("add", {"a": 1, "b": 1}, deadline=time.monotonic() + 30)
        assert time.monotonic() - started < 5


def test_an_sse_event_over_the_bound_is_refused_and_ends_the_session(
    host: UpstreamHost, sse_remote: str
) -> None:
    handle = host.open(_sse(sse_remote, SSE_TOKEN), timeout=20)
    with pytest.raises(UpstreamRefused) as failure:
        handle.call_tool("big", {}, deadline=time.monotonic() + 10)
    assert "larger than its bound" in str(failure.value)
    ends = time.monotonic() + 5
    while handle.state != "failed" and time.monotonic() < ends:
        time.sleep(0.02)
    assert handle.state == "failed"  # the stream is gone: not a session to call again


def test_an_sse_redirect_to_another_origin_is_refused(
    host: UpstreamHost, remote: str, elsewhere: str
) -> None:
    _Elsewhere.hits.clear()
    with pytest.raises(UpstreamRefused):
        host.open(_sse(f"{remote}/elsewhere", TOKEN), timeout=20)
    assert _Elsewhere.hits == []


def test_an_sse_endpoint_on_another_origin_gets_no_message(
    host: UpstreamHost, elsewhere: str
) -> None:
    """A stream whose `endpoint` event names another origin: refused at once, before any
    message (and the headers on it) is POSTed there."""

    class Foreign(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(f"event: endpoint\ndata: {elsewhere}/messages/\n\n".encode())
            self.wfile.flush()
            time.sleep(1)

        def log_message(self, *args: object) -> None:
            pass

    _Elsewhere.hits.clear()
    started = time.monotonic()
    with loopback_http(Foreign) as foreign, pytest.raises(UpstreamRefused):
        host.open(_sse(f"{foreign}/sse", TOKEN), timeout=20)
    assert time.monotonic() - started < 5  # not a wait for the start's deadline
    assert _Elsewhere.hits == []


@pytest.fixture
def everything_sse(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """npm's server-everything in its `sse` mode (it takes no token), on PORT."""
    port = free_port()
    monkeypatch.setenv("PORT", str(port))
    process = start_http_server([*published("server-everything"), "sse"], port)
    yield f"http://127.0.0.1:{port}/sse"
    process.kill()
    process.wait()


def test_a_published_sse_server_is_listed_and_called(
    host: UpstreamHost, everything_sse: str
) -> None:
    handle = host.open(_sse(everything_sse, None), timeout=30)
    assert "echo" in {tool.name for tool in handle.tools}
    result = handle.call_tool("echo", {"message": "over sse"}, deadline=time.monotonic() + 10)
    assert result["content"][0]["text"] == "Echo: over sse"
    handle.close()
    assert handle.state == "stopped"
