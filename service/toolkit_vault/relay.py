"""Push events across `serve` replicas on one PostgreSQL database (LISTEN/NOTIFY).

A configure through one replica must reach the WebSockets of that session on every other
replica, so the service scales out behind a load balancer. Each replica NOTIFYs the status
event (it holds no secret: names, flags and a sanitized message) and LISTENs on a thread
of its own, delivering what other replicas sent to its local connections.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid

import psycopg
from sqlalchemy import text

from .protocol import ToolkitStatusEvent, dump_message
from .service import Vault

__all__ = ["CHANNEL", "PgEventRelay"]

CHANNEL = "toolkit_vault_events"
log = logging.getLogger(__name__)


class PgEventRelay:
    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self.origin = uuid.uuid4().hex
        url = vault.store.engine.url.set(drivername="postgresql")
        self._conninfo = url.render_as_string(hide_password=False)
        self._stopped = threading.Event()
        self.listening = threading.Event()

    def start(self) -> PgEventRelay:
        self.vault.relay = self.send
        threading.Thread(target=self._listen, name="pg-event-relay", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def send(self, event: ToolkitStatusEvent) -> None:
        payload = json.dumps({"origin": self.origin, "event": json.loads(dump_message(event))})
        try:
            with self.vault.store.engine.begin() as conn:
                conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": CHANNEL, "payload": payload},
                )
        except Exception as exc:  # the event is advisory: the configure itself is stored
            log.warning("could not relay a status event (%s)", type(exc).__name__)

    def _listen(self) -> None:
        while not self._stopped.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    while not self._stopped.is_set():  # wake each second to notice stop()
                        for notice in conn.notifies(timeout=1.0):
                            self._receive(notice.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                log.warning(
                    "event relay lost its connection (%s); reconnecting", type(exc).__name__
                )
                time.sleep(1.0)

    def _receive(self, payload: str) -> None:
        try:
            data = json.loads(payload)
            if data.get("origin") == self.origin:
                return
            self.vault.deliver(ToolkitStatusEvent.model_validate(data["event"]))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignored a malformed relayed event (%s)", type(exc).__name__)
