"""MCP sessions: each one is an A2E session of its token's principal, reached through an
`A2EConnection` like any transport's (its handshake opens the session; principal-scope
configs apply), plus what MCP adds: the names of the last list, the URL elicitations
waiting for a person, and where to tell the client that its list changed.

A person completing an intake form configures the toolkit in the session; the vault
pushes the session's status event to its connection, on a thread of the store's; that
event, hopped onto the event loop, becomes `notifications/elicitation/complete` (for the
elicitation that asked) and `notifications/tools/list_changed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from toolkit_vault.access.principals import Principal
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.mcp_ends import (
    end_mcp_session,
    mcp_session_ended,
    mcp_session_ended_at_once,
)
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import VaultError
from toolkit_vault.protocol import HandshakeRequest, HandshakeResponse, Message, ToolkitStatusEvent

__all__ = ["ONCE", "McpSession", "McpSessions", "Notify"]

log = logging.getLogger(__name__)

_ENDED = "an operator ended this MCP session; start a new one"
ONCE = "once-"  # the key prefix of a session made for one request (2026-07-28 has none)
Notify = Callable[[str, dict[str, Any] | None], Awaitable[None]]  # method, params


@dataclass
class McpSession:
    """One MCP session: its principal, its A2E connection, and MCP's own state."""

    key: str
    principal: Principal
    connection: A2EConnection
    client: str = ""  # name and version from `initialize`
    last_call: float | None = None
    shown: set[str] = field(default_factory=set)  # toolkits listed though past the limit
    waiting: dict[str, str] = field(default_factory=dict)  # toolkit -> elicitation id
    notify: Notify | None = None  # the client's standalone channel, once it has listed
    last_seen: float = field(default_factory=time.monotonic)  # its last HTTP request
    loop: asyncio.AbstractEventLoop | None = None

    @property
    def principal_id(self) -> str:
        return self.principal.principal_id

    @property
    def a2e_session(self) -> str:
        """Its A2E session's id, "" once ended."""
        return self.connection.session_id or ""

    @property
    def for_one_request(self) -> bool:
        """Made for one stateless request: what it configures must outlive it."""
        return self.key.startswith(ONCE)

    @property
    def session_id(self) -> str:
        session_id = self.connection.session_id
        if session_id is None:
            raise VaultError("the MCP session has ended")
        return session_id

    def pushed(self, event: Message) -> None:
        """A status event of the session (any thread): a toolkit someone waited for is
        configured, so the client hears that its elicitation completed and its list changed."""
        if not isinstance(event, ToolkitStatusEvent) or event.status not in ("ok", "partial"):
            return
        elicitation = self.waiting.pop(event.toolkit_name, None)
        notify, loop = self.notify, self.loop
        if notify is None or loop is None:
            return

        async def tell() -> None:
            with contextlib.suppress(Exception):  # a client gone meanwhile
                if elicitation is not None:
                    await notify(
                        "notifications/elicitation/complete", {"elicitationId": elicitation}
                    )
                await notify("notifications/tools/list_changed", None)

        with contextlib.suppress(RuntimeError):  # the loop has closed
            asyncio.run_coroutine_threadsafe(tell(), loop)


class McpSessions:
    """The MCP sessions of this process, by their MCP session id (HTTP) or one key
    (stdio). Each opens its A2E session on first use, never for another principal."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self._sessions: dict[str, McpSession] = {}
        self._ended: set[str] = set()  # ended by an operator: never opened again
        self._lock = threading.Lock()

    def known(self, key: str, principal: Principal) -> McpSession | None:
        """The session `key` of `principal` if it is open (never waits: for the event loop);
        `VaultError` for a key another principal opened."""
        with self._lock:
            found = self._sessions.get(key)
        if found is not None:
            if found.principal.principal_id != principal.principal_id:
                raise VaultError("unknown session")
            found.principal = principal
        return found

    def session(self, key: str, principal: Principal) -> McpSession:
        """The session `key` of `principal`, opened (in a worker thread) on first use;
        `VaultError` for a key another principal opened."""
        found = self.known(key, principal)
        if found is not None:
            return found
        holder: list[McpSession] = []
        connection = connect(self.vault, principal, lambda event: holder[0].pushed(event))
        made = McpSession(key, principal, connection)
        holder.append(made)
        answer = connection.handle(
            HandshakeRequest(id=str(uuid.uuid4()), capabilities=["toolkits", "tools"])
        )
        if not isinstance(answer, HandshakeResponse):
            connection.close()
            raise VaultError("the session could not be opened")
        with self._lock:
            self._sessions.setdefault(key, made)
            return self._sessions[key]

    def end(self, key: str, *, for_good: bool = False) -> bool:
        """End an MCP session (the client left; `for_good`: an operator ended it, and its
        next message is refused): its calls cancelled."""
        with self._lock:
            found = self._sessions.pop(key, None)
            if for_good and found is not None:
                self._ended.add(key)
        if found is not None:
            found.connection.close()
        return found is not None

    def end_by_operator(self, key: str, actor: str) -> bool:
        """An operator ends the MCP session `key` (a worker thread): audited and kept in the
        chain (`core.mcp_ends`), so whichever replica holds it refuses its next message;
        ended here at once if it is here. Whether it was open here."""
        with self._lock:
            found = self._sessions.get(key)
        end_mcp_session(
            self.vault.store,
            actor,
            key,
            principal_id=found.principal_id if found else None,
            session_id=found.a2e_session if found else None,
            client=found.client if found else "",
        )
        return self.end(key, for_good=True)

    async def refuse_if_ended(self, key: str) -> None:
        """`VaultError` when an operator ended the session `key`, here or on another replica
        (then its connection here ends too: its calls are cancelled)."""
        with self._lock:
            if key in self._ended:
                raise VaultError(_ENDED)
        store = self.vault.store
        ended = mcp_session_ended_at_once(store, key)
        if ended is None:
            ended = await anyio.to_thread.run_sync(mcp_session_ended, store, key)
        if ended:
            self.end(key, for_good=True)
            raise VaultError(_ENDED)

    def touch(self, key: str) -> None:
        """The client of session `key` sent a request (any: a list, a call, its stream)."""
        with self._lock:
            found = self._sessions.get(key)
        if found is not None:
            found.last_seen = time.monotonic()

    def prune(self, idle_seconds: float) -> int:
        """End the sessions no request has named for `idle_seconds` (their client left
        without a DELETE, and the SDK forgot them); how many."""
        cutoff = time.monotonic() - idle_seconds
        with self._lock:
            idle = [key for key, s in self._sessions.items() if s.last_seen < cutoff]
        return sum(self.end(key) for key in idle)

    def open_sessions(self) -> list[McpSession]:
        """Every open MCP session of this process, by principal then client."""
        with self._lock:
            found = list(self._sessions.values())
        return sorted(found, key=lambda s: (s.principal.principal_id, s.client, s.key))

    def called(self, session: McpSession) -> None:
        session.last_call = time.time()
