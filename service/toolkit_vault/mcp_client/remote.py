"""The streamable-HTTP transport for a remote server: the SDK's `streamable_http_client`
over an HTTP client of ours whose transport holds the line on what the server answers.

- A redirect leaves the endpoint's origin (scheme, host and port) never: the headers on a
  request (a bearer token, an API key) were given for that origin only. The SDK refuses
  such redirects too; ours is refused before the SDK sees it, so the refusal does not hang
  on a library's policy, and is reported as ours (`UpstreamRefused`).
- A response body other than an event stream is bounded (`MAX_RESPONSE_BYTES`); an event
  stream's events are bounded by the SDK (`max_sse_event_size`).
- A 401 is recorded, so the session can raise `UpstreamUnauthorized` (the caller marks the
  OAuth connection for reconnect) instead of the SDK's generic error for any 4xx.
- A connection failure is answered as a 502 the SDK handles, so the request waiting on it
  fails at once instead of at its deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

__all__ = ["MAX_RESPONSE_BYTES", "MAX_SSE_EVENT_BYTES", "Answered", "guarded_client", "same_origin"]

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
MAX_SSE_EVENT_BYTES = 8 * 1024 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


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


class _Guard(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, answered: Answered) -> None:
        self._inner, self._answered = inner, answered

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
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
        if not content_type.lower().startswith("text/event-stream"):
            stream = response.stream
            assert isinstance(stream, httpx2.AsyncByteStream)
            response.stream = _Bounded(stream, MAX_RESPONSE_BYTES, self._answered)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def guarded_client(headers: Mapping[str, str], answered: Answered) -> httpx2.AsyncClient:
    """An HTTP client for one remote session: the given headers on every request, the
    SDK's timeouts, no redirect followed by httpx2 itself (the SDK follows same-origin
    ones), every answer through `_Guard`. No proxy from the environment: a proxy mount
    would be a transport beside the guard, not under it."""
    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=_Guard(httpx2.AsyncHTTPTransport(trust_env=False), answered),
        trust_env=False,
        follow_redirects=False,
    )
