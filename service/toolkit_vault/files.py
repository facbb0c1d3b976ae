"""Files the vault writes whole (the home's record, a key file, a backup): a reader sees the
old bytes or the new ones, never a mix, and once the write returns the new ones survive a
crash.

The witness file is not written here: it is rewritten in place under a lock, on purpose
(`store.witness`); it is opened here (`open_private`), as a file the vault rewrites in place
must never be one that someone else can swap or read.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["PrivateFileError", "atomic_writer", "open_private", "write_atomically"]


class PrivateFileError(Exception):
    """A file the vault keeps to itself is not private: the message says why, in words
    that follow the file's path ("is a symlink; refusing to follow it")."""


def open_private(path: Path, flags: int) -> int:
    """A descriptor on `path` (opened with `flags`, never through a symlink), once it proves
    a regular file owned by this user that no one else may read or write. A symlink in the
    vault home could point a write at another file (the key file), and a file others may
    write could be swapped under the vault. Raises FileNotFoundError when there is none,
    PrivateFileError otherwise."""
    try:  # O_NONBLOCK: a FIFO put there must not hang the open
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PrivateFileError("is a symlink; refusing to follow it") from None
        if exc.errno == errno.EISDIR:
            raise PrivateFileError("is not a regular file") from None
        raise PrivateFileError(f"cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PrivateFileError("is not a regular file")
        if info.st_uid != os.getuid():
            raise PrivateFileError("is not owned by the current user")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise PrivateFileError(f"has mode {mode:04o}; it must be 0600 (chmod 600 {path})")
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def atomic_writer(path: Path, mode: int = 0o600) -> Iterator[BinaryIO]:
    """A handle to write `path`'s new bytes into, streamed: a fresh file with no name yet
    (`O_TMPFILE`, `mode` before any byte is written); on a clean exit it is flushed, fsynced
    and given its name (`_give_name`), and the directory fsynced so the name is durable.
    Raises `OSError`; a failed write leaves `path` as it was and nothing behind. A process
    killed before the name is given leaves no file at all: not even a complete one under a
    temporary name, which a person could take for the real thing (a backup that verifies).
    Where the kernel cannot name an unnamed file, the bytes go through a random dot file
    beside `path`, renamed over it, as before."""
    try:
        fd = os.open(path.parent, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR):  # a filesystem without it
            raise
        fd = -1
    if fd < 0:
        with _through_a_dot_file(path, mode) as handle:
            yield handle
    else:
        try:
            with os.fdopen(fd, "w+b", closefd=False) as handle:
                os.fchmod(fd, mode)
                yield handle
                handle.flush()
                os.fsync(fd)
            _give_name(fd, path, mode)
        finally:
            os.close(fd)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@contextmanager
def _through_a_dot_file(path: Path, mode: int) -> Iterator[BinaryIO]:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # 0600
    temp = Path(name)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


_AT_FDCWD, _AT_EMPTY_PATH = -100, 0x1000
_libc = ctypes.CDLL(None, use_errno=True)


def _give_name(fd: int, path: Path, mode: int) -> None:
    """linkat(fd, "", AT_FDCWD, name, AT_EMPTY_PATH): the unnamed file becomes `path`, or,
    over an existing `path`, a random name beside it renamed over `path` at once (linkat
    never replaces). Linux lets a process name a file it opened since 6.10 (before, only
    with CAP_DAC_READ_SEARCH); refused, the bytes are copied into a dot file and renamed."""
    temp = path.parent / f".{path.name}.{os.urandom(6).hex()}"
    try:
        try:
            _link(fd, path)
            return
        except FileExistsError:
            _link(fd, temp)
    except PermissionError:
        with open(temp, "xb", opener=lambda p, f: os.open(p, f, mode)) as copy:
            os.fchmod(copy.fileno(), mode)
            os.copy_file_range(fd, copy.fileno(), os.fstat(fd).st_size, 0)
            os.fsync(copy.fileno())
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _link(fd: int, name: Path) -> None:
    if _libc.linkat(fd, b"", _AT_FDCWD, os.fsencode(name), _AT_EMPTY_PATH) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(name))


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` (`atomic_writer`, all at once)."""
    with atomic_writer(path, mode) as handle:
        handle.write(data)
