"""The network path's memory: who a token is, and which sessions an HTTP caller has bound.

`PrincipalCache` answers "who is this bearer token?" with `principals.authenticate` (which
does every check: format, hash lookup, revocation, integrity, expiry) and remembers a positive
answer for at most `max_age` seconds (one). A revocation therefore reaches every process
and replica within a second, with no message between them: each entry is simply believed
no longer than that. In its own process it is learned at once: the store tells the cache
after each write to its principals has ended (`store.principals.watch_principals`), that is
after its commit, and the cache empties. A refusal is never remembered, so a token is refused
exactly as long as the store refuses it. The cache keys on the token's SHA-256, never the
token, and holds at most `size` entries. An entry is never believed past its token's
expiry: from then on the store is asked, which refuses it (`TokenExpired`).

`SharedMarks` lets the lists that arrived together on the event loop share one read of the
store's commit mark, the one read such a list makes.

`SessionBindings` keeps one bound `A2EConnection` per (principal, session) an HTTP caller
has used in this process: the ownership check and the resume (initializing the session's
configured toolkits from the store) happen once, on the handshake or on the first request
naming the session here, instead of on every request.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from toolkit_vault.access.principals import Principal, authenticate
from toolkit_vault.core.connection import A2EConnection, connect
from toolkit_vault.core.vault import Vault
from toolkit_vault.store.principals import watch_principals
from toolkit_vault.store.storage import Store

__all__ = ["PrincipalCache", "SessionBindings", "SharedMarks"]

T = TypeVar("T")


class PrincipalCache:
    def __init__(self, store: Store, max_age: float = 1.0, size: int = 10_000) -> None:
        self.store, self.max_age, self.size = store, max_age, size
        self._entries: OrderedDict[bytes, tuple[float, int, Principal]] = OrderedDict()
        self._generation = 0
        self._lock = threading.Lock()
        watch_principals(store, self.forget)

    def recall(self, token: str) -> Principal | None:
        """The principal remembered for `token` while still believed; None means ask."""
        return self._recall(_key(token))

    def believes(self, token: str, principal: Principal) -> Callable[[], bool]:
        """For a long-lived connection: a check that `token` is still believed to be
        `principal`, as `recall` says, with the token's hash taken once, not per message."""
        key = _key(token)

        def believed() -> bool:
            remembered = self._recall(key)
            return remembered is principal or remembered == principal

        return believed

    def _recall(self, key: bytes) -> Principal | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[1] != self._generation:
                return None
        if time.monotonic() - entry[0] >= self.max_age or entry[2].expired():
            return None  # too old to believe, or its token expired since: ask the store
        return entry[2]

    def authenticate(self, token: str) -> Principal | None:
        """`principals.authenticate`, unless a still-believed answer is remembered."""
        remembered = self.recall(token)
        if remembered is not None:
            return remembered
        key = _key(token)
        with self._lock:
            generation = self._generation
        checked = time.monotonic()  # both taken before the store is read
        principal = authenticate(self.store, token)
        with self._lock:
            if principal is None:
                self._entries.pop(key, None)
                return None
            self._entries[key] = (checked, generation, principal)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return principal

    def forget(self) -> None:
        """Believe nothing remembered so far (a principal may have changed)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()


def _key(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class SharedMarks(Generic[T]):
    """`read()` (`Vault.mark_on_loop`) once for every caller waiting on the event loop.

    A list answered from memory is exact when its mark is read after the list arrived:
    every commit acknowledged before the agent sent it then shows. All callers waiting
    for the pending read arrived before it began (it begins on the loop, after them), so one
    read serves them all: one `PRAGMA data_version` per turn of the loop instead of one per
    list (that statement was a large part of a WebSocket list's CPU under load;
    BENCHMARKS.md), one head read on PostgreSQL. A caller arriving after the read began
    waits for the next one. The value is None when `read` fails (a mark of None means: read
    the store)."""

    def __init__(self, read: Callable[[], Awaitable[T | None]]) -> None:
        self._read = read
        self._waiting: list[asyncio.Future[T | None]] = []
        self._reading: asyncio.Task[None] | None = None

    async def read(self) -> T | None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[T | None] = loop.create_future()
        self._waiting.append(waiter)
        if self._reading is None:
            self._reading = loop.create_task(self._settle())
        return await waiter

    async def _settle(self) -> None:
        try:
            while self._waiting:
                waiting, self._waiting = self._waiting, []
                try:
                    value = await self._read()
                except Exception:
                    value = None
                for waiter in waiting:
                    if not waiter.done():  # a cancelled caller (its client left)
                        waiter.set_result(value)
        finally:
            self._reading = None


class SessionBindings:
    """Bound HTTP connections per (principal, session), the least recently used dropped."""

    def __init__(self, vault: Vault, size: int = 10_000) -> None:
        self.vault, self.size = vault, size
        self._bound: OrderedDict[tuple[str, str], A2EConnection] = OrderedDict()
        self._lock = threading.Lock()

    def connection(self, principal: Principal, session_id: str) -> A2EConnection:
        """The principal's connection bound to `session_id`; binding it checks ownership and
        resumes the session here (raises `UnknownSession` for a session not theirs)."""
        bound = self.bound(principal, session_id)
        if bound is not None:
            return bound
        connection = connect(self.vault, principal)
        connection.bind(session_id)
        self.remember(connection)
        return connection

    def bound(self, principal: Principal, session_id: str) -> A2EConnection | None:
        """The connection bound here to the principal's `session_id`, if any (no I/O)."""
        key = (principal.principal_id, session_id)
        with self._lock:
            bound = self._bound.get(key)
            if bound is not None:
                self._bound.move_to_end(key)
            return bound

    def remember(self, connection: A2EConnection) -> None:
        """Keep a connection bound by a handshake (it receives no push events)."""
        session_id = connection.session_id
        if session_id is None:
            return
        connection.unsubscribe()
        with self._lock:
            self._bound[(connection.principal.principal_id, session_id)] = connection
            while len(self._bound) > self.size:
                self._bound.popitem(last=False)

    def __len__(self) -> int:
        return len(self._bound)
