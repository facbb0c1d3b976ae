"""Worker children: a fresh interpreter running one of the vault's modules (never a fork of
this process, so it holds nothing it is not handed), its stdin and stdout pipes to this one,
and how many of them a machine has room for.

`check`'s version openers, `audit verify`'s link checkers and `backup verify`'s parsing child
all start so (issue 53).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys

__all__ = ["end_child", "python_child", "read_exactly", "spare_cores", "widen_pipe"]


def spare_cores(at_most: int) -> int:
    """The cores this process may run on, less its own, at most `at_most`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(0, min(cores - 1, at_most))


def python_child(*args: str, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """`python ARGS` with this interpreter and this process's import path, its stdin and
    stdout piped to this process."""
    child = subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        pass_fds=pass_fds,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdin is not None and child.stdout is not None
    return child


def widen_pipe(fd: int, size: int) -> None:
    """Ask for a pipe of `size` bytes, so a writer seldom waits for its reader (Linux only;
    elsewhere, or refused, the pipe keeps its size and a write waits a little more)."""
    with contextlib.suppress(AttributeError, OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)


def read_exactly(fd: int, size: int) -> bytes | None:
    """`size` bytes from the pipe `fd`, waiting for them all; None if it ends first (its
    child ended early: the caller says so in its own words)."""
    data = b""
    while len(data) < size:
        more = os.read(fd, size - len(data))
        if not more:
            return None
        data += more
    return data


def end_child(child: subprocess.Popen[bytes]) -> None:
    """Stop a child at once, whatever it was doing, and close this side of its pipes."""
    if child.stdin is not None:
        with contextlib.suppress(OSError):
            child.stdin.close()
    child.kill()
    child.wait()
    if child.stdout is not None:
        child.stdout.close()
