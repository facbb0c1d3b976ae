"""A running server reminds of credentials that end, and ends them when they have
(`core.reminders`): one round a minute, on a thread of its own, like the OAuth watch. A
round that fails (a database away) is logged and tried again next time."""

from __future__ import annotations

import logging
import threading

from toolkit_vault.core.reminders import ExpiryReminders

__all__ = ["INTERVAL", "ExpiryWatch"]

INTERVAL = 60.0  # seconds between two rounds
log = logging.getLogger(__name__)


class ExpiryWatch:
    def __init__(self, reminders: ExpiryReminders, interval: float = INTERVAL) -> None:
        self.reminders, self.interval = reminders, interval
        self._stopped = threading.Event()

    def start(self) -> ExpiryWatch:
        threading.Thread(target=self._watch, name="expiry-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                self.reminders.round()
            except Exception as exc:
                log.warning("credential expiries not looked at (%s)", type(exc).__name__)
