"""`toolkit-vault` commands for tests, each in a process of its own, started fast.

Starting Python and importing the CLI costs about a second of CPU, and the suite runs
hundreds of commands: that was most of its time. So each pytest worker keeps a fork server:
a process that has imported `toolkit_vault.cli` and done nothing else (no vault opened, no
logging set up, no thread). Every command is a fork of it with its own stdin, stdout,
stderr, environment, working directory and exit status: what `subprocess.run` of the
console script gives, without the start-up. A command whose PYTHONPATH differs (an older
release, another plugin distribution) gets a server of its own, started with that path.
Tests of the console script itself, a terminal or a signal still start real processes.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["CLI", "run_cli"]

CLI = str(Path(sys.executable).parent / "toolkit-vault")

# The server: accept a connection, fork a handler; the handler takes the command's argv,
# environment, directory and three file descriptors, forks the command, sends its pid,
# then its exit status. The command ends as any process does (SystemExit, atexit, flush).
_SERVER = r"""
import json, os, select, signal, socket, sys
from toolkit_vault.cli import main

list(main.commands.values())  # import every command now, once, not in each forked handler
# and what commands import only when they run (to spare a real start the time: issue 53)
import importlib
for deferred in ("audit.devices", "audit.upgrade", "core.vault", "keys.upgrade", "mcp_client",
                 "mcp_client.host", "oauth.client", "oauth.metadata", "schema"):
    try:
        importlib.import_module("toolkit_vault." + deferred)
    except ImportError:
        pass  # an older release, laid out otherwise
try:
    import psycopg
except ImportError:
    pass

listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen(64)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
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


def _server(env: Mapping[str, str]) -> str:
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
        conn.connect(_server(env))
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
