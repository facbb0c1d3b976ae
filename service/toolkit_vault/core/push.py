"""Push routing: which connections of this process hear a status event.

A session's connections (`SessionListener`) attach and detach here. `deliver` gives an
event to every connection of its session in this process; an event of a principal scope
goes to the vault's `on_principal_scope` callback instead (given at construction: the
vault resolves that principal's sessions again, which needs the instances and the store
this router knows nothing of). `publish` delivers here and, when a relay is set, to the
other replicas (`transports.relay`, started after the vault on PostgreSQL).

May import: protocol, access (the principal type), store (scope names).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from toolkit_vault.access.principals import Principal
from toolkit_vault.protocol import Message, ToolkitStatusEvent
from toolkit_vault.store.scopes import principal_of

__all__ = ["PushRouter", "SessionListener"]


class SessionListener(Protocol):
    """A session's connection as the vault sees it (`spec_plugin.VaultToolkitPlugin`): who
    it is, whether it has a push channel, and where its status events go."""

    principal: Principal
    pushes: bool

    def emit_event(self, event: Message) -> None: ...


class PushRouter:
    """The connections attached in this process, by session."""

    def __init__(self, on_principal_scope: Callable[[str, str], None]) -> None:
        """`on_principal_scope(principal_id, toolkit_name)`: a principal's config of a
        toolkit changed (an event of its scope arrived, from here or relayed)."""
        self._on_principal_scope = on_principal_scope
        self.listeners: dict[str, set[SessionListener]] = {}  # session -> its connections
        self.relay: Callable[[ToolkitStatusEvent], None] | None = None
        self._lock = threading.Lock()

    def attach(self, session_id: str, plugin: SessionListener) -> None:
        with self._lock:
            self.listeners.setdefault(session_id, set()).add(plugin)

    def detach(self, session_id: str, plugin: SessionListener) -> None:
        with self._lock:
            plugins = self.listeners.get(session_id, set())
            plugins.discard(plugin)
            if not plugins:
                self.listeners.pop(session_id, None)

    def of(self, session_id: str) -> list[SessionListener]:
        """The session's connections here."""
        with self._lock:
            return list(self.listeners.get(session_id, ()))

    def has(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self.listeners

    def sessions(self) -> dict[str, str]:
        """session -> its principal, for every session with a connection here."""
        with self._lock:
            return {
                session_id: next(iter(plugins)).principal.principal_id
                for session_id, plugins in self.listeners.items()
            }

    def pushing_sessions(self, principal_id: str) -> list[str]:
        """The principal's sessions with a connection here that has a push channel."""
        with self._lock:
            return sorted(
                session_id
                for session_id, plugins in self.listeners.items()
                if any(p.pushes and p.principal.principal_id == principal_id for p in plugins)
            )

    def publish(self, event: ToolkitStatusEvent) -> None:
        """Deliver a status event here, and to the other replicas when a relay is set."""
        self.deliver(event)
        if self.relay is not None:
            self.relay(event)

    def deliver(self, event: ToolkitStatusEvent) -> None:
        """Deliver a status event to every connection of its session in this process; one
        of a principal scope (from here or, relayed, from another replica) makes that
        principal's sessions here resolve its toolkit again."""
        principal_id = principal_of(event.session_id)
        if principal_id is not None:
            self._on_principal_scope(principal_id, event.toolkit_name)
            return
        for plugin in self.of(event.session_id):
            plugin.emit_event(event)
