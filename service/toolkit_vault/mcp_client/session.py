"""One session with one upstream MCP server, over stdio (a process the sandbox prepared)
or HTTP (`remote`): started, negotiated in every protocol revision the SDK speaks (its
`server/discover` probe, falling back to `initialize`), its tools listed (every page),
followed when the server says they changed, called with a deadline and cancellation, and
stopped.

The session's transport and `mcp.ClientSession` live in one task (`_live`), which
enters and leaves them (anyio's scopes must be left by the task that entered them); calls
come from other tasks on the same loop. A call that is cancelled or runs past its deadline
is abandoned with MCP's `notifications/cancelled` to the server (the SDK sends it when
the waiting task is cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client._probe import negotiate_auto  # the SDK's own mode="auto" (mcp.Client's)
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost, listen
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from toolkit_vault import __version__

from .descriptions import ToolDescription, describe_tools
from .errors import (
    CallCancelled,
    CallTimedOut,
    UpstreamError,
    UpstreamFailed,
    UpstreamRefused,
    UpstreamUnauthorized,
)
from .remote import Answered, open_remote
from .results import OutputCheck, OutputSchemas, RawResult, tool_result
from .stderr import Redactor, StderrSink
from .stdio import Launch, open_stdio

__all__ = ["CancelFlag", "Progress", "RemoteServer", "StdioServer", "UpstreamSession"]

logger = logging.getLogger(__name__)
Progress = Callable[[float, float | None, str | None], None]  # progress, total, message

MAX_TOOL_PAGES = 100
CANCEL_POLL = 0.02  # how often the flags of calls in flight are looked at
_CLIENT_INFO = types.Implementation(name="toolkit-vault", version=__version__)


@dataclass(frozen=True)
class StdioServer:
    """A local server: the sandbox's launch of it, and the redaction its stderr goes
    through (the caller's: it knows the credentials in the launch's environment)."""

    label: str
    launch: Launch = field(repr=False)
    redact: Redactor = field(repr=False)


@dataclass(frozen=True)
class RemoteServer:
    """A remote server: its endpoint, the headers every request carries (a bearer
    token, an API key: never shown in a repr) and its transport (`remote.TRANSPORTS`)."""

    label: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    transport: str = "streamable-http"


ToolsChanged = Callable[[tuple[ToolDescription, ...]], None]


class CancelFlag(Protocol):
    """A call's cancel switch: a `threading.Event` or an `asyncio.Event`."""

    def is_set(self) -> bool: ...


class UpstreamSession:
    """A live session with one server. `start` connects and lists its tools; `tools` is the
    last list; `call_tool` calls one; `close` stops it (a local server's whole process
    group, within a second). `on_tools_changed` is called, on the loop, with each list
    fetched after the server said its tools changed."""

    def __init__(
        self,
        server: StdioServer | RemoteServer,
        output_check: OutputCheck,
        on_tools_changed: ToolsChanged | None = None,
    ) -> None:
        self.server = server
        self._output_check = output_check
        self.state = "new"  # starting, running, stopped, failed
        self.failure: UpstreamError | None = None
        self.tools: tuple[ToolDescription, ...] = ()
        # of `tools`: a call's structured content checked
        self._outputs = OutputSchemas((), output_check)
        self.pid: int | None = None  # a local server's process (and process group)
        self._on_tools_changed = on_tools_changed
        self._answered = Answered()
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._stale = asyncio.Event()
        self._cancels: dict[anyio.CancelScope, CancelFlag] = {}  # calls in flight, by scope
        self._watched = asyncio.Event()  # set while `_cancels` may hold one
        self._task: asyncio.Task[None] | None = None

    @property
    def protocol_version(self) -> str | None:
        return self._session.protocol_version if self._session is not None else None

    async def start(self, timeout: float) -> tuple[ToolDescription, ...]:
        """Connect, negotiate and list the tools, within `timeout` seconds; on failure the
        server is stopped and the failure raised."""
        self.state = "starting"
        self._task = asyncio.get_running_loop().create_task(self._live())
        try:
            with anyio.fail_after(timeout):
                await self._ready.wait()
        except TimeoutError:
            await self.close()
            self.state, self.failure = (
                "failed",
                UpstreamFailed(f"{self.server.label}: no answer in time"),
            )
        if self.failure is not None:
            await self.close()
            self.state = "failed"
            raise self.failure
        return self.tools

    async def close(self) -> None:
        """Stop the session (and a local server's process group); idempotent."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)
        if self.state != "failed":
            self.state = "stopped"

    async def list_tools(self) -> tuple[ToolDescription, ...]:
        """Fetch the server's tools again (every page)."""
        session = self._live_session()
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                page = await session.list_tools(params=params)
            except MCPError as error:
                raise self._named(error, "tools/list failed") from None
            tools.extend(page.tools)
            if not page.next_cursor or page.next_cursor == cursor:
                break
            cursor = page.next_cursor
        self.tools = described = describe_tools(tools)
        self._outputs = OutputSchemas(described, self._output_check)
        return described

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        deadline: float | None = None,
        cancel: CancelFlag | None = None,
        progress: Progress | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Call one tool: MCP's `CallToolResult` as plain JSON (`content`,
        `structuredContent`, `isError`). `deadline` is a `time.monotonic()` instant;
        `cancel` (a `threading.Event` a worker thread sets, or an `asyncio.Event`) once set
        abandons the call. Either sends the server `notifications/cancelled` and raises
        `CallTimedOut` or `CallCancelled`. With `progress`, the call asks the server for
        progress (a `progressToken`) and hands each `notifications/progress` to it; a
        listener that fails is the listener's. `meta` goes in the request's `_meta` (the
        W3C `traceparent` of the caller's span).

        One cancel scope a call, its flag looked at by the session's one watcher
        (`_watch_cancels`), rather than a task group and a waiting task a call: a call is
        the hot path, and a thread's `threading.Event` cannot wake a task anyway. Sent with
        `send_request` (the SDK's checks of the result against the negotiated revision)
        rather than `call_tool`, whose parse into `CallToolResult`, dumped back to JSON
        here, was work done twice; `results` keeps what `call_tool` checks on top."""
        session = self._live_session()
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise CallTimedOut(f"{self.server.label}: the call's deadline had passed")
        if cancel is not None and cancel.is_set():
            raise CallCancelled(f"{self.server.label}: the call was cancelled")
        result: RawResult | None = None
        scope = anyio.CancelScope(
            deadline=math.inf if remaining is None else anyio.current_time() + remaining
        )
        if cancel is not None:
            self._cancels[scope] = cancel
            self._watched.set()
        try:
            with scope:
                result = await session.send_request(
                    types.CallToolRequest(
                        params=types.CallToolRequestParams(
                            name=name,
                            arguments=dict(arguments),
                            _meta=cast(types.RequestParamsMeta, dict(meta)) if meta else None,
                        )
                    ),
                    RawResult,
                    progress_callback=_relay(progress),
                )
        except MCPError as error:
            raise self._named(error, "the call failed") from None
        except ValidationError:  # not a result of the revision (its text holds the result's)
            raise UpstreamFailed(f"{self.server.label}: the answer is not a tool result") from None
        finally:
            self._cancels.pop(scope, None)
        if scope.cancelled_caught or result is None:
            if cancel is not None and cancel.is_set():
                raise CallCancelled(f"{self.server.label}: the call was cancelled")
            raise CallTimedOut(f"{self.server.label}: the call ran past its deadline")
        return tool_result(self.server.label, name, result.root, self._outputs)

    async def _watch_cancels(self) -> None:
        """The calls' cancel flags, looked at every `CANCEL_POLL` while a call that has one
        is in flight (asleep otherwise): a flag set cancels its call's scope."""
        while True:
            await self._watched.wait()
            await anyio.sleep(CANCEL_POLL)
            for scope, flag in list(self._cancels.items()):
                if flag.is_set():
                    scope.cancel()
            if not self._cancels:
                self._watched.clear()

    def _live_session(self) -> ClientSession:
        if self._session is None or self.state != "running":
            raise UpstreamFailed(f"{self.server.label}: the server is not running")
        return self._session

    def _named(self, error: BaseException, what: str) -> UpstreamError:
        """The error a failure is reported as: what the HTTP guard saw first (the SDK
        reports a 401 or a refused redirect only as a generic error), never the server's
        own message (it may echo a credential)."""
        label = self.server.label
        if self._answered.unauthorized:
            return UpstreamUnauthorized(f"{label}: the server answered 401 (unauthorized)")
        if self._answered.redirect_refused:
            return UpstreamRefused(f"{label}: a redirect to another origin was refused")
        if self._answered.oversized:
            return UpstreamRefused(f"{label}: a response larger than its bound was refused")
        if self._answered.unreachable:
            return UpstreamFailed(f"{label}: the server could not be reached")
        if isinstance(error, MCPError):
            return UpstreamFailed(f"{label}: {what} (error {error.code})")
        return UpstreamFailed(f"{label}: {what}")

    async def _live(self) -> None:
        """The session's one task: open the transport and the SDK session, negotiate,
        list, follow changes until stopped, then leave both (stopping the process)."""
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._open_transport(stack)
                session = ClientSession(
                    read, write, message_handler=self._on_message, client_info=_CLIENT_INFO
                )
                await stack.enter_async_context(session)
                try:
                    await negotiate_auto(session)
                except (MCPError, RuntimeError) as error:
                    raise self._named(error, "the handshake failed") from None
                self._session, self.state = session, "running"
                await self.list_tools()
                self._ready.set()
                async with anyio.create_task_group() as group:
                    group.start_soon(self._follow_changes)
                    group.start_soon(self._listen_for_changes)
                    group.start_soon(self._watch_cancels)
                    await self._stop.wait()
                    group.cancel_scope.cancel()
        except UpstreamError as error:
            self.failure = error
        except Exception as error:  # a transport's own failure: named, never its text
            self.failure = self._named(error, f"the session ended ({type(error).__name__})")
        finally:
            self._session = None
            if self.failure is not None:
                self.state = "failed"
            elif self.state != "new":
                self.state = "stopped"
            self._ready.set()

    async def _open_transport(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        server = self.server
        if isinstance(server, StdioServer):
            process = await stack.enter_async_context(
                open_stdio(server.launch, StderrSink(server.label, server.redact))
            )
            self.pid = process.process.pid
            return process.read, process.write
        return await stack.enter_async_context(
            open_remote(server.url, server.headers, server.transport, self._answered)
        )

    async def _on_message(self, message: Any) -> None:
        """The SDK's notification hook (on its read loop: no request may be awaited here)."""
        if isinstance(message, types.ToolListChangedNotification):
            self._stale.set()

    async def _listen_for_changes(self) -> None:
        """On 2026-07-28, list changes come on a `subscriptions/listen` stream instead."""
        session = self._live_session()
        try:
            async with listen(session, tools_list_changed=True) as events:
                async for _event in events:
                    self._stale.set()
        except (ListenNotSupportedError, SubscriptionLost, MCPError, TimeoutError):
            return  # an older revision (notifications come to `_on_message`), or none

    async def _follow_changes(self) -> None:
        while True:
            await self._stale.wait()
            self._stale.clear()
            try:
                tools = await self.list_tools()
            except UpstreamError as error:
                logger.warning("%s", error.message)
                continue
            if self._on_tools_changed is not None:
                self._on_tools_changed(tools)


def _relay(progress: Progress | None) -> Any:
    """The SDK's progress callback for a call whose caller listens: each notification to
    `progress`, whatever it raises kept from the call (it is the listener's failure)."""
    if progress is None:
        return None

    async def relay(done: float, total: float | None, message: str | None) -> None:
        try:
            progress(done, total, message)
        except Exception as exc:
            logger.warning("a progress listener failed (%s)", type(exc).__name__)

    return relay
