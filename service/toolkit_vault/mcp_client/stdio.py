"""The stdio transport for a local server: the process the sandbox prepared (a `Launch`:
its argv, already wrapped, and its clean environment), started in its own process group,
speaking newline-delimited JSON-RPC on stdin and stdout, its stderr into the vault's log.

Ours rather than the SDK's `stdio_client`, for three things that one does not do: the
environment is exactly the launch's (the SDK's merges the vault's HOME, PATH and USER
over it); stderr is captured and redacted (the SDK's passes it to a file); and a stop ends
the whole process group within a second (the SDK's waits up to four, polite to the
server, while a purge must be final at once). A line from the server is bounded too: a
server that never ends a line cannot grow the vault's memory.
"""

from __future__ import annotations

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
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from .errors import UpstreamFailed
from .stderr import StderrSink

__all__ = ["MAX_MESSAGE_BYTES", "Launch", "StdioProcess", "open_stdio"]

MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # one JSON-RPC line from the server
_STDIN_GRACE = 0.2  # after stdin closes, before the group is killed
_REAP_WAIT = 0.6  # for the kernel to take a killed process


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
    read: MemoryObjectReceiveStream[SessionMessage | Exception]
    write: MemoryObjectSendStream[SessionMessage]


@contextlib.asynccontextmanager
async def open_stdio(launch: Launch, stderr: StderrSink) -> AsyncIterator[StdioProcess]:
    """Start the launch's process and bridge its pipes to a session's streams; on exit,
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
    to_session, read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_read_stdout, process, to_session)
            group.start_soon(_write_stdin, process, from_session)
            assert process.stderr is not None
            group.start_soon(stderr.drain, process.stderr)
            try:
                yield StdioProcess(process, read, write)
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process)
                group.cancel_scope.cancel()
    finally:
        for stream in (read, write, to_session, from_session):
            stream.close()


async def _read_stdout(
    process: anyio.abc.Process, to_session: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    """The server's stdout, one JSON-RPC message a line; a line over the bound ends the
    session (the stream closes, so every waiting request fails)."""
    assert process.stdout is not None
    buffer = b""
    async with to_session:
        try:
            async for chunk in process.stdout:
                buffer += chunk
                while (cut := buffer.find(b"\n")) >= 0:
                    line, buffer = buffer[:cut], buffer[cut + 1 :]
                    if line.strip():
                        await to_session.send(_parse(line))
                if len(buffer) > MAX_MESSAGE_BYTES:
                    return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            return


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError:
        return UpstreamFailed("the server wrote a line that is not a JSON-RPC message")


async def _write_stdin(
    process: anyio.abc.Process, from_session: MemoryObjectReceiveStream[SessionMessage]
) -> None:
    """The session's messages to the server's stdin, one line each; those already waiting
    go in one write (calls from many threads come in bursts: one write, and one wake-up
    of the server, for the burst rather than one a call)."""
    assert process.stdin is not None
    try:
        async with from_session:
            async for message in from_session:
                lines, ended = [_line(message)], False
                while True:
                    try:
                        lines.append(_line(from_session.receive_nowait()))
                    except anyio.WouldBlock:
                        break
                    except anyio.EndOfStream:
                        ended = True
                        break
                await process.stdin.send(b"".join(lines))
                if ended:
                    return
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        return


def _line(message: SessionMessage) -> bytes:
    return message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin (MCP's polite stop), give the server a moment, then SIGKILL its whole
    process group, whether or not the leader has exited: children it spawned (`npx` starts
    `node`) are in the group and die with it. Bounded: well within a second."""
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        if process.stdin is not None:
            await process.stdin.aclose()
    with anyio.move_on_after(_STDIN_GRACE):
        await process.wait()
    _kill_group(process.pid)
    with anyio.move_on_after(_REAP_WAIT):
        await process.wait()


def _kill_group(pgid: int) -> None:
    """SIGKILL every process in the group (started with a session of its own, so its
    group id is the leader's pid; the kernel keeps that id from reuse while any member
    lives)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
