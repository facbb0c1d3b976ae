"""The bounds on the local servers of one vault process, shared by every table of it:
how long an unused server runs on (`TOOLKIT_VAULT_SERVER_IDLE`, seconds), how many run or
start at once (`TOOLKIT_VAULT_MAX_SERVERS`: one more is refused `busy`), the slots that
cap counts, the processes the watcher looks after, and where the status file goes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from toolkit_vault.errors import VaultError

__all__ = [
    "IDLE_ENV",
    "MAX_SERVERS_ENV",
    "ServerLimits",
    "ServerRefused",
    "SharedBounds",
    "Watched",
    "shared",
    "use_limits",
]

IDLE_ENV = "TOOLKIT_VAULT_SERVER_IDLE"  # seconds a server may sit unused before it stops
MAX_SERVERS_ENV = "TOOLKIT_VAULT_MAX_SERVERS"  # servers running or starting at once
TICK = 0.1  # how often the watcher looks for crashes, idle servers and restarts due
log = logging.getLogger(__name__)


class Watched(Protocol):
    """A server as the cap and the watcher see it (`server_processes.ServerProcess`)."""

    @property
    def state(self) -> str: ...

    def tick(self, now: float) -> None: ...


class ServerRefused(VaultError):
    """A server that cannot take a call now: `reason` is the protocol's refusal word
    (`busy`: the cap of servers; `unavailable`: it failed to start, or is restarting)."""

    def __init__(self, reason: Literal["busy", "unavailable"], message: str) -> None:
        super().__init__(message, details=[{"reason": reason}])
        self.reason: Literal["busy", "unavailable"] = reason


@dataclass(frozen=True)
class ServerLimits:
    """The operator's bounds on local servers (see the module)."""

    idle: float = 600.0
    max_servers: int = 32

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ServerLimits:
        idle, cap = environ.get(IDLE_ENV, "").strip(), environ.get(MAX_SERVERS_ENV, "").strip()
        try:
            limits = cls(float(idle) if idle else cls.idle, int(cap) if cap else cls.max_servers)
        except ValueError:
            raise VaultError(f"{IDLE_ENV} and {MAX_SERVERS_ENV} take numbers") from None
        if limits.idle <= 0 or limits.max_servers < 1:
            raise VaultError(f"{IDLE_ENV} must be over 0 and {MAX_SERVERS_ENV} at least 1")
        return limits


class SharedBounds:
    """What every table of this process shares: the limits, the slots the cap counts, the
    processes the watcher looks after, and where the status file goes."""

    def __init__(self) -> None:
        self.limits = ServerLimits()
        self.lock = threading.Lock()
        self.slots: set[Watched] = set()  # starting or running
        self.every: weakref.WeakSet[Watched] = weakref.WeakSet()
        self.status_dir: Path | None = None
        self.watcher: threading.Thread | None = None

    def admit(self, process: Watched) -> None:
        with self.lock:
            if process not in self.slots and len(self.slots) >= self.limits.max_servers:
                raise ServerRefused(
                    "busy",
                    f"this vault runs its limit of {self.limits.max_servers} local servers; "
                    "try again when one stops",
                )
            self.slots.add(process)
            if self.watcher is None:
                self.watcher = threading.Thread(target=self.watch, name="mcp-servers", daemon=True)
                self.watcher.start()

    def free(self, process: Watched) -> None:
        with self.lock:
            self.slots.discard(process)

    def watch(self) -> None:
        """The watcher: one thread a process, a round every `TICK` over every server."""
        while True:
            time.sleep(TICK)
            now = time.monotonic()
            for process in list(self.every):
                try:
                    process.tick(now)
                except Exception as exc:  # one server's trouble never stops the watch
                    log.warning("watching a local server failed (%s)", type(exc).__name__)

    def counts(self) -> tuple[int, int]:
        with self.lock:
            states = [p.state for p in self.slots]
        return states.count("running"), states.count("starting")


shared = SharedBounds()


def use_limits(limits: ServerLimits, status_dir: Path | None = None) -> None:
    """Set this process's bounds, and where its status file goes (`served.use_servers`)."""
    shared.limits = limits
    shared.status_dir = status_dir
