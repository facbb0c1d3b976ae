"""The stdio transport for a local server: the process the sandbox prepared (a `Launch`:
its argv, already wrapped, and its clean environment), started in its own process group,
speaking newline-delimited JSON-RPC on stdin and stdout, its stderr into the vault's log.

Ours rather than the SDK's `stdio_client`, for three things that one does not do: the
environment is exactly the launch's (the SDK's merges the vault's HOME, PATH and USER
over it); stderr is captured and redacted (the SDK's passes it to a file); and a stop ends
the whole process group within a second (the SDK's waits up to four, polite to the
server, while a purge must be final at once). A line from the server is bounded too: a
server that never ends a line cannot grow the vault's memory. The session's streams are
its own (`ServerLines`, `ServerInput`), on asyncio's primitives: every session runs on the
host's asyncio loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.message import SessionMessage

from .errors import UpstreamFailed
from .stderr import StderrSink

__all__ = [
    "MAX_MESSAGE_BYTES",
    "Launch",
    "ServerInput",
    "ServerLines",
    "StdioProcess",
    "open_stdio",
]

MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # one JSON-RPC line from the server
MAX_WAITING_BYTES = 1024 * 1024  # lines to the server waiting for the pipe
_STDIN_GRACE = 0.2  # after stdin closes, before the group is killed
_REAP_WAIT = 0.6  # for the kernel to take a killed process
_DRAIN_WAIT = 0.2  # for its stdout's end, once killed
_PIPE_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)  # as its end


class Launch(Protocol):
    """What the sandbox hands back for a process to start (`sandbox.confine`): the argv
    (the sandbox's wrapper around the server's own), the whole environment, and a working
    directory. The client adds nothing to any of them."""

    @property
    def argv(self) -> Sequence[str]: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def cwd(self) -> str | None: ...


@dataclass
class StdioProcess:
    """A started server: its process (whose pid is its process group) and its streams."""

    process: anyio.abc.Process
    read: ServerLines
    write: ServerInput


@contextlib.asynccontextmanager
async def open_stdio(launch: Launch, stderr: StderrSink) -> AsyncIterator[StdioProcess]:
    """Start the launch's process and hand its pipes to a session as its streams; on exit,
    stop the whole process group (`_stop`)."""
    try:
        process = await anyio.open_process(
            list(launch.argv),
            env=dict(launch.env),
            cwd=launch.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except (OSError, ValueError) as error:
        raise UpstreamFailed("the server could not be started") from error
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    read, write = ServerLines(process.stdout), ServerInput()
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(write.pump, process.stdin)
            group.start_soon(stderr.drain, process.stderr)
            try:
                yield StdioProcess(process, read, write)
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process)
                group.cancel_scope.cancel()
    finally:
        read.close()
        write.close()


class ServerLines:
    """The server's stdout as the session's read stream (the SDK's `ReadStream`: its
    dispatcher's one reader reads it): one JSON-RPC message a line, each chunk's lines
    parsed together. Read by the reader itself rather than by a task of ours handing each
    message over a memory stream: no task switch a message. A line over the bound ends the
    stream (so every waiting request fails), as does the server's end of output."""

    def __init__(self, stdout: anyio.abc.ByteReceiveStream) -> None:
        self._stdout = stdout
        self._buffer = bytearray()  # the start of a line still to end
        self._parsed: collections.deque[SessionMessage | Exception] = collections.deque()
        self._ended = False

    async def receive(self) -> SessionMessage | Exception:
        while not self._parsed:
            if self._ended:
                raise anyio.EndOfStream
            try:
                self._take(await self._stdout.receive())
            except (anyio.EndOfStream, *_PIPE_GONE):
                self._ended = True
        return self._parsed.popleft()

    def _take(self, chunk: bytes) -> None:
        buffer = self._buffer
        start, searched = 0, len(buffer)
        buffer += chunk
        while (cut := buffer.find(b"\n", searched)) >= 0:
            line = buffer[start:cut]
            start = searched = cut + 1
            if line.strip():
                self._parsed.append(_parse(line))
        del buffer[:start]
        if len(buffer) > MAX_MESSAGE_BYTES:
            buffer.clear()
            self._ended = True

    def close(self) -> None:
        self._ended = True
        self._parsed.clear()

    async def aclose(self) -> None:
        self.close()

    def __aiter__(self) -> ServerLines:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> ServerLines:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()


class ServerInput:
    """The session's write stream (the SDK's `WriteStream`) to the server's stdin: `send`
    adds the message's line to those waiting and returns; `pump` writes what waits, in
    one write (calls from many threads come in bursts: one write, and one wake-up of the
    server, for the burst rather than one a call). Once `MAX_WAITING_BYTES` wait, a
    sender waits for the write; once the pipe fails or the session closes, `send` raises
    (the SDK's dispatcher reads that as the connection closed)."""

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        self._size = 0
        self._waiting = asyncio.Event()  # lines wait to be written
        self._room = asyncio.Event()  # fewer than the bound wait
        self._room.set()
        self._ended: type[Exception] | None = None

    async def send(self, item: SessionMessage, /) -> None:
        while not self._room.is_set() and self._ended is None:
            await self._room.wait()
        if self._ended is not None:
            raise self._ended
        line = _line(item)
        self._lines.append(line)
        self._size += len(line)
        if self._size > MAX_WAITING_BYTES:
            self._room.clear()
        self._waiting.set()

    async def pump(self, stdin: anyio.abc.ByteSendStream) -> None:
        """Write the lines as they come, until the pipe fails, or the session has closed
        the stream and what it sent before is written."""
        try:
            while self._ended is None or self._lines:
                await self._waiting.wait()
                self._waiting.clear()
                data, self._lines, self._size = b"".join(self._lines), [], 0
                self._room.set()
                if data:
                    await stdin.send(data)
        except _PIPE_GONE:
            self._ended = anyio.BrokenResourceError
            self._lines, self._size = [], 0
            self._room.set()

    def close(self) -> None:
        """No more sends (those already made are still written)."""
        if self._ended is None:
            self._ended = anyio.ClosedResourceError
        self._waiting.set()
        self._room.set()

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> ServerInput:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()


def _parse(line: bytes | bytearray) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError:
        return UpstreamFailed("the server wrote a line that is not a JSON-RPC message")


def _line(message: SessionMessage) -> bytes:
    return message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin (MCP's polite stop), give the server a moment, then SIGKILL its whole
    process group, whether or not the leader has exited: children it spawned (`npx` starts
    `node`) are in the group and die with it. Bounded: well within a second."""
    with contextlib.suppress(*_PIPE_GONE):
        if process.stdin is not None:
            await process.stdin.aclose()
    with anyio.move_on_after(_STDIN_GRACE):
        await process.wait()
    _kill_group(process.pid)
    with anyio.move_on_after(_REAP_WAIT):
        await process.wait()
    # what no one read (a line over the bound stops the reader) to the pipe's end, so that
    # the process's transport ends too rather than with the loop
    with anyio.move_on_after(_DRAIN_WAIT), contextlib.suppress(*_PIPE_GONE):
        if process.stdout is not None:
            async for _ in process.stdout:
                pass


def _kill_group(pgid: int) -> None:
    """SIGKILL every process in the group (started with a session of its own, so its
    group id is the leader's pid; the kernel keeps that id from reuse while any member
    lives)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
