"""A hostile process for tests/test_sandbox.py: run inside the sandbox by the system's
python3, it tries what a malicious MCP server would and prints one JSON report.

    hostile.py attack SPEC_JSON   try every attack in the spec, report each outcome
    hostile.py linger [N]         fork N children, print "ready", sleep until killed

Standard library only: the sandbox shows /usr, not the vault's virtual environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import sys
import time


def outcome(action):  # type: ignore[no-untyped-def]
    """'ok: <result>' when the action worked, 'blocked: <reason>' when it raised."""
    try:
        return f"ok: {action()}"
    except (OSError, MemoryError) as exc:
        return f"blocked: {type(exc).__name__} {getattr(exc, 'strerror', '')}"


def read(path: str) -> str:
    with open(path, "rb") as file:
        return file.read(4096).decode("latin-1")


def write(path: str) -> str:
    with open(path, "w") as file:
        file.write("hostile")
    return "written"


def every_environ() -> str:
    """Every environment this process can read in /proc, joined."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                found.append(read(f"/proc/{name}/environ"))
    return "\n".join(found)


def fork_until_refused(limit: int) -> str:
    children = 0
    try:
        while children < limit * 4:
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children += 1
    except OSError as exc:
        return f"refused after {children}: {exc.strerror}"
    return f"forked {children}"


def open_until_refused(limit: int) -> str:
    files = []
    try:
        while len(files) < limit * 4:
            files.append(open("/dev/null"))  # noqa: SIM115
    except OSError as exc:
        return f"refused after {len(files)}: {exc.strerror}"
    return f"opened {len(files)}"


def allocate(size: int) -> str:
    block = bytearray(size)
    block[::4096] = b"x" * len(block[::4096])
    return f"allocated {size}"


def connect(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"


def unshare_user() -> str:
    """A user namespace of its own: the way to the kernel's less-trodden code."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return "unshared"


def attack(spec: dict) -> dict:  # type: ignore[type-arg]
    report: dict[str, object] = {
        "uid": os.getuid(),
        "cwd": os.getcwd(),
        "environment": dict(os.environ),
        "sees_the_vault_environment": spec["vault_canary"] in every_environ(),
        "sees_another_sandbox_environment": spec["other_canary"] in every_environ(),
        "processes in view": sorted(int(name) for name in os.listdir("/proc") if name.isdigit()),
        "sees the launcher": os.path.exists(f"/proc/{int(spec['launcher_pid'])}"),
    }
    for path in spec["read"]:
        report[f"read {path}"] = outcome(lambda path=path: read(path))
    for path in spec["write"]:
        report[f"write {path}"] = outcome(lambda path=path: write(path))
    report["listdir /"] = sorted(os.listdir("/"))
    report["fork"] = fork_until_refused(spec["processes"])
    report["open"] = open_until_refused(spec["open_files"])
    report["allocate small"] = outcome(lambda: allocate(16 * 1024 * 1024))
    report["allocate past the limit"] = outcome(lambda: allocate(2 * spec["memory_bytes"]))
    report["connect"] = outcome(lambda: connect(spec["port"]))
    report["unshare user"] = outcome(unshare_user)
    return report


def linger(children: int) -> None:
    for _ in range(children):
        if os.fork() == 0:
            break
    else:
        print("ready", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    if sys.argv[1] == "attack":
        print(json.dumps(attack(json.loads(sys.argv[2]))), flush=True)
    else:
        linger(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
