"""Servers a configure's check started, kept a moment for the instance of the version it
stores, so that a configure launches an imported server once, not twice (once to check
the config, once more at its first need).

The check (`ServedToolkit.verify`) knows the config, not the scope or the version it will
be stored as (the core checks before it stores), so a kept server is found again by its
*launch*: a digest of the exact argv, environment (the credentials included), binds and
sandbox settings it was started with. Only an instance whose own launch is that same one
takes it (`ServedToolkit.serve_from`, which the configure's own sync calls at once), and
only while it is kept (`KEEP` seconds; then it is stopped): a process that is exactly what
that instance would have launched, which had only been initialized and listed. Another
config, another definition or other settings never match; a check whose configure stored
nothing leaves its server to be stopped.

The digest is a hash: no credential is kept beside the process it was given to, and none
is ever shown.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from toolkit_vault.toolkits.server_processes import Started

__all__ = ["KEEP", "CheckedServers", "launch_digest"]

KEEP = 10.0  # seconds a checked server waits for its instance before it is stopped
log = logging.getLogger(__name__)


def launch_digest(
    argv: Sequence[str],
    env: Mapping[str, str],
    binds: Sequence[Path],
    settings: Sequence[object],
) -> str:
    """What identifies one launch: equal for two launches that would start the same
    process (argv, the whole environment, what it may read, the sandbox's settings)."""
    document = [
        list(argv),
        sorted(env.items()),
        sorted(str(path) for path in binds),
        [str(setting) for setting in settings],
    ]
    return hashlib.sha256(json.dumps(document).encode()).hexdigest()


class CheckedServers:
    """The checked servers waiting for their instance, by launch digest. `stop` ends one
    (off the caller's thread)."""

    def __init__(self, stop: Callable[[Started], None], keep: float = KEEP) -> None:
        self._stop = stop
        self._keep = keep
        self._waiting: dict[str, tuple[Started, bool]] = {}
        self._lock = threading.Lock()

    def keep(self, digest: str, started: Started, *, confined: bool) -> None:
        """Keep `started` for the instance whose launch is `digest` (a same launch kept
        before is stopped: the later check's process is the one kept)."""
        with self._lock:
            previous = self._waiting.pop(digest, None)
            self._waiting[digest] = (started, confined)
        if previous is not None:
            self._stop(previous[0])
        timer = threading.Timer(self._keep, self._expire, (digest, started))
        timer.daemon = True
        timer.start()

    def take(self, digest: str) -> tuple[Started, bool] | None:
        """The server kept for `digest` and whether it runs confined, handed over once."""
        with self._lock:
            return self._waiting.pop(digest, None)

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _expire(self, digest: str, started: Started) -> None:
        with self._lock:
            found = self._waiting.get(digest)
            if found is None or found[0] is not started:
                return
            del self._waiting[digest]
        log.info("a server a configure's check started was not taken: stopped")
        self._stop(started)
