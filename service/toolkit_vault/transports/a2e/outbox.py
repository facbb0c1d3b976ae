"""A WebSocket's answers and push events, sent in the order they were given, and never a
push to a token that no longer holds."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

from starlette.types import Send

from toolkit_vault.protocol import ErrorMessage, dump_message

__all__ = ["REVOKED", "Outbox"]

REVOKED = "the token is no longer valid"


class Outbox:
    """A WebSocket's answers and push events, sent in the order they were given: in place
    by whoever finds the socket idle (an answer, the common case: no queue, no task
    switch), or behind a send still waiting (a full transport buffer, a push from a worker
    thread), by the one already sending. An answer's sender waits for its turn, so a client
    that stops reading stops being read. A send to a client that left (uvicorn raises
    `ClientDisconnected`, an `OSError`) drops the rest: the loop hears the disconnect.

    An answer follows a message whose token was just checked; a push follows nothing the
    client sent, so each one is checked when its turn comes (`still_valid`: the token as
    the message loop checks it, from the one-second cache or the store). A push whose
    token is no longer valid is not sent: the socket gets the `UNAUTHORIZED` error and
    close code 1008 instead (`refuse`), and nothing after them; `refusal` says why (revoked,
    or when it expired)."""

    def __init__(
        self,
        send: Send,
        still_valid: Callable[[], Awaitable[bool]] | None = None,
        refusal: Callable[[], str] = lambda: REVOKED,
    ) -> None:
        self._send = send
        self._still_valid = still_valid
        self._refusal = refusal
        self._line: deque[tuple[str, bool]] = deque()  # (text, is a push)
        self._sending: asyncio.Future[None] | None = None
        self._gone = False
        self._drains: set[asyncio.Task[None]] = set()

    async def put(self, text: str) -> None:
        self._line.append((text, False))
        while self._line:  # sent in place, or by the send already under way
            if self._sending is None:
                await self._send_line()
            else:
                await asyncio.shield(self._sending)

    def put_nowait(self, text: str) -> None:
        """A push event, sent in its turn if its token still holds then."""
        self._line.append((text, True))
        if self._sending is None:
            task = asyncio.get_running_loop().create_task(self._send_line())
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)

    async def drained(self) -> None:
        """Wait for the line to be sent (or dropped)."""
        while self._drains:
            await asyncio.gather(*self._drains, return_exceptions=True)

    async def refuse(self) -> None:
        """Send the `UNAUTHORIZED` error and close with 1008, once the send under way is
        done; whatever is still in line is dropped."""
        self._line.clear()
        while self._sending is not None:
            await asyncio.shield(self._sending)
        await self._refuse()

    async def _refuse(self) -> None:
        self._line.clear()
        if self._gone:
            return
        self._gone = True
        reason = self._refusal()
        with contextlib.suppress(OSError):
            error = dump_message(ErrorMessage(req_id="", code="UNAUTHORIZED", message=reason))
            await self._send({"type": "websocket.send", "text": error})
            await self._send({"type": "websocket.close", "code": 1008, "reason": reason})

    async def _send_line(self) -> None:
        if self._sending is not None:  # a push scheduled behind a send already under way
            return
        self._sending = asyncio.get_running_loop().create_future()
        try:
            while self._line:
                text, push = self._line.popleft()
                if self._gone:
                    continue
                if push and self._still_valid is not None and not await self._still_valid():
                    await self._refuse()
                    break
                try:
                    await self._send({"type": "websocket.send", "text": text})
                except OSError:  # the client left: the loop hears its disconnect
                    self._gone = True
        finally:
            self._sending.set_result(None)
            self._sending = None
