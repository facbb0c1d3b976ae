"""Counters and histograms for the hot path: counted as it happens, shaped at scrape time.

`prometheus_client`'s `Counter` and `Histogram` are general: every `inc` or `observe`
checks in Python that the metric may be observed, takes its value's own lock (a
histogram's observation takes two, its sum's and its bucket's) and walks the bucket
bounds one by one; `labels()` validates and locks as well. Counting a message that way
cost about 2 us, the most of anything `/metrics` adds to a request (BENCHMARKS.md). Here
each series is a plain list: an observation is a `bisect` over the bounds (in C) and two
additions under one lock. What Prometheus reads (cumulative buckets, counts, a counter
of outcomes beside the histogram of the same observations) is built in `collect`, when it
scrapes, where the cost falls on the scraper.

Label values are given already bounded (`labels`); these classes store what they are
given, so the series are as many as the bounded values allow.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import Metric

__all__ = ["Tally", "Timings"]

Series = list[float]  # a series of `Timings`: a count per bucket (+Inf last), then the sum


class Tally:
    """A counter by label values: `inc(values)`."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._counts: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, values: tuple[str, ...]) -> None:
        with self._lock:
            self._counts[values] = self._counts.get(values, 0.0) + 1.0

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            counts = sorted(self._counts.items())
        for values, count in counts:
            family.add_metric(values, count)
        yield family


class Timings:
    """A histogram by label values and, when `counted` names one, a counter of the same
    observations by those values and an outcome. One series per (values, outcome): `series`
    once, then `observe(series, seconds)` each time."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        counted: tuple[str, str] | None = None,  # the counter's name and help
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError("bucket bounds in increasing order, each once")
        self.counted = counted
        self._series: dict[tuple[str, ...], Series] = {}  # by (*values, outcome)
        self._lock = threading.Lock()

    def series(self, values: tuple[str, ...], outcome: str = "") -> Series:
        """The series of `values` and `outcome` (empty without a counter), made once."""
        key = (*values, outcome)
        with self._lock:
            found = self._series.get(key)
            if found is None:
                found = self._series[key] = [0.0] * (len(self.bounds) + 2)
        return found

    def observe(self, series: Series, seconds: float) -> None:
        """One observation: its bucket (the first bound at or above it) and the sum."""
        at = bisect_left(self.bounds, seconds)
        with self._lock:
            series[at] += 1
            series[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        from prometheus_client.utils import floatToGoString

        bounds = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        with self._lock:
            taken = [(key, list(series)) for key, series in self._series.items()]
        taken.sort()
        merged: dict[tuple[str, ...], Series] = {}  # outcomes together, by values
        counter = None
        if self.counted is not None:
            counter = CounterMetricFamily(*self.counted, labels=[*self.labelnames, "outcome"])
        for key, series in taken:
            if counter is not None:
                counter.add_metric(key, sum(series[:-1]))
            into = merged.get(key[:-1])
            if into is None:
                merged[key[:-1]] = series
            else:
                merged[key[:-1]] = [a + b for a, b in zip(into, series, strict=True)]
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, series in merged.items():
            running, buckets = 0.0, []
            for le, count in zip(bounds, series[:-1], strict=True):
                running += count
                buckets.append((le, running))
            histogram.add_metric(values, buckets, series[-1])
        if counter is not None:
            yield counter
        yield histogram
