"""How often a principal may call, and how many calls one toolkit instance runs at once, so
one agent cannot starve the others.

Two limits, both refused at once with `CallRefused("busy", ...)` and never waited on (a
caller that waits holds a connection and a worker the others need):
- a call rate per principal: a token bucket (`core.rates.TokenBucket`'s rule), `rate`
  calls a second with bursts of `burst`;
- a concurrency per instance (one scope's instance of one toolkit): at most `concurrency`
  calls in flight in it; one more is refused until one ends.

Both are kept per process, like the HTTP request rate: with replicas, each enforces its
own. An operator sets them through the environment `serve` (and `stdio`) read at start-up:
`TOOLKIT_VAULT_CALL_RATE` (calls a second per principal), `TOOLKIT_VAULT_CALL_BURST`
(default twice the rate) and `TOOLKIT_VAULT_CALL_CONCURRENCY` (calls at once per
instance); `off` lifts one. A bad value refuses to start, naming the variable.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from toolkit_vault.errors import VaultError
from toolkit_vault.tools.refusals import CallRefused

__all__ = [
    "BURST_VARIABLE",
    "CONCURRENCY_VARIABLE",
    "RATE_VARIABLE",
    "CallAdmission",
]

RATE_VARIABLE = "TOOLKIT_VAULT_CALL_RATE"
BURST_VARIABLE = "TOOLKIT_VAULT_CALL_BURST"
CONCURRENCY_VARIABLE = "TOOLKIT_VAULT_CALL_CONCURRENCY"
DEFAULT_RATE = 50.0  # calls a second per principal, in one process (as `serve --rate`)
DEFAULT_CONCURRENCY = 8  # calls in flight per instance (`serve`'s connections per principal)
OFF = "off"
_BUCKETS_KEPT = 10_000  # principals' buckets before full (idle) ones are forgotten


class _Bucket:
    """One principal's tokens: `burst` at first, refilled at `rate` a second."""

    __slots__ = ("last", "tokens")

    def __init__(self, tokens: float, last: float) -> None:
        self.tokens, self.last = tokens, last


@dataclass(frozen=True)
class _Settings:
    rate: float | None  # None: no rate limit
    burst: int
    concurrency: int | None  # None: no concurrency limit


class CallAdmission:
    """The two limits of one process; thread-safe. `admit` is the one entry point."""

    def __init__(
        self,
        rate: float | None = DEFAULT_RATE,
        burst: int | None = None,
        concurrency: int | None = DEFAULT_CONCURRENCY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise VaultError("a call rate is a number of calls a second above 0")
        if burst is not None and burst < 1:
            raise VaultError("a call burst is at least 1")
        if concurrency is not None and concurrency < 1:
            raise VaultError("a call concurrency is at least 1")
        default_burst = 1 if rate is None else max(1, math.ceil(rate * 2))
        self.settings = _Settings(rate, burst or default_burst, concurrency)
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._running: dict[Hashable, int] = {}  # instance -> calls in flight (absent: none)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> CallAdmission:
        """The operator's limits (the three variables above); VaultError names a bad one."""
        env = os.environ if environ is None else environ
        rate = _number(env, RATE_VARIABLE, DEFAULT_RATE, float)
        burst = _number(env, BURST_VARIABLE, None, int)
        concurrency = _number(env, CONCURRENCY_VARIABLE, DEFAULT_CONCURRENCY, int)
        try:
            return cls(rate, None if burst is None else int(burst), _whole(concurrency))
        except VaultError as exc:
            names = f"{RATE_VARIABLE}, {BURST_VARIABLE}, {CONCURRENCY_VARIABLE}"
            raise VaultError(f"{names}: {exc.message}") from None

    @contextmanager
    def admit(self, principal_id: str, instance_key: Hashable) -> Iterator[Callable[[], None]]:
        """Run the body as one call of `principal_id` in the instance `instance_key`, or
        raise `CallRefused("busy")` at once: the instance runs its limit of calls already,
        or the principal spent its rate. A refused call takes no slot and no token. The
        body is given what gives its slot back before it ends (once, whoever calls it: a
        call answered `timeout` while its tool still runs)."""
        with self._lock:
            running = self._running.get(instance_key, 0)
            limit = self.settings.concurrency
            if limit is not None and running >= limit:
                raise CallRefused(
                    "busy",
                    f"this toolkit is already running {limit} calls for this scope; try again "
                    "when one ends",
                    details=[{"limit": "concurrency"}],
                )
            if not self._take(principal_id):
                raise CallRefused(
                    "busy",
                    f"too many calls: at most {self.settings.rate:g} a second (bursts of "
                    f"{self.settings.burst}) per agent; try again shortly",
                    details=[{"limit": "rate"}],
                )
            self._running[instance_key] = running + 1
        given: list[bool] = []

        def give_back() -> None:
            with self._lock:
                if given:
                    return
                given.append(True)
                left = self._running.get(instance_key, 1) - 1
                if left > 0:
                    self._running[instance_key] = left
                else:
                    self._running.pop(instance_key, None)

        try:
            yield give_back
        finally:
            give_back()

    def running(self, instance_key: Hashable) -> int:
        """Calls in flight in the instance now (for tests and the console)."""
        with self._lock:
            return self._running.get(instance_key, 0)

    def _take(self, principal_id: str) -> bool:
        """(Lock held.) Spend one of the principal's tokens, if it has one."""
        rate, burst = self.settings.rate, self.settings.burst
        if rate is None:
            return True
        now = self._clock()
        bucket = self._buckets.get(principal_id)
        if bucket is None:
            if len(self._buckets) >= _BUCKETS_KEPT:
                self._forget_full(now)
            bucket = self._buckets[principal_id] = _Bucket(float(burst), now)
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.last) * rate)
        bucket.last = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def _forget_full(self, now: float) -> None:
        """(Lock held.) Drop the buckets that have refilled: a new one starts full too."""
        rate, burst = self.settings.rate or 0.0, self.settings.burst
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.last) * rate >= burst]
        for key in full:
            del self._buckets[key]


def _number(
    env: Mapping[str, str], name: str, default: float | None, kind: type[float] | type[int]
) -> float | None:
    """A variable's value: a number of `kind`, `off` (None), or `default` when unset."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if text.lower() == OFF:
        return None
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise VaultError(f"{name} is {what} or {OFF!r}, not {text[:40]!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise VaultError(f"{name} is above 0 (or {OFF!r})")
    return value


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)
