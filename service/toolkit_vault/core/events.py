"""The push callback a toolkit receives: what a toolkit emits is checked before anyone hears it.

A toolkit object with `set_push_callback` gets one `EventGate`, bound to the one session and
the one toolkit that instance serves. An emitted event is rebuilt as a fresh, well-formed
`toolkit/status/event` of that session and toolkit (new id and time; a toolkit cannot speak
for another session or toolkit: an event naming either is dropped), bounded in size and in
rate, and **dropped whole** when its message contains any secret value this process has
decrypted (`logs.redact` finds it): a toolkit quoting a credential is broken, and a redacted
remnant of its words could still hint at the value. A replaced or purged instance is
silenced. Drops are logged once per reason, by toolkit and reason only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from toolkit_vault.core.rates import TokenBucket
from toolkit_vault.logs import redact
from toolkit_vault.protocol import ToolkitStatusEvent, dump_message

__all__ = ["EventGate", "EventLimits"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EventLimits:
    """`max_bytes` of the serialized event (well under PostgreSQL's 8000-byte NOTIFY payload
    the relay carries it in); a token bucket of `burst` events refilled at `per_second`."""

    max_bytes: int = 4096
    burst: int = 10
    per_second: float = 1.0


class EventGate:
    """Callable handed to `set_push_callback`; `publish` delivers to the session."""

    def __init__(
        self,
        publish: Callable[[ToolkitStatusEvent], None],
        session_id: str,
        toolkit_name: str,
        still_active: Callable[[], bool],
        limits: EventLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish
        self.session_id = session_id
        self.toolkit_name = toolkit_name
        self._still_active = still_active
        self.limits = limits or EventLimits()
        self._bucket = TokenBucket(self.limits.per_second, self.limits.burst, clock)
        self._lock = threading.Lock()
        self.dropped: Counter[str] = Counter()

    def __call__(self, event: object) -> None:
        checked = self.check(event)
        if checked is None:
            return
        try:
            self._publish(checked)
        except Exception as exc:  # a transport's trouble is never the toolkit's exception
            log.warning(
                "could not deliver an event of toolkit %s (%s)",
                self.toolkit_name,
                type(exc).__name__,
            )

    def check(self, event: object) -> ToolkitStatusEvent | None:
        """The event as it may be delivered, or None (dropped, counted, logged once)."""
        if not self._still_active():
            return self._drop("the toolkit instance was replaced or purged")
        parsed = _parse(event)
        if parsed is None:
            return self._drop("not a well-formed toolkit/status/event")
        if parsed.session_id not in ("", self.session_id):
            return self._drop("names another session")
        if parsed.toolkit_name not in ("", self.toolkit_name):
            return self._drop("names another toolkit")
        message = parsed.message
        if message is not None and redact(message) != message:
            return self._drop("carries a secret value")
        stamped = ToolkitStatusEvent(
            session_id=self.session_id,
            toolkit_name=self.toolkit_name,
            configured=parsed.configured,
            status=parsed.status,
            message=message,
        )
        try:
            size = len(dump_message(stamped).encode())
        except (ValueError, UnicodeError):
            return self._drop("not a well-formed toolkit/status/event")
        if size > self.limits.max_bytes:
            return self._drop(f"larger than {self.limits.max_bytes} bytes")
        if not self._bucket.take():
            return self._drop("over the event rate")
        return stamped

    def _drop(self, reason: str) -> ToolkitStatusEvent | None:
        with self._lock:
            self.dropped[reason] += 1
            first = self.dropped[reason] == 1
        if first:
            log.warning("dropped an event of toolkit %s: %s", self.toolkit_name, reason)
        return None


def _parse(event: object) -> ToolkitStatusEvent | None:
    """Strictly re-validated from its fields: a model built without validation, another
    library's model or a mapping all pass through the same check."""
    try:
        if isinstance(event, BaseModel):
            data = event.model_dump(by_alias=True, warnings=False)
        elif isinstance(event, Mapping):
            data = dict(event)
        else:
            return None
        return ToolkitStatusEvent.model_validate(data)
    except (ValidationError, ValueError, TypeError):
        return None
