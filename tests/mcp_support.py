"""Support for tests/test_mcp_client*.py: where the published servers are cached
(scripts/components/mcp_servers.sh), our own test servers (tests/mcp_servers/), and a
stand-in for the sandbox.

TEST-ONLY STAND-IN: `unconfined` builds a launch that runs the command as it is, with no
confinement at all, in the shape `sandbox.confine(argv, env, policy)` returns. It is here
until the sandbox lands (issue 51, engineer G's branch); the client under test never
confines a process itself, it starts whatever launch it is handed, so these tests hold
with the real sandbox's launches too.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_CACHE_ROOT = (  # as scripts/components/mcp_servers.sh: root's where nobody can read
    Path("/var/cache") if os.geteuid() == 0 else Path.home() / ".cache"
)
CACHE = Path(os.environ.get("TKV_MCP_SERVERS", _CACHE_ROOT / "toolkit-vault" / "mcp-servers"))
PY_SERVERS = CACHE / "venv" / "bin"
NODE_SERVERS = CACHE / "node" / "node_modules" / "@modelcontextprotocol"


def _servers_site() -> Path:
    """The site-packages our test servers import the MCP SDK from, bound into the sandbox:
    the published servers' venv (made from /usr/bin/python3, with the SDK at the version of
    our lock), which the sandbox's user can reach wherever the checkout lies; the vault's own
    only when that cache is missing (then a checkout under a closed directory fails)."""
    for site in sorted(CACHE.glob("venv/lib/python3*/site-packages")):
        if (site / "mcp").is_dir():
            return site
    return next(
        Path(p) for p in sys.path if p.endswith("site-packages") and Path(p, "mcp").is_dir()
    )


def _reachable_copy(source: Path) -> Path:
    """Our test servers copied where a root vault's sandbox user (nobody) can read them: a
    checkout may lie under a directory closed to others (`mktemp -d` makes one 0700, and so
    is /root), which the sandbox refuses to bind (sandbox/launch.py, `_require_reachable`).
    One copy per test process, removed when it exits."""
    copy = Path(tempfile.mkdtemp(prefix="tkv-our-servers-"))
    atexit.register(shutil.rmtree, copy, ignore_errors=True)
    os.chmod(copy, 0o755)  # noqa: S103 (others pass through and read: test servers only)
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    return copy


SITE = _servers_site()
OUR_SERVERS = _reachable_copy(HERE / "mcp_servers")


@dataclass(frozen=True)
class UnconfinedLaunch:
    """TEST-ONLY: a launch with no sandbox (see the module docstring)."""

    argv: Sequence[str]
    env: Mapping[str, str] = field(repr=False)
    cwd: str | None = None


def unconfined(argv: Sequence[str], env: Mapping[str, str], home: Path) -> UnconfinedLaunch:
    """TEST-ONLY stand-in for `sandbox.confine`: the command as it is, with a clean
    environment (a minimal PATH, a private HOME, the locale) plus `env`."""
    base = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
    }
    base["LANG"] = "C.UTF-8"
    return UnconfinedLaunch(argv=tuple(argv), env={**base, **env}, cwd=str(home))


def published(name: str) -> list[str]:
    """The argv of a cached published server (skipping never: the component script
    installs them, and a missing one is a broken set-up)."""
    if name in ("mcp-server-time", "mcp-server-git"):
        path = PY_SERVERS / name
    else:
        path = NODE_SERVERS / name / "dist" / "index.js"
    if not path.exists():
        pytest.fail(f"{path} missing: run scripts/components/mcp_servers.sh")
    return [str(path)] if name.startswith("mcp-server-") else ["node", str(path)]


def our_server(name: str, *args: str) -> list[str]:
    return [sys.executable, str(OUR_SERVERS / name), *args]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_http_server(argv: list[str], port: int) -> subprocess.Popen[bytes]:
    """Start a server process and wait until its port accepts connections."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server exited: {process.stderr.read() if process.stderr else b''!r}"
            )
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("server did not listen in time")


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie, dead but not yet reaped, is not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
