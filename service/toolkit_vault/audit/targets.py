"""Where an audit device writes: a JSON-lines file, or a stream (syslog is `syslog`'s).

A file is opened for appending (0600 when created) on first use, never through a symbolic
link at its path (O_NOFOLLOW) and only as a regular file this user owns, checked at start
too (`check_file`); a requested reopen (log rotation) makes its next write open the path
again. A target's `send` raises when the lines were not handed over: the device
(`devices.Device`) counts, logs and reports that.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from toolkit_vault.errors import VaultError

__all__ = ["FileTarget", "StreamTarget", "Target", "check_file"]


class Target(Protocol):
    """Where a device writes: `send` raises when the lines were not handed over."""

    name: str

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> None: ...

    def close(self) -> None: ...


def check_file(path: Path) -> None:
    """At start: a device's file, if it exists, is a regular file of this user, not a
    symbolic link (one would send the trail, or a write, where its maker chose)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise VaultError(f"audit device file:{path} cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise VaultError(f"audit device file:{path} is a symbolic link: name the file itself")
    if not stat.S_ISREG(info.st_mode):
        raise VaultError(f"audit device file:{path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise VaultError(f"audit device file:{path} is not owned by this user (uid {os.geteuid()})")


class FileTarget:
    """A JSON-lines file, appended to (O_APPEND: each write lands whole at the end, as one
    `write` when it can), fsynced after each write when `sync` (fail-closed: a line is
    taken once it is on disk). A failed write may leave a torn line: the next one starts
    on a line of its own, so a reader skips one bad line, never merges two."""

    def __init__(self, path: Path, *, sync: bool = False) -> None:
        self.path = path
        self.name = str(path)
        self.sync = sync
        self._fd: int | None = None
        self._torn = False
        self.reopen_requested = False

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> None:
        if self.reopen_requested or self._fd is None:
            self.reopen_requested = False
            self.close()
            self._fd = _open_appending(self.path)
        data = memoryview(b"".join([b"\n"] * self._torn + list(lines)))
        try:
            while data:
                data = data[os.write(self._fd, data) :]
            if self.sync:
                os.fsync(self._fd)
        except OSError:
            self._torn = True
            self.close()  # opened again by the next write (a full disk, a removed directory)
            raise
        self._torn = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _open_appending(path: Path) -> int:
    """The file for appending, created 0600; never through a symbolic link at `path`
    (O_NOFOLLOW: ELOOP), never a FIFO's wait for a reader (O_NONBLOCK), and only a regular
    file of this user."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(path, flags | os.O_NONBLOCK, 0o600)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise PermissionError(errno.EPERM, "not a regular file owned by this user")
    return fd


class StreamTarget:
    """JSON lines on a stream: `serve`'s stdout (a container's log); elsewhere stderr, as
    a command's stdout is its own output."""

    def __init__(self, name: str, stream: IO[bytes]) -> None:
        self.name, self._stream = name, stream

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> None:
        self._stream.write(b"".join(lines))
        self._stream.flush()

    def close(self) -> None:
        pass
