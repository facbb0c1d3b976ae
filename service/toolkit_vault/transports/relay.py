"""Push events across `serve` replicas on one PostgreSQL database (LISTEN/NOTIFY).

A configure through one replica must reach the WebSockets of that session on every other
replica, so the service scales out behind a load balancer. Each replica NOTIFYs the status
event and LISTENs on a thread of its own, delivering what other replicas sent to its local
connections.

Any database role that can connect may LISTEN on, or NOTIFY, any channel. So a payload is
sealed (AES-256-GCM, committing; see `crypto.seal`) under the relay key, a subkey of the
state key that only the master key unwraps: a listener learns nothing but sizes and times,
and a forged or altered payload is dropped. A payload older than `MAX_AGE` seconds, or one
seen before, is dropped too, so a recorded one cannot be replayed.

Sending costs the writer nothing: `send` queues the event, and a thread of its own seals
what queued meanwhile (after `GATHER_S`, so a busy server sends many at once) as few
payloads as fit (`MAX_PAYLOAD`), and NOTIFYs them on an autocommit connection of its own:
a transaction and a seal per event was a large part of a PostgreSQL configure's CPU
(BENCHMARKS.md). Receiving shares the store's LISTEN connection (`store.notices`); a
payload this process sent comes back too, and is known by its text and dropped unopened.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import uuid
from collections import deque
from typing import Any

import psycopg

from toolkit_vault import crypto
from toolkit_vault.core.vault import Vault
from toolkit_vault.errors import DecryptionError, VaultError
from toolkit_vault.protocol import ToolkitStatusEvent, dump_message

__all__ = ["CHANNEL", "PgEventRelay"]

CHANNEL = "toolkit_vault_events"
MAX_AGE = 30.0  # seconds a relayed event stays acceptable
GATHER_S = 0.005  # what a queued event waits for others to go with it
_SENT_KEPT = 10_000  # payloads sent and not yet heard back, at most
MAX_PAYLOAD = 5_000  # bytes of events sealed together: base64 of it stays under NOTIFY's 8,000
_NOTIFY = "SELECT pg_notify(%s, %s)"
log = logging.getLogger(__name__)


class PgEventRelay:
    def __init__(self, vault: Vault) -> None:
        if vault.relay_key is None:
            raise VaultError("the relay key is not loaded")
        self._key = vault.relay_key
        self._seen: set[str] = set()  # event ids delivered in the last MAX_AGE seconds
        self._expiry: deque[tuple[float, str]] = deque()
        self.vault = vault
        self.origin = uuid.uuid4().hex
        self._conninfo = vault.store.libpq_conninfo()
        self._stopped = threading.Event()
        self._queued: list[ToolkitStatusEvent] = []
        self._sent: dict[str, None] = {}  # payloads sent here, until they come back
        self._sent_lock = threading.Lock()
        self._wake = threading.Condition()
        self._notices = vault.store.listen()
        self._notices.subscribe(CHANNEL, self._receive)
        self.listening = self._notices.listening

    def start(self) -> PgEventRelay:
        self.vault.relay = self.send
        self._notices.start()
        threading.Thread(target=self._send_queued, name="pg-event-send", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._notices.stop()
        with self._wake:
            self._wake.notify()

    def send(self, event: ToolkitStatusEvent) -> None:
        """Queue `event` for the sending thread."""
        with self._wake:
            self._queued.append(event)
            self._wake.notify()

    def _send_queued(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stopped.is_set():
            with self._wake:
                self._wake.wait_for(lambda: self._queued or self._stopped.is_set())
                events, self._queued = self._queued, []
            if not events:
                continue
            if self._stopped.wait(GATHER_S):
                break
            with self._wake:
                events, self._queued = events + self._queued, []
            payloads = self._sealed([dump_message(event) for event in events])
            with self._sent_lock:
                self._sent.update(dict.fromkeys(payloads))
                while len(self._sent) > _SENT_KEPT:
                    del self._sent[next(iter(self._sent))]
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self._conninfo, autocommit=True)
                for payload in payloads:
                    conn.execute(_NOTIFY, (CHANNEL, payload))
            except psycopg.Error as exc:  # the event is advisory: the configure is stored
                log.warning("could not relay status events (%s)", type(exc).__name__)
                conn = None
        if conn is not None:
            conn.close()

    def _sealed(self, events: list[str]) -> list[str]:
        """The events (as JSON) sealed in as few payloads of at most `MAX_PAYLOAD` as fit."""
        head = json.dumps({"origin": self.origin, "sent": time.time()})[:-1]
        payloads, batch, size = [], [], 0
        for index, event in enumerate(events):
            batch.append(event)
            size += len(event) + 1
            last = index == len(events) - 1
            if last or size + len(events[index + 1]) > MAX_PAYLOAD:
                body = f'{head}, "events": [{",".join(batch)}]}}'.encode()
                sealed = crypto.seal(self._key, body, CHANNEL.encode())
                payloads.append(base64.b64encode(sealed).decode())
                batch, size = [], 0
        return payloads

    def _receive(self, payload: str) -> None:
        with self._sent_lock:
            if self._sent.pop(payload, 0) is None:
                return  # sent here: heard back
        try:
            sealed = base64.b64decode(payload, validate=True)
            data = json.loads(crypto.unseal(self._key, sealed, CHANNEL.encode()))
            if data.get("origin") == self.origin:
                return
            events = [ToolkitStatusEvent.model_validate(e) for e in data["events"]]
            sent = float(data["sent"])
        except (ValueError, KeyError, TypeError, DecryptionError) as exc:
            log.warning("ignored a relayed event that is not ours (%s)", type(exc).__name__)
            return
        now = time.time()
        while self._expiry and self._expiry[0][0] < now - MAX_AGE:
            self._seen.discard(self._expiry.popleft()[1])
        for event in events:
            if not now - MAX_AGE < sent < now + MAX_AGE or event.id in self._seen:
                log.warning("ignored a stale or repeated relayed event")
                continue
            self._seen.add(event.id)
            self._expiry.append((now, event.id))
            self.vault.deliver(event)
