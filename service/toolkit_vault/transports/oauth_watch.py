"""A running server refreshes the OAuth tokens of its live toolkits before they expire.

A toolkit receives its access token once, at initialization; one that stays initialized
for longer than its token lives would be left holding an expired one. Every `INTERVAL`
seconds this thread asks `Vault.oauth.refresh_ahead` (`core.oauth_schedule`) to refresh
the token sets that this process's live instances were made from and that expire within
`AHEAD` seconds (once across every process: the same compare-and-set as a refresh at
initialization), and to initialize those instances again, and follows refreshes made by
other processes (their instances here are initialized again too). A server that cannot
be reached is tried again once its backoff has passed (60 s, then 120 s, counted across
processes), and after three failures in a row the connection waits for a person: never a
tighter loop.
"""

from __future__ import annotations

import logging
import threading

from toolkit_vault.core.vault import Vault

__all__ = ["AHEAD", "INTERVAL", "OAuthWatch"]

INTERVAL = 30.0  # seconds between two rounds
AHEAD = 300.0  # refresh a token this many seconds before it expires
log = logging.getLogger(__name__)


class OAuthWatch:
    def __init__(self, vault: Vault, interval: float = INTERVAL, ahead: float = AHEAD) -> None:
        self.vault, self.interval, self.ahead = vault, interval, ahead
        self._stopped = threading.Event()

    def start(self) -> OAuthWatch:
        threading.Thread(target=self._watch, name="oauth-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                self.vault.oauth.refresh_ahead(self.ahead)
            except Exception as exc:  # a database that is away now: the next round tries
                log.warning("OAuth tokens not refreshed ahead (%s)", type(exc).__name__)
