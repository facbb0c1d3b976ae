"""Audit devices: every audit event, as it commits, sent to files, syslog and stdout.

The store hands each write's events to `AuditDevices` (its `audit_sink`) in `seq` order,
inside the write's transaction, after its last statement and before its commit, while the
write still holds the chain's lock (SQLite's write lock; PostgreSQL's advisory lock). The
sink only queues them: each device has a bounded queue and a thread of its own that sends
what it holds in order, so a receiver that is slow, stuck or gone never holds the chain's
lock, and no write waits on it (fail-open). A full queue drops a write's events: counted
(`lost`) and logged with the cursor to replay from, like a send that failed (`failed`).
So each process sends in `seq` order; several processes sharing a device interleave (each
line carries its `seq` and `previous`: a receiver orders by `seq`). A commit that fails
after a device took the event (the database lost at that moment) leaves a line the chain
does not hold; the next line reuses its `seq`, and `audit export` is the authority.

Each device stands alone: one that fails does not stop the others. Fail-open (the
default): a write goes on whatever its devices do; a failure is logged (the device and the
reason, never an event's content: the events hold no secret anyway), counted, logged again
with the count as the missed events grow, and when the device recovers (or closes), naming
the cursor to replay from (`audit export --after SEQ`). Fail-closed: the write waits, still
under the chain's lock, until a device took its events (within the device's deadline); if
none did, it raises, so its transaction rolls back and nothing of it is stored, and its
events are taken back out of the queues they still wait in. "Took" is what the device can
tell: a file's line written and fsynced; a TCP syslog message written to the socket within
the deadline, on the connection that was open (`syslog`: bytes in the kernel's buffer are
not delivery, so a receiver that stops reading fails the writes once that buffer is full,
and no new connection hides it); a UDP datagram handed to the network.

Files and streams are `targets`' (syslog is `syslog`'s); `reopen()` (the `serve` process
calls it on SIGHUP, `reopen_on_sighup`) makes the next write of a file open its path again,
for log rotation: it only sets a flag, so it is safe in a signal handler and never races a
write, which reopens first.

The queues are drained when the process ends (`close`, at exit too), each device for at
most its deadline: what is left is counted and logged, as lost.
"""

from __future__ import annotations

import atexit
import logging
import signal
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from toolkit_vault.audit.export import event_line
from toolkit_vault.audit.syslog import SyslogTarget, parse_target
from toolkit_vault.audit.targets import FileTarget, StreamTarget, Target, check_file
from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.store.storage import Store

__all__ = [
    "AuditDevices",
    "Device",
    "FileTarget",
    "StreamTarget",
    "check_file",
    "open_devices",
    "parse_device",
    "reopen_on_sighup",
]

log = logging.getLogger(__name__)
SPECS = "file:PATH, syslog+udp://HOST:PORT, syslog+tcp://HOST:PORT or stdout"
QUEUE_EVENTS = 10_000  # events a device holds for its thread before it drops a write's
DEADLINE_S = 5.0  # a file's or stream's deadline (a syslog device has its `timeout`)
QUEUE_FULL, CLOSED = "queue full", "closed before it was sent"
_REMIND = (100, 1_000, 10_000, 100_000, 1_000_000)  # missed counts logged while failing


class Batch:
    """One write's events for one device, and what became of them (`done`, `failure`)."""

    def __init__(
        self,
        events: Sequence[Mapping[str, Any]],
        lines: Sequence[bytes],
        answered: threading.Semaphore | None = None,
    ) -> None:
        self.events, self.lines = events, lines
        self.first, self.count = int(events[0]["seq"]), len(events)
        self.done = threading.Event()
        self.failure: str | None = None
        # A fail-closed write waits for its batches and decides: `kept` (it goes on to
        # commit) or `withdrawn` (it rolls back: not counted, not sent if still queued).
        # Whichever of the write and the device's thread comes second counts it.
        self.waited = answered is not None
        self.kept = False
        self.withdrawn = False
        self._answered = answered  # released once it is done

    def finish(self, failure: str | None) -> None:
        self.failure = failure
        self.done.set()
        if self._answered is not None:
            self._answered.release()

    @property
    def taken(self) -> bool:
        return self.done.is_set() and self.failure is None


class Device:
    """One target, its bounded queue and the thread that drains it in order, and its
    counts: `delivered`, `failed` (sends that failed), `lost` (dropped from a full queue,
    or left in it at close), each of committed events (a fail-closed write that rolled
    back counts in none)."""

    def __init__(self, target: Target | SyslogTarget, *, capacity: int = QUEUE_EVENTS) -> None:
        self.target = target
        self.name = target.name
        self.capacity = capacity
        self.deadline = float(getattr(target, "timeout", DEADLINE_S))
        self.delivered = 0
        self.failed = 0
        self.lost = 0
        self.queued = 0  # events waiting in the queue or being sent
        self.lock = threading.Lock()  # the target's: a send, a close
        self._queue: deque[Batch] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._missed_from: int | None = None  # the first seq it did not take, while failing
        self._missed = 0  # how many since
        # The last send's failure (None: it took them), rolled back or not: what readiness
        # asks of a fail-closed device (`core.health`), whose refused writes count nowhere.
        self.last_failure: str | None = None

    def put(self, batch: Batch) -> None:
        """(The chain's lock held, so in `seq` order.) Queue a write's events for the
        thread, or drop them when the queue is full: never waits."""
        with self._cond:
            if self.queued + batch.count > self.capacity:
                self.last_failure = QUEUE_FULL
                batch.finish(QUEUE_FULL)
                if not batch.waited:
                    self._settle(batch)
                return
            self._queue.append(batch)
            self.queued += batch.count
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._drain, name=f"audit device {self.name}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def withdraw(self, batch: Batch) -> None:
        """Its write rolled back (fail-closed): out of the queue if it still waits there;
        if it is being sent, it may still arrive (a line the chain does not hold)."""
        with self._cond:
            batch.withdrawn = True
            if batch in self._queue:
                self._queue.remove(batch)
                self.queued -= batch.count

    def keep(self, batch: Batch) -> None:
        """Its write goes on to commit (fail-closed, another device took it, or this
        one): counted now if it is done, else by the thread once it is."""
        with self._cond:
            batch.kept = True
            if batch.done.is_set():
                self._settle(batch)

    def _drain(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._closing:
                        self._thread = None
                        self._cond.notify_all()
                        return
                    self._cond.wait()
                batch = self._queue.popleft()
            failure = self.send(batch.events, batch.lines)
            self.last_failure = failure
            with self._cond:
                self.queued -= batch.count
                batch.finish(failure)
                if not batch.withdrawn and (batch.kept or not batch.waited):
                    self._settle(batch)
                self._cond.notify_all()

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> str | None:
        """(The device's thread.) None: the target took the events; else why not."""
        with self.lock:
            try:
                self.target.send(events, lines)
            except Exception as exc:
                return _reason(exc)
        return None

    def _settle(self, batch: Batch) -> None:
        """(`_cond` held.) A batch of committed events is done: counted, and logged when
        this device starts or stops failing."""
        first, count, failure = batch.first, batch.count, batch.failure
        if failure == QUEUE_FULL:
            self.lost += count
            self._missing(first, count, f"its queue is full ({self.queued} events)")
            return
        if failure is not None:
            self.failed += count
            self._missing(first, count, failure)
            return
        self.delivered += count
        missed = self._missed_from
        if missed is None or first < missed:
            return  # (events queued before the ones it missed: it has not recovered yet)
        self._missed_from = None
        log.warning(
            "audit device %s delivers again from event %s; events %s..%s were not "
            "delivered to it (%s events): `toolkit-vault audit export --after %s` "
            "replays them",
            self.name,
            first,
            missed,
            first - 1,
            self._missed,
            missed - 1,
        )
        self._missed = 0

    def _missing(self, first: int, count: int, reason: str) -> None:
        """(`_cond` held.) Committed events this device will not deliver: logged when it
        starts failing, and again as their count passes each of `_REMIND`."""
        before, self._missed = self._missed, self._missed + count
        if self._missed_from is None:
            self._missed_from = first
            log.warning(
                "audit device %s failed (%s) at event %s; replay from "
                "`toolkit-vault audit export --after %s` once it is back",
                self.name,
                reason,
                first,
                first - 1,
            )
            return
        if any(before < mark <= self._missed for mark in _REMIND):
            log.warning(
                "audit device %s still fails (%s): %s events were not delivered to it, "
                "from event %s",
                self.name,
                reason,
                self._missed,
                self._missed_from,
            )

    def close(self) -> None:
        """Drain the queue for at most the deadline, stop the thread, close the target;
        what is left is counted as lost, and what was missed is logged with its count."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._thread is None, timeout=self.deadline)
            for batch in self._queue:
                self.queued -= batch.count
                batch.finish(CLOSED)
                if not batch.withdrawn and (batch.kept or not batch.waited):
                    self.lost += batch.count
                    self._missing(batch.first, batch.count, CLOSED)
            self._queue.clear()
            self._closing = False
            if self._missed_from is not None:
                log.warning(
                    "audit device %s closes: %s events were not delivered to it, from "
                    "event %s: `toolkit-vault audit export --after %s` replays them",
                    self.name,
                    self._missed,
                    self._missed_from,
                    self._missed_from - 1,
                )
        with self.lock:
            self.target.close()

    def reopen(self) -> None:
        if isinstance(self.target, FileTarget):
            self.target.reopen_requested = True

    def status(self) -> dict[str, Any]:
        return {
            "device": self.name,
            "delivered": self.delivered,
            "failed": self.failed,
            "lost": self.lost,
            "queued": self.queued,
            "failing_since": self._missed_from,
        }


def _reason(exc: BaseException) -> str:
    """What went wrong, without anything the error may have been handed: the type, and an
    OS error's own text."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return type(exc).__name__


class AuditDevices:
    """The store's audit sink: each write's events to every device (`Store.audit_sink`)."""

    def __init__(self, devices: Iterable[Device], *, fail_closed: bool = False) -> None:
        self.devices = list(devices)
        self.fail_closed = fail_closed
        if fail_closed and not self.devices:
            raise VaultError(
                "fail-closed auditing needs an audit device (TOOLKIT_VAULT_AUDIT_DEVICES)"
            )
        self.refused = 0  # events refused, fail-closed, as no device took them
        _OPEN.add(self)  # drained at exit

    def __call__(self, events: Sequence[Mapping[str, Any]]) -> None:
        first = events[0]["seq"]
        try:
            lines = [event_line(event) for event in events]
        except Exception as exc:  # never expected: the store wrote these events
            if self.fail_closed:
                self._refuse(first, len(events), [type(exc).__name__] * len(self.devices))
            log.error("audit event %s could not be made a line (%s)", first, type(exc).__name__)
            return
        answered = threading.Semaphore(0) if self.fail_closed else None
        batches = [Batch(events, lines, answered) for _ in self.devices]
        for device, batch in zip(self.devices, batches, strict=True):
            device.put(batch)
        if answered is None:
            return  # fail-open: the devices' threads send them, after this write
        deadline = time.monotonic() + max(device.deadline for device in self.devices)
        waiting = len(batches)
        while waiting and not any(batch.taken for batch in batches):
            if not answered.acquire(timeout=max(deadline - time.monotonic(), 0)):
                break
            waiting -= 1
        if any(batch.taken for batch in batches):
            for device, batch in zip(self.devices, batches, strict=True):
                device.keep(batch)
        else:
            for device, batch in zip(self.devices, batches, strict=True):
                device.withdraw(batch)
            reasons = [
                batch.failure if batch.done.is_set() else f"no answer within {device.deadline:g} s"
                for device, batch in zip(self.devices, batches, strict=True)
            ]
            self._refuse(first, len(events), reasons)

    def _refuse(self, first: int, count: int, reasons: Sequence[str | None]) -> None:
        """Fail-closed, no device took a write's events: raise, so it rolls back."""
        self.refused += count
        named = zip(self.devices, reasons, strict=True)
        said = "; ".join(f"{device.name}: {reason}" for device, reason in named)
        log.error("audit event %s refused, as no device accepted it: %s", first, said)
        raise StoreError(  # devices named in the log only: a caller may be an agent
            f"no audit device accepted audit event {first} and auditing is fail-closed: "
            "nothing was written (the vault's log says why)"
        )

    def reopen(self) -> None:
        """Open every file again at its next write (safe in a signal handler)."""
        for device in self.devices:
            device.reopen()

    def close(self) -> None:
        """Drain every queue (each for at most its device's deadline), then close."""
        for device in self.devices:
            device.close()

    def status(self) -> list[dict[str, Any]]:
        """Each device's counts (`Device.status`): what an operator reads for what it lost."""
        return [device.status() for device in self.devices]


_OPEN: weakref.WeakSet[AuditDevices] = weakref.WeakSet()


@atexit.register
def _drain_at_exit() -> None:
    """A command's events reach its devices before it ends (their threads are daemons)."""
    for devices in list(_OPEN):
        devices.close()


def parse_device(
    spec: str, home: Path, stream: IO[bytes] | None = None, *, sync: bool = False
) -> Device:
    """One device from its spec: `file:PATH` (relative to the home; fsynced after each
    write when `sync`; checked now: `check_file`), `syslog+udp://` or
    `syslog+tcp://HOST:PORT[?...]` (`syslog.parse_target`), `stdout` (to `stream`,
    default stderr). VaultError for anything else."""
    spec = spec.strip()
    if spec == "stdout":
        return Device(StreamTarget("stdout", stream or sys.stderr.buffer))
    if spec.startswith("file:"):
        path = spec.removeprefix("file:")
        path = path.removeprefix("//") if path.startswith("///") else path
        if not path:
            raise VaultError("audit device file: needs a path (file:/var/log/toolkit-vault.jsonl)")
        target = home / Path(path).expanduser()
        check_file(target)
        return Device(FileTarget(target, sync=sync))
    if spec.startswith(("syslog+udp:", "syslog+tcp:")):
        return Device(parse_target(spec))
    scheme = spec.split(":", 1)[0] if "@" in spec else spec
    raise VaultError(f"unknown audit device {scheme!r}: expected {SPECS}")


def open_devices(
    specs: Sequence[str], home: Path, *, fail_closed: bool, stream: IO[bytes] | None = None
) -> AuditDevices | None:
    """The devices the settings name (None: none, and fail-open); nothing is opened or
    connected until the first event. Fail-closed, files are fsynced: a line counts as
    taken once it is on disk."""
    devices = [parse_device(spec, home, stream, sync=fail_closed) for spec in specs]
    if not devices and not fail_closed:
        return None
    return AuditDevices(devices, fail_closed=fail_closed)


def reopen_on_sighup(store: Store) -> None:
    """`serve`: SIGHUP reopens the store's audit files (logrotate's `postrotate`)."""
    devices = store.audit_sink
    if isinstance(devices, AuditDevices):
        signal.signal(signal.SIGHUP, lambda _signum, _frame: devices.reopen())
