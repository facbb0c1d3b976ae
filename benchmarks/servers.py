"""Server processes for the `http` scenario: the real `toolkit-vault serve` and the no-op.

Each runs in its own process on a free loopback port, started and stopped here; the CPU
time a process spent during a load run is read from `/proc/<pid>/stat`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["Running", "cpu_seconds", "free_port", "noop_server", "vault_server"]

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
_TICK = os.sysconf("SC_CLK_TCK")
BIN_ARGV = [str(BIN / "toolkit-vault")]


@dataclass(frozen=True)
class Running:
    port: int
    pid: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


@contextmanager
def _process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[Running]:
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
        running = Running(port, proc.pid, log)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(running.base + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{argv[0]} did not start: {log.read_text()[-2000:]}")
                time.sleep(0.1)
            yield running
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKIT_VAULT_")}
    return env | extra


@contextmanager
def vault_server(
    home: Path,
    url: str,
    plugins: Path,
    log: Path,
    source: Path | None = None,
    extra: dict[str, str] | None = None,
) -> Iterator[Running]:
    """`toolkit-vault serve` on the vault home, with the bench toolkit's entry point
    installed, the rate limits out of the way and JSON request logs (as deployed); the
    service imported from `source` when given (another build), `extra` added to its
    environment. Without `source`, this checkout's `service/` (not whichever one the venv's
    editable install points at: a worktree measures its own code)."""
    paths = [str(source or ROOT / "service")]
    env = _env(
        {
            "TOOLKIT_VAULT_HOME": str(home),
            "TOOLKIT_VAULT_DATABASE_URL": url,
            "PYTHONPATH": os.pathsep.join([*paths, str(plugins), str(ROOT)]),
            # one agent makes every call: its call rate and an instance's concurrency too
            "TOOLKIT_VAULT_CALL_RATE": "off",
            "TOOLKIT_VAULT_CALL_CONCURRENCY": "off",
        }
        | (extra or {})
    )
    argv = [*BIN_ARGV, "serve", "--rate", "1000000"]
    # The load comes from one address: the caps meant for strangers are lifted.
    argv += ["--connections-per-principal", "256", "--slow-connections-per-ip", "256"]
    argv += ["--log-format", "json"]
    with _process(argv, env, log) as running:
        yield running


@contextmanager
def noop_server(log: Path) -> Iterator[Running]:
    env = _env({"PYTHONPATH": str(ROOT)})
    with _process([sys.executable, "-m", "benchmarks.noop"], env, log) as running:
        yield running
