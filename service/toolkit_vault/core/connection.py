"""One transport connection speaking A2E: it parses raw messages, enforces the handshake
and capability gating (`toolkits`, `tools`), and turns every failure into a well-formed
`error` message. Every transport (HTTP, WebSocket, stdio) is a shell over it.

It holds its tool calls in flight by their request ids, so that `tool/cancel/req` and
the connection closing cancel them. A transport may handle a `tool/call/req` on a thread
of its own while the connection's other messages go on (`handle` is safe for that).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.spec_plugin import VaultToolkitPlugin
from toolkit_vault.core.vault import CAPABILITIES, Mark, Vault
from toolkit_vault.errors import PrincipalEnded, VaultError
from toolkit_vault.plugin import PushCallback
from toolkit_vault.protocol import (
    MAX_MESSAGE_BYTES,
    ErrorCode,
    ErrorMessage,
    HandshakeRequest,
    HandshakeResponse,
    InvalidMessage,
    Message,
    ToolCallRequest,
    ToolCancelRequest,
    ToolCancelResponse,
    ToolListRequest,
    dump_message,
    parse_message,
)
from toolkit_vault.store.writer import Write, deferring
from toolkit_vault.tools.calls import CALL_ENDS, Cancellation
from toolkit_vault.tools.refusals import CallRefused

__all__ = ["CALLS_IN_FLIGHT", "TOOLS_MESSAGES", "A2EConnection", "Reply", "connect", "read_request"]

TOOLS_MESSAGES = (ToolListRequest, ToolCallRequest, ToolCancelRequest)  # the `tools` capability
CALLS_IN_FLIGHT = 32  # a connection's tool calls running at once; more are refused `busy`

log = logging.getLogger(__name__)


def connect(vault: Vault, principal: Principal, push: PushCallback | None = None) -> A2EConnection:
    """A new connection of `principal` to `vault`; `push` receives the events it is sent
    outside a response (a WebSocket, stdio), None where there is nowhere to push (HTTP)."""
    return A2EConnection(vault, principal, push)


class A2EConnection:
    """One transport connection: bound to one session after a successful handshake."""

    def __init__(self, vault: Vault, principal: Principal, push: PushCallback | None) -> None:
        self.vault = vault
        self.principal = principal
        self._push = push
        self._outbox: list[Message] | None = None
        self._outbox_lock = threading.Lock()
        self.plugin: VaultToolkitPlugin | None = None
        self._granted: tuple[str, ...] | None = None  # None: bound without a handshake (`bind`)
        self._calls: dict[str, Cancellation] = {}  # tool calls in flight, by request id
        self._expected: dict[str, Cancellation] = {}  # calls read, their thread not yet run
        self._calls_lock = threading.Lock()

    @property
    def session_id(self) -> str | None:
        return self.plugin.session_id if self.plugin else None

    @property
    def capabilities(self) -> tuple[str, ...]:
        """What the handshake granted; a connection `bind` tied to a session has them all."""
        if self.plugin is None:
            return ()
        return CAPABILITIES if self._granted is None else self._granted

    def _deliver(self, event: Message) -> None:
        # Events may come from other threads (another connection, a toolkit's own thread):
        # one lock decides whether an event follows the response or is pushed at once.
        with self._outbox_lock:
            if self._outbox is not None:
                self._outbox.append(event)
                return
        if self._push is not None:
            self._push(event)

    def handle_raw(self, raw: str | bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> list[str]:
        """One inbound message in; the response, then any events it caused, out (JSON)."""
        return self.respond(read_request(raw, max_bytes))

    def respond(self, request: Message) -> list[str]:
        """`read_request`'s result in; the response, then any events it caused, out (JSON)."""
        return self.start(request, leave_writes=False).lines()

    def start(self, request: Message, *, events: bool = True, leave_writes: bool = True) -> Reply:
        """`respond`, for a transport on an event loop, called in a worker thread: the write
        the message makes may be left committing (`Reply.writes`; SQLite's writer thread
        commits it with others), so that no worker thread sits out the commit; once those
        are settled, `Reply.lines` is what to send. `events=False` (HTTP, which has nowhere
        to push) leaves out the events it causes and the connection's outbox alone, as a
        tool call does (it causes none, and may run beside the connection's other
        messages: events meanwhile are pushed as they come)."""
        events = events and not isinstance(request, ToolCallRequest)
        if events:
            self._outbox = []
        try:
            with deferring(leave_writes) as left:
                response = request if isinstance(request, ErrorMessage) else self.handle(request)
        except BaseException:
            if events:
                self._caused()
            raise
        return Reply(request, dump_message(response), left, self if events else None)

    def _caused(self) -> list[Message]:
        """Close the outbox `start` opened; the events it collected."""
        with self._outbox_lock:
            caused, self._outbox = self._outbox or [], None
        return caused

    def answer_without_blocking(self, request: Message, mark: Mark | None = None) -> str | None:
        """`handle`'s answer, as JSON, when it needs no wait (a list the service can answer
        from memory, after at most a read that never waits: `Vault.answer_without_blocking`, which
        says what `mark` is), so a transport may give it on its event loop; None: `handle`
        it in a worker thread. Never raises."""
        try:
            if self.plugin is None or isinstance(request, HandshakeRequest | ErrorMessage):
                return None
            needed = "tools" if isinstance(request, ToolListRequest) else "toolkits"
            if needed not in self.capabilities:
                return None
            session_id = self.plugin.session_id
            return self.vault.answer_without_blocking(self.principal, session_id, request, mark)
        except Exception:
            return None  # `handle` answers it, with the error it deserves

    def call(self, request: ToolCallRequest, cancellation: Cancellation) -> Reply:
        """A tool call `start` would answer, with a cancel switch the transport holds too
        (HTTP: the client leaving); its audit record may be left committing."""
        with deferring(True) as left:
            response = self.handle(request, cancellation)
        return Reply(request, dump_message(response), left, None)

    def call_here(self, request: ToolCallRequest, cancellation: Cancellation) -> str:
        """A tool call run whole on one of the engine's threads (`CallEngine.submit`), its
        tool included, while the transport's event loop waits with its deadline and cancel
        switch (`transports.a2e.calling`): its answer, as JSON, once its record is
        committed (the record is the only write a call makes). One hand-over there and one
        back, where a worker thread handing the tool to the engine's made three."""
        return dump_message(self.handle(request, cancellation, here=True))

    def end_call(
        self,
        request: ToolCallRequest,
        cancellation: Cancellation,
        session_id: str | None,
        refusal: CallRefused,
        started: float,
    ) -> str:
        """The answer of a call `call_here` runs that its waiter ended first (`timeout`,
        `cancelled`), as JSON, once its record is committed."""
        with self._calls_lock:
            if self._calls.get(request.id) is cancellation:
                del self._calls[request.id]
            if self._expected.get(request.id) is cancellation:
                del self._expected[request.id]
        try:
            if session_id is not None:
                self.vault.end_call(self.principal, session_id, request, refusal, started)
            raise refusal
        except Exception as exc:
            return dump_message(_failed(request, exc))

    def handle(
        self, request: Message, cancellation: Cancellation | None = None, *, here: bool = False
    ) -> Message:
        try:
            if isinstance(request, HandshakeRequest):
                return self._handshake(request)
            needed = "tools" if isinstance(request, TOOLS_MESSAGES) else "toolkits"
            if self.plugin is None or needed not in self.capabilities:
                return _error(
                    request.id, "CAPABILITY_NOT_NEGOTIATED", f"handshake granting {needed} first"
                )
            if isinstance(request, ToolListRequest):
                return self.vault.list_tools(self.principal, self.plugin.session_id, request)
            if isinstance(request, ToolCallRequest):
                call = cancellation or Cancellation()
                return self._call(self.plugin.session_id, request, call, here)
            if isinstance(request, ToolCancelRequest):
                return self._cancel(request)
            return self.plugin.handle(request)
        except Exception as exc:
            return _failed(request, exc)

    def expect_call(self, request: ToolCallRequest) -> Cancellation:
        """The cancel switch of a call, registered as its message is read (a transport's
        reader, before the call's thread starts), so that a `tool/cancel/req` read after it
        finds the call however late that thread runs; `call` it with this switch."""
        with self._calls_lock:
            return self._expected.setdefault(request.id, Cancellation())

    def _call(
        self,
        session_id: str,
        request: ToolCallRequest,
        cancellation: Cancellation,
        here: bool = False,
    ) -> Message:
        """Run a tool call, cancellable by its id while it runs (`here`: `call_here`)."""
        with self._calls_lock:
            if self._expected.get(request.id) is cancellation:
                del self._expected[request.id]
            if request.id in self._calls:
                return _error(request.id, "INVALID_MESSAGE", "a call with this id is in flight")
            busy = len(self._calls) >= CALLS_IN_FLIGHT
            if not busy:
                self._calls[request.id] = cancellation
            if self.plugin is None:  # closed meanwhile
                cancellation.cancel()
        if busy:
            refusal = CallRefused("busy", f"at most {CALLS_IN_FLIGHT} calls in flight at once")
            if not cancellation.end(CALL_ENDS):
                raise refusal  # its waiter answered it, and recorded it
            self.vault.refuse_call(self.principal, session_id, request, refusal)
        try:
            return self.vault.call_tool(
                self.principal, session_id, request, cancellation, here=here
            )
        finally:
            with self._calls_lock:
                if self._calls.get(request.id) is cancellation:
                    del self._calls[request.id]

    def _cancel(self, request: ToolCancelRequest) -> Message:
        with self._calls_lock:
            call = self._calls.get(request.call_id) or self._expected.get(request.call_id)
        if call is not None:
            call.cancel()
        return ToolCancelResponse(
            req_id=request.id, call_id=request.call_id, cancelled=call is not None
        )

    def cancel_calls(self) -> None:
        """Cancel every call in flight on this connection (it is closing)."""
        with self._calls_lock:
            calls = [*self._calls.values(), *self._expected.values()]
        for call in calls:
            call.cancel()

    def _handshake(self, request: HandshakeRequest) -> Message:
        if self.plugin is not None:
            return _error(request.id, "INVALID_MESSAGE", "this connection already has a session")
        granted = [c for c in CAPABILITIES if c in request.capabilities]
        if not granted:
            return _error(
                request.id, "CAPABILITY_NOT_NEGOTIATED", "no supported capability requested"
            )
        session_id, events = self.vault.open_session(self.principal, request.session_id)
        plugin = VaultToolkitPlugin(self.vault, self.principal, session_id)
        self.plugin, self._granted = plugin, tuple(granted)
        if "toolkits" in granted:  # status events belong to the toolkits capability
            plugin.set_push_callback(self._deliver)
            plugin.pushes = self._push is not None
            self.vault.attach(session_id, plugin)
            for event in events:
                self._deliver(event)
        return HandshakeResponse(req_id=request.id, session_id=session_id, capabilities=granted)

    def bind(self, session_id: str) -> None:
        """Bind a one-shot connection (HTTP) to one of its principal's sessions, no push."""
        self.vault.open_session(self.principal, session_id)
        self.plugin = VaultToolkitPlugin(self.vault, self.principal, session_id)

    def unsubscribe(self) -> None:
        """Stay bound but receive no more events (HTTP: there is nowhere to push them)."""
        if self.plugin is not None:
            self.vault.detach(self.plugin.session_id, self.plugin)

    def close(self) -> None:
        self.unsubscribe()
        with self._calls_lock:
            self.plugin = None
        self.cancel_calls()


class Reply:
    """What `A2EConnection.start` answers: the response (as JSON), the writes it made that may
    still be committing, and (`connection`) where the events it caused are collected."""

    __slots__ = ("_connection", "_line", "_request", "writes")

    def __init__(
        self, request: Message, line: str, writes: list[Write], connection: A2EConnection | None
    ) -> None:
        self._request, self._line, self.writes, self._connection = request, line, writes, connection

    @classmethod
    def of(cls, request: Message, response: Message) -> Reply:
        """A reply with no write pending and no events to collect."""
        return cls(request, dump_message(response), [], None)

    def lines(self) -> list[str]:
        """(Once `writes` are settled.) The response, or the error a write of it ended in,
        then the events it caused."""
        line = self._line
        for write in self.writes:
            if write.error is not None:
                line = dump_message(_failed(self._request, write.error))
                break
        caused = self._connection._caused() if self._connection is not None else []
        return [line, *(dump_message(m) for m in caused)]


def _failed(request: Message, exc: BaseException) -> ErrorMessage:
    """The error that answers `request` when handling it raised `exc`."""
    if isinstance(exc, PrincipalEnded):
        return _error(request.id, "UNAUTHORIZED", exc.message)
    if isinstance(exc, VaultError):
        return _error(request.id, "RUNTIME_ERROR", exc.message, exc.details)
    # a bug must neither end the connection nor echo a value
    log.error("unexpected %s while handling %s", type(exc).__name__, request.type)
    return _error(request.id, "RUNTIME_ERROR", "internal error")


def read_request(raw: str | bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> Message:
    """An inbound message parsed, or the `INVALID_MESSAGE` error that answers it."""
    try:
        return parse_message(raw, max_bytes=max_bytes)
    except InvalidMessage as exc:
        return _error(exc.req_id, "INVALID_MESSAGE", exc.message, exc.details)


def _error(
    req_id: str, code: ErrorCode, message: str, details: list[dict[str, Any]] | None = None
) -> ErrorMessage:
    return ErrorMessage(req_id=req_id, code=code, message=message, details=details or [])
