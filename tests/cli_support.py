"""`toolkit-vault` commands for tests, each in a process of its own, started fast.

Starting Python and importing the CLI costs about a second of CPU, and the suite runs
hundreds of commands: that was most of its time. So each pytest worker keeps a fork server:
a process that has imported `toolkit_vault.cli` and done nothing else (no vault opened, no
logging set up, no thread). Every command is a fork of it with its own stdin, stdout,
stderr, environment, working directory and exit status: what `subprocess.run` of the
console script gives, without the start-up. A command whose PYTHONPATH differs (an older
release, another plugin distribution) gets a server of its own, started with that path.
`spawn_cli` is `subprocess.Popen` of the console script the same way, for a command a test
runs alongside (`serve`, a process it kills when a condition holds). Tests of the console
script itself (its start-up, its imports), a terminal, or a kill timed from the process's
start still start real processes.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["CLI", "Forked", "fork_server", "run_cli", "spawn_cli"]

CLI = str(Path(sys.executable).parent / "toolkit-vault")

# The server: accept a connection, fork a handler; the handler takes the command's argv,
# environment, directory and three file descriptors, forks the command, sends its pid,
# then its exit status. The command ends as any process does (SystemExit, atexit, flush).
_SERVER = r"""
import json, os, select, signal, socket, sys
from toolkit_vault.cli import main

list(main.commands.values())  # import every command now, once, not in each forked handler
# and what commands import only when they run (to spare a real start the time: issue 53):
# every module of the package, and the libraries its modules import inside functions (a
# key provider's client, the server, init's Alembic). Not keyring: its import looks for
# backends, and a test may give a command a keyring of its own.
import importlib, pkgutil, toolkit_vault
for module in pkgutil.walk_packages(toolkit_vault.__path__, "toolkit_vault.", lambda _: None):
    try:
        importlib.import_module(module.name)
    except Exception:
        pass  # an older release, laid out otherwise, or an optional library not installed
for deferred in ("psycopg", "boto3", "botocore.session", "botocore.loaders", "botocore.config",
                 "pkcs11", "uvicorn", "uvicorn.protocols.http.httptools_impl", "alembic.command",
                 "alembic.config", "rich.console", "rich.progress", "email_validator",
                 "rfc3986_validator", "authlib.integrations.httpx_client"):
    try:
        importlib.import_module(deferred)
    except ImportError:
        pass

listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(64)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
# Everything imported so far out of the collector's reach (as the gc module's docs advise a
# server that forks without exec): a forked command's collections, and its interpreter's at
# exit, would otherwise walk every inherited object, and so make the kernel copy the whole
# heap, page by page: most of a command's time (tests/durations.md).
import gc
gc.freeze()
print("ready", flush=True)
while True:
    if 0 in select.select([listener, 0], [], [])[0]:
        break  # stdin closed: the test worker is gone, so is this server
    conn, _ = listener.accept()
    if os.fork():
        conn.close()
        continue
    listener.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = request["argv"]
        main()
        sys.exit(0)
    conn.sendall(b"%d\n" % pid)
    _, status = os.waitpid(pid, 0)
    try:
        conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
    except OSError:
        pass  # the test stopped waiting (a timeout) and killed the command
    os._exit(0)
"""

_servers: dict[str, tuple[subprocess.Popen[bytes], str]] = {}


def fork_server(env: Mapping[str, str]) -> str:
    """The socket of the fork server for this PYTHONPATH, started on first use."""
    key = env.get("PYTHONPATH", "")
    found = _servers.get(key)
    if found is not None and found[0].poll() is None:
        return found[1]
    path = os.path.join(tempfile.mkdtemp(prefix="tkv-cli-"), "fork.sock")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, path],
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    _servers[key] = (proc, path)
    return path


@atexit.register
def _stop() -> None:
    for proc, _ in _servers.values():
        proc.kill()
        proc.wait()


def _text(data: bytes) -> str:
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


def run_cli(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    input: str | bytes | None = "",
    timeout: float = 120,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([CLI, *args], capture_output=True, text=True, ...)`, forked."""
    argv = [CLI, *args]
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
        socket.socket(socket.AF_UNIX) as conn,
    ):
        stdin.write(input.encode() if isinstance(input, str) else input or b"")
        stdin.seek(0)
        conn.connect(fork_server(env))
        conn.settimeout(timeout)
        request = {"argv": argv, "env": dict(env), "cwd": str(cwd or os.getcwd())}
        socket.send_fds(
            conn, [json.dumps(request).encode()], [f.fileno() for f in (stdin, stdout, stderr)]
        )
        replies = conn.makefile("rb")
        pid = int(replies.readline())
        try:
            returncode = int(replies.readline())
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(argv, timeout) from None
        stdout.seek(0)
        stderr.seek(0)
        return subprocess.CompletedProcess(
            argv, returncode, _text(stdout.read()), _text(stderr.read())
        )


_Stream = int | IO[Any] | None


class Forked:
    """A command forked by the fork server, as `subprocess.Popen` gives it: `pid`, `poll`,
    `wait`, `terminate`, `kill`, `send_signal`, `returncode`, `communicate`, and `stdin`,
    `stdout` and `stderr` where asked for as `subprocess.PIPE` (text unless `text=False`).
    A stream left as None is this process's own, as a child's would be."""

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        *,
        stdin: _Stream = None,
        stdout: _Stream = None,
        stderr: _Stream = None,
        cwd: str | os.PathLike[str] | None = None,
        text: bool = True,
    ) -> None:
        self.args = [CLI, *args]
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        sent: list[int] = []
        ours: list[int] = []  # the child's ends of pipes and /dev/null: closed once sent
        for target, stream in enumerate((stdin, stdout, stderr)):
            if stream == subprocess.STDOUT and target == 2:
                sent.append(sent[1])
            elif stream == subprocess.PIPE:
                read, write = os.pipe()
                mine, theirs = (write, read) if target == 0 else (read, write)
                mode = ("w" if target == 0 else "r") + ("" if text else "b")
                pipe = open(mine, mode)  # noqa: SIM115
                setattr(self, ("stdin", "stdout", "stderr")[target], pipe)
                sent.append(theirs)
                ours.append(theirs)
            elif stream == subprocess.DEVNULL:
                sent.append(os.open(os.devnull, os.O_RDWR))
                ours.append(sent[-1])
            elif stream is None:
                sent.append(target)
            elif isinstance(stream, int):
                sent.append(stream)
            else:
                sent.append(stream.fileno())
        self._conn = socket.socket(socket.AF_UNIX)
        try:
            self._conn.connect(fork_server(env))
            request = {"argv": self.args, "env": dict(env), "cwd": str(cwd or os.getcwd())}
            socket.send_fds(self._conn, [json.dumps(request).encode()], sent)
            self._replies = self._conn.makefile("rb")
            self.pid = int(self._replies.readline())
        finally:
            for fd in ours:
                os.close(fd)

    def poll(self) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], 0)
            if ready:
                self._reap()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._reap()
        assert self.returncode is not None
        return self.returncode

    def _reap(self) -> None:
        line = self._replies.readline()
        # no status: the handler is gone (the test killed the command's group); as killed
        self.returncode = int(line) if line else -signal.SIGKILL
        self._replies.close()
        self._conn.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Input, then both outputs read to their ends (on threads, as `Popen` does)."""
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        found: dict[str, Any] = {}
        readers = [
            threading.Thread(target=lambda n=name, s=stream: found.__setitem__(n, s.read()))
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            reader.join()
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return found.get("out"), found.get("err")

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None and not stream.closed:
                stream.close()
        self.wait()


spawn_cli = Forked  # `subprocess.Popen([CLI, *args], env=env, ...)`, forked
