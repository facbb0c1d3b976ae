"""The HTTP transports for a remote server: the SDK's `streamable_http_client`, or its
`sse_client` for a server that publishes only the legacy HTTP+SSE transport (revision
2024-11-05: one event stream from a GET, each message a POST to the endpoint it names),
over an HTTP client of ours whose transport holds the line on what the server answers.

- A redirect leaves the endpoint's origin (scheme, host and port) never: the headers on a
  request (a bearer token, an API key) were given for that origin only. The SDK refuses
  such redirects too; ours is refused before the SDK sees it, so the refusal does not hang
  on a library's policy, and is reported as ours (`UpstreamRefused`).
- A response body other than an event stream is bounded (`MAX_RESPONSE_BYTES`); a
  streamable-HTTP event stream's events are bounded by the SDK (`max_sse_event_size`).
- A 401 is recorded, so the session can raise `UpstreamUnauthorized` (the caller marks the
  OAuth connection for reconnect) instead of the SDK's generic error for any 4xx.
- A connection failure is answered as a 502 the SDK handles, so the request waiting on it
  fails at once instead of at its deadline.
- Over SSE, a message POST the server refuses (a 401, any 4xx or 5xx, the 502s above) is
  answered to the session as that request's JSON-RPC error, and the SDK's writer is told
  202: its own handling ends the writer on the first failed POST (logged), after which
  every request would wait for its deadline. Its event stream is held here
  (`_EventsBounded`): an event over `MAX_LEGACY_EVENT_BYTES`, or an endpoint on another
  origin, ends it, told apart (the SDK's own checks of both are not, and its refusal of
  such an endpoint leaves the connection waiting for good).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._context_streams import ContextReceiveStream
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.message import SessionMessage

from .errors import UpstreamFailed

__all__ = [
    "MAX_RESPONSE_BYTES",
    "MAX_SSE_EVENT_BYTES",
    "TRANSPORTS",
    "Answered",
    "guarded_client",
    "open_remote",
    "same_origin",
]

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
MAX_SSE_EVENT_BYTES = 8 * 1024 * 1024
MAX_LEGACY_EVENT_BYTES = 1024 * 1024  # the SDK's `sse_client` stops at 1 MiB; this first
_EVENT_ENDS = (b"\r\n\r\n", b"\n\n", b"\r\r")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
TRANSPORTS = frozenset({"streamable-http", "sse"})  # a server.json remote's `type`
Refuse = Callable[[types.RequestId], Awaitable[None]]  # answer a request whose POST failed


@dataclass
class Answered:
    """What the guard saw, for the session to name a failure after the SDK reported it."""

    unauthorized: bool = False
    redirect_refused: bool = False
    oversized: bool = False
    unreachable: bool = False


def same_origin(a: httpx2.URL, b: httpx2.URL) -> bool:
    """Whether two URLs share scheme, host and port (httpx2 normalises a default port)."""
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


class _Bounded(httpx2.AsyncByteStream):
    """A response body that stops at its bound (`StreamClosed`, which the SDK answers with
    a parse error for that one request)."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, answered: Answered) -> None:
        self._inner, self._limit, self._answered = inner, limit, answered

    async def __aiter__(self) -> AsyncIterator[bytes]:
        total = 0
        async for chunk in self._inner:
            total += len(chunk)
            if total > self._limit:
                self._answered.oversized = True
                raise httpx2.StreamClosed()
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _EventsBounded(httpx2.AsyncByteStream):
    """The legacy SSE stream, held to what the session may take from it: every event
    stops at its bound (the bytes since the last blank line), and an `endpoint` event that
    names another origin (where the headers would go with each message) is refused before
    the SDK reads it. Either ends the stream, as does a read that fails, quietly: the SDK's
    reader hands any other failure to a session not yet reading, before the endpoint is
    known, and waits there for good; an ended stream ends the session at once."""

    def __init__(
        self, inner: httpx2.AsyncByteStream, limit: int, answered: Answered, origin: httpx2.URL
    ) -> None:
        self._inner, self._limit, self._answered = inner, limit, answered
        self._origin = origin

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending, tail = 0, b""
        head: bytes | None = b""  # the stream until its endpoint event (then None)
        try:
            async for chunk in self._inner:
                joined = tail + chunk
                ends = [joined.rfind(sep) + len(sep) for sep in _EVENT_ENDS if sep in joined]
                pending = len(joined) - max(ends) if ends else pending + len(chunk)
                if pending > self._limit:
                    self._answered.oversized = True
                    return
                if head is not None:
                    head, endpoint = _endpoint(head + chunk)
                    if endpoint is not None:
                        if not same_origin(self._origin, self._origin.join(endpoint)):
                            self._answered.redirect_refused = True
                            return
                        head = None
                tail = joined[-3:]
                yield chunk
        except httpx2.TransportError:
            self._answered.unreachable = True

    async def aclose(self) -> None:
        await self._inner.aclose()


def _endpoint(head: bytes) -> tuple[bytes, str | None]:
    """The stream's bytes after its last complete event, and the data of its first
    `endpoint` event among the complete ones (None if none yet)."""
    text = head.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    *events, rest = text.split(b"\n\n")
    for event in events:
        kind, data = "message", []
        for line in event.decode("utf-8", "replace").split("\n"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
        if kind == "endpoint":
            return rest, "\n".join(data)
    return rest, None


class _Guard(httpx2.AsyncBaseTransport):
    def __init__(
        self, inner: httpx2.AsyncBaseTransport, answered: Answered, refuse: Refuse | None = None
    ) -> None:
        self._inner, self._answered, self._refuse = inner, answered, refuse

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._answer(request)
        if self._refuse is not None and request.method == "POST" and response.status_code >= 400:
            await response.aclose()
            request_id = _request_id(request)
            if request_id is not None:
                await self._refuse(request_id)
            return httpx2.Response(202, request=request)
        return response

    async def _answer(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx2.TransportError:
            self._answered.unreachable = True
            return httpx2.Response(502, request=request)
        if response.status_code == 401:
            self._answered.unauthorized = True
        if response.status_code in _REDIRECTS and "location" in response.headers:
            target = request.url.join(response.headers["location"])
            if not same_origin(request.url, target):
                self._answered.redirect_refused = True
                await response.aclose()
                return httpx2.Response(502, request=request)
        content_type = response.headers.get("content-type", "")
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        if not content_type.lower().startswith("text/event-stream"):
            response.stream = _Bounded(stream, MAX_RESPONSE_BYTES, self._answered)
        elif self._refuse is not None:  # the legacy SSE transport's stream
            bound = MAX_LEGACY_EVENT_BYTES
            response.stream = _EventsBounded(stream, bound, self._answered, request.url)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _request_id(request: httpx2.Request) -> types.RequestId | None:
    """The JSON-RPC id of a message POST (None for a notification or a response)."""
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    if not isinstance(message, dict) or "method" not in message:
        return None
    found = message.get("id")
    return found if isinstance(found, str | int) and not isinstance(found, bool) else None


def guarded_client(
    headers: Mapping[str, str],
    answered: Answered,
    timeout: httpx2.Timeout | None = None,
    refuse: Refuse | None = None,
) -> httpx2.AsyncClient:
    """An HTTP client for one remote session: the given headers on every request, the
    SDK's timeouts, no redirect followed by httpx2 itself (the SDK follows same-origin
    ones), every answer through `_Guard`. No proxy from the environment: a proxy mount
    would be a transport beside the guard, not under it."""
    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=timeout or httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=_Guard(httpx2.AsyncHTTPTransport(trust_env=False), answered, refuse),
        trust_env=False,
        follow_redirects=False,
    )


@contextlib.asynccontextmanager
async def open_remote(
    url: str, headers: Mapping[str, str], transport: str, answered: Answered
) -> AsyncIterator[tuple[Any, Any]]:
    """The read and write streams of one session with a remote server over `transport`
    (`TRANSPORTS`), every request through `guarded_client` with `headers`."""
    if transport == "sse":
        async with _open_sse(url, headers, answered) as streams:
            yield streams
        return
    if transport != "streamable-http":
        raise ValueError(f"unknown remote transport {transport[:40]!r}")
    async with (
        guarded_client(headers, answered) as client,
        streamable_http_client(
            url, http_client=client, max_sse_event_size=MAX_SSE_EVENT_BYTES
        ) as streams,
    ):
        yield streams


_Envelope = tuple[contextvars.Context, SessionMessage | Exception]


@contextlib.asynccontextmanager
async def _open_sse(
    url: str, headers: Mapping[str, str], answered: Answered
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's `sse_client` over a guarded client, its read stream joined with the
    errors the guard answers for refused POSTs (see the module), each message keeping the
    context it was sent in."""
    joined_send, joined = anyio.create_memory_object_stream[_Envelope](16)

    async def refuse(request_id: types.RequestId) -> None:
        error = types.ErrorData(code=types.INTERNAL_ERROR, message="the server refused the message")
        reply = SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await joined_send.send((contextvars.copy_context(), reply))

    def client(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        return guarded_client(headers or {}, answered, timeout, refuse)

    async with sse_client(
        url,
        headers=dict(headers),
        timeout=MCP_DEFAULT_TIMEOUT,
        sse_read_timeout=MCP_DEFAULT_SSE_READ_TIMEOUT,
        httpx_client_factory=client,
    ) as (read, write):

        async def forward() -> None:
            async with joined_send:
                async for item in read:
                    context = getattr(read, "last_context", None) or contextvars.copy_context()
                    try:
                        await joined_send.send((context, item))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return  # the session is closing
            raise _StreamEnded  # the server ended it, or it broke: the session is over

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(forward)
                try:
                    yield ContextReceiveStream(joined), write
                finally:
                    group.cancel_scope.cancel()
        except BaseExceptionGroup as failed:
            if failed.subgroup(_StreamEnded) is None:
                raise
            raise UpstreamFailed("the server's event stream ended") from None


class _StreamEnded(Exception):
    """The legacy SSE stream ended while the session was open."""
