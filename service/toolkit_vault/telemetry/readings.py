"""Figures read when Prometheus scrapes, not counted as they happen: the audit chain's
head, the witness's lag and age, the audit devices' counts and queues, the database pool.

Reading them costs nothing between scrapes. The vault registers its readers
(`Readings.put`) when it starts: functions returning `Reading`s. The families and their
label names are declared here, once; a reading of another family or with other labels is
dropped, so a reader cannot open a series nobody declared. A reader that fails is skipped
for that scrape and counted (`toolkit_vault_reading_failures`), never raised into a scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from toolkit_vault.telemetry.labels import PREFIX

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["FAMILIES", "Reader", "Reading", "Readings"]

log = logging.getLogger(__name__)


class Reading(NamedTuple):
    family: str
    value: float
    labels: tuple[str, ...] = ()


# name -> (counter or gauge, help, label names)
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "audit_chain_head_seq": ("gauge", "The audit chain's last event in the database", ()),
    "audit_witness_lag_events": (
        "gauge", "Events the witness file trails the chain by (it is written at most every "
        "few milliseconds; a growing lag means it is not written)", (),
    ),
    "audit_witness_age_seconds": ("gauge", "Seconds since the witness file was last written", ()),
    "audit_device_delivered": ("counter", "Audit events a device took", ("device", "kind")),
    "audit_device_failed": ("counter", "Audit events a device failed to take", ("device", "kind")),
    "audit_device_lost": ("counter", "Audit events dropped from a full queue", ("device", "kind")),
    "audit_device_queued": ("gauge", "Audit events waiting for a device", ("device", "kind")),
    "audit_device_failing": ("gauge", "1 while a device fails", ("device", "kind")),
    "audit_refused": ("counter", "Events refused as no fail-closed device took them", ()),
    "db_pool_size": ("gauge", "Connections the database pool keeps", ()),
    "db_pool_connections": ("gauge", "Pooled connections by state", ("state",)),
}  # fmt: skip

Reader = Callable[[], Iterable[Reading]]


class Readings:
    """A `prometheus_client` collector over the registered readers (its `collect` and
    `describe`; `prometheus_client` itself is imported when Prometheus first scrapes)."""

    def __init__(self) -> None:
        self._readers: dict[str, list[Reader]] = {}
        self._lock = threading.Lock()
        self.failures = 0

    def put(self, source: str, readers: Iterable[Reader]) -> None:
        """The readers of `source` (one vault a process: its app, made again, replaces them)."""
        with self._lock:
            self._readers[source] = list(readers)

    def describe(self) -> Iterable[Metric]:
        return []  # families appear only once read: registering never calls a reader

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        with self._lock:
            readers = [reader for each in self._readers.values() for reader in each]
        for reader in readers:
            try:
                readings = list(reader())
            except Exception as exc:  # a scrape never fails for one source
                self.failures += 1
                log.warning("a metrics reader failed (%s)", type(exc).__name__)
                continue
            for reading in readings:
                declared = FAMILIES.get(reading.family)
                if declared is None or len(reading.labels) != len(declared[2]):
                    continue
                family = families.get(reading.family)
                if family is None:
                    family = families[reading.family] = _family(reading.family, *declared)
                family.add_metric(list(reading.labels), reading.value)
        failures = GaugeMetricFamily(
            f"{PREFIX}_reading_failures", "Metrics readers that failed, since start"
        )
        failures.add_metric([], self.failures)
        yield from families.values()
        yield failures


def _family(
    name: str, kind: str, help_text: str, labels: tuple[str, ...]
) -> GaugeMetricFamily | CounterMetricFamily:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    full = f"{PREFIX}_{name}"
    if kind == "counter":
        return CounterMetricFamily(full, help_text, labels=list(labels))
    return GaugeMetricFamily(full, help_text, labels=list(labels))
