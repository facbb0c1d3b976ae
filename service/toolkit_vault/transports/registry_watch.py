"""A running server hears of imports and removals even from connections that send nothing.

Every list, handshake and configure already brings the registry in line with the audit
chain (`Vault.toolkit`, `Vault.follow_registry`), whichever process or replica made the
change, so no request is ever answered from a stale registry. What a request cannot do is
tell a WebSocket that sends nothing that its toolkit was removed. This thread follows the
chain every `INTERVAL` seconds for that: a `PRAGMA data_version` on SQLite while nothing
was committed, one small read of the chain's tail on PostgreSQL. A relay notice would be a
second, lossy path (NOTIFY is dropped while a listener reconnects, and the CLI would have
to send it after its commit); the chain cannot be missed, in any process, on either database.
"""

from __future__ import annotations

import logging
import threading

from toolkit_vault.core.vault import Vault

__all__ = ["INTERVAL", "RegistryWatch"]

INTERVAL = 0.25  # seconds between two looks at the chain
log = logging.getLogger(__name__)


class RegistryWatch:
    def __init__(self, vault: Vault, interval: float = INTERVAL) -> None:
        self.vault, self.interval = vault, interval
        self._stopped = threading.Event()

    def start(self) -> RegistryWatch:
        threading.Thread(target=self._watch, name="registry-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        failing: str | None = None  # said once, not four times a second, until it passes
        while not self._stopped.wait(self.interval):
            try:
                self.vault.follow_registry()
            except Exception as exc:  # a database that is away now: requests say so
                if type(exc).__name__ != failing:
                    failing = type(exc).__name__
                    log.warning("registry not followed (%s); trying on", failing)
                continue
            if failing is not None:
                failing = None
                log.info("registry followed again")
