"""Readiness (`/readyz`) and the figures `/metrics` reads at scrape time.

Ready means this process can serve a write now: the database answers, stored state is
believed (the chain follows and the database is not behind its home's witness), the keys
open (the active vault key wraps and unwraps in memory: no key-provider call, as no
request makes one), and, fail-closed, at least one audit device took the last events sent
to it (else every write is refused). Each failure is a code a probe may show without a
token; the reason (which may name a file or a device) goes to the log, once each time the
failures change.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from toolkit_vault.audit.devices import AuditDevices
from toolkit_vault.audit.syslog import SyslogTarget
from toolkit_vault.audit.targets import FileTarget
from toolkit_vault.core.vault import Vault
from toolkit_vault.crypto import new_key
from toolkit_vault.errors import DecryptionError
from toolkit_vault.store import health
from toolkit_vault.telemetry.readings import Reader, Reading

__all__ = ["FAILURES", "Readiness", "ReadinessProbe", "metric_readers"]

log = logging.getLogger(__name__)

FAILURES = (
    "database_unreachable",
    "state_not_believed",
    "keys_not_open",
    "audit_devices_refusing",
)
_PROBE_CONTEXT = ("readiness", 0)


@dataclass(frozen=True)
class Readiness:
    failures: tuple[str, ...]  # codes of FAILURES

    @property
    def ready(self) -> bool:
        return not self.failures


class ReadinessProbe:
    """Checks a vault's readiness; logs each reason when the set of failures changes."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault
        self._said: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def check(self) -> Readiness:
        reasons: dict[str, str] = {}
        store = self.vault.store
        unreachable = health.database_failure(store)
        if unreachable is not None:
            reasons["database_unreachable"] = unreachable
        else:
            not_believed = health.state_failure(store)
            if not_believed is not None:
                reasons["state_not_believed"] = not_believed
        keys = self._keys_failure()
        if keys is not None:
            reasons["keys_not_open"] = keys
        refusing = _devices_failure(store.audit_sink)
        if refusing is not None:
            reasons["audit_devices_refusing"] = refusing
        found = tuple(code for code in FAILURES if code in reasons)
        with self._lock:
            changed, self._said = found != self._said, found
        if changed:
            for code in found:
                log.warning("not ready: %s: %s", code, reasons[code])
            if not found:
                log.warning("ready again")
        return Readiness(found)

    def _keys_failure(self) -> str | None:
        ring = self.vault.ring
        try:
            key = new_key()
            key_id, wrapped = ring.wrap(key, _PROBE_CONTEXT)
            if ring.unwrap(key_id, wrapped, _PROBE_CONTEXT).reveal() != key.reveal():
                return "the active vault key does not unwrap what it wraps"
        except (DecryptionError, ValueError, KeyError) as exc:
            return f"the active vault key does not open ({type(exc).__name__})"
        return None


def _devices_failure(sink: object) -> str | None:
    """Fail-closed with every device's last send failed: each named with its reason."""
    if not isinstance(sink, AuditDevices) or not sink.fail_closed:
        return None
    failures = [(device.name, device.last_failure) for device in sink.devices]
    if any(failure is None for _, failure in failures):
        return None
    return "no audit device took the last events: " + "; ".join(f"{n}: {f}" for n, f in failures)


def metric_readers(vault: Vault) -> list[Reader]:
    """The scrape-time readers of `vault` (`telemetry.readings`): the chain and witness,
    the pool, the audit devices."""
    store = vault.store

    def chain() -> Iterable[Reading]:
        for family, value in health.chain_readings(store).items():
            yield Reading(family, value)

    def pool() -> Iterable[Reading]:
        found = health.pool_readings(store)
        if found:
            yield Reading("db_pool_size", found["size"])
            yield Reading("db_pool_connections", found["in_use"], ("in_use",))
            yield Reading("db_pool_connections", found["idle"], ("idle",))

    def devices() -> Iterable[Reading]:
        sink = store.audit_sink
        if not isinstance(sink, AuditDevices):
            return
        yield Reading("audit_refused", sink.refused)
        for index, device in enumerate(sink.devices):
            labels = (str(index), _kind(device.target))
            yield Reading("audit_device_delivered", device.delivered, labels)
            yield Reading("audit_device_failed", device.failed, labels)
            yield Reading("audit_device_lost", device.lost, labels)
            yield Reading("audit_device_queued", device.queued, labels)
            yield Reading("audit_device_failing", float(device.last_failure is not None), labels)

    return [chain, pool, devices]


def _kind(target: object) -> str:
    if isinstance(target, FileTarget):
        return "file"
    if isinstance(target, SyslogTarget):
        return "syslog"
    return "stdout"
