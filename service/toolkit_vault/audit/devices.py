"""Audit devices: every audit event, as it commits, sent to files, syslog and stdout.

The store hands each write's events to `AuditDevices` (its `audit_sink`) in `seq` order,
inside the write's transaction, after its last statement and before its commit, while the
write still holds the chain's lock (SQLite's write lock; PostgreSQL's advisory lock). So
every process of a vault sends in `seq` order, one write after another, whichever process
wrote: a device shared by several processes (one file, one syslog receiver) receives the
events in order, each once, with no gap while it accepts them. The price: a commit that
fails after its devices took the event (the database lost at that moment) leaves a line
the chain does not hold; the next line reuses its `seq` and links (`previous`) to the line
before it, and `audit export` is the authority.

Each device stands alone: one that fails does not stop the others. Fail-open (the
default): a write goes on when every device failed; the failure is logged (the device and
the reason, never an event's content: the events hold no secret anyway), counted, and
logged again when the device recovers, naming the cursor to replay from (`audit export
--after SEQ`). Fail-closed: a write whose events no device accepted raises, so its
transaction rolls back and nothing of it is stored.

A file is opened for appending (0600 when created) on first use; `reopen()` (the `serve`
process calls it on SIGHUP, `reopen_on_sighup`) makes the next write open the path again,
for log rotation: it only sets a flag, so it is safe in a signal handler and never races a
write, which takes the device's lock and reopens first.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from toolkit_vault.audit.export import event_line
from toolkit_vault.audit.syslog import SyslogTarget, parse_target
from toolkit_vault.errors import StoreError, VaultError
from toolkit_vault.store.storage import Store

__all__ = [
    "AuditDevices",
    "Device",
    "FileTarget",
    "StreamTarget",
    "open_devices",
    "parse_device",
    "reopen_on_sighup",
]

log = logging.getLogger(__name__)
SPECS = "file:PATH, syslog+udp://HOST:PORT, syslog+tcp://HOST:PORT or stdout"


class Target(Protocol):
    """Where a device writes: `send` raises when the lines were not handed over."""

    name: str

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> None: ...

    def close(self) -> None: ...


class FileTarget:
    """A JSON-lines file, appended to (O_APPEND: each write lands whole at the end, as one
    `write` when it can). A failed write may leave a torn line: the next one starts on a
    line of its own, so a reader skips one bad line, never merges two."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path)
        self._fd: int | None = None
        self._torn = False
        self.reopen_requested = False

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> None:
        if self.reopen_requested or self._fd is None:
            self.reopen_requested = False
            self.close()
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o600)
        data = memoryview(b"".join([b"\n"] * self._torn + list(lines)))
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:
            self._torn = True
            self.close()  # opened again by the next write (a full disk, a removed directory)
            raise
        self._torn = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StreamTarget:
    """JSON lines on a stream: `serve`'s stdout (a container's log); elsewhere stderr, as
    a command's stdout is its own output."""

    def __init__(self, name: str, stream: IO[bytes]) -> None:
        self.name, self._stream = name, stream

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> None:
        self._stream.write(b"".join(lines))
        self._stream.flush()

    def close(self) -> None:
        pass


class Device:
    """One target, its lock and its counts. `send` never raises: it returns what went
    wrong (None: the target took the events); `settle` then records the outcome of events
    that were committed, logging a failure once and then the recovery."""

    def __init__(self, target: Target | SyslogTarget) -> None:
        self.target = target
        self.name = target.name
        self.delivered = 0
        self.failed = 0  # committed events it did not take
        self.lock = threading.Lock()
        self._missed_from: int | None = None  # the first seq it did not take, while failing

    def send(self, events: Sequence[Mapping[str, Any]], lines: Sequence[bytes]) -> str | None:
        with self.lock:
            try:
                self.target.send(events, lines)
            except Exception as exc:
                return _reason(exc)
        return None

    def settle(self, first: int, count: int, failure: str | None) -> None:
        """Events `first`.. (`count` of them) are committed; `failure` is why this device
        did not take them (None: it did)."""
        if failure is not None:
            self.failed += count
            if self._missed_from is None:
                self._missed_from = first
                log.warning(
                    "audit device %s failed (%s) at event %s; replay from "
                    "`toolkit-vault audit export --after %s` once it is back",
                    self.name,
                    failure,
                    first,
                    first - 1,
                )
            return
        self.delivered += count
        missed, self._missed_from = self._missed_from, None
        if missed is not None:
            log.warning(
                "audit device %s delivers again from event %s; events %s..%s were not "
                "delivered to it: `toolkit-vault audit export --after %s` replays them",
                self.name,
                first,
                missed,
                first - 1,
                missed - 1,
            )

    def reopen(self) -> None:
        if isinstance(self.target, FileTarget):
            self.target.reopen_requested = True

    def status(self) -> dict[str, Any]:
        return {
            "device": self.name,
            "delivered": self.delivered,
            "failed": self.failed,
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

    def __call__(self, events: Sequence[Mapping[str, Any]]) -> None:
        try:
            lines = [event_line(event) for event in events]
        except Exception as exc:  # never expected: the store wrote these events
            failures: list[str | None] = [type(exc).__name__] * len(self.devices)
        else:
            failures = [device.send(events, lines) for device in self.devices]
        first = events[0]["seq"]
        if self.fail_closed and None not in failures:
            self.refused += len(events)
            named = zip(self.devices, failures, strict=True)
            reasons = "; ".join(f"{device.name}: {failure}" for device, failure in named)
            log.error("audit event %s refused, as no device accepted it: %s", first, reasons)
            raise StoreError(  # devices named in the log only: a caller may be an agent
                f"no audit device accepted audit event {first} and auditing is fail-closed: "
                "nothing was written (the vault's log says why)"
            )
        for device, failure in zip(self.devices, failures, strict=True):
            device.settle(first, len(events), failure)

    def reopen(self) -> None:
        """Open every file again at its next write (safe in a signal handler)."""
        for device in self.devices:
            device.reopen()

    def close(self) -> None:
        for device in self.devices:
            with device.lock:
                device.target.close()

    def status(self) -> list[dict[str, Any]]:
        return [device.status() for device in self.devices]


def parse_device(spec: str, home: Path, stream: IO[bytes] | None = None) -> Device:
    """One device from its spec: `file:PATH` (relative to the home), `syslog+udp://` or
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
        return Device(FileTarget(home / Path(path).expanduser()))
    if spec.startswith(("syslog+udp:", "syslog+tcp:")):
        return Device(parse_target(spec))
    scheme = spec.split(":", 1)[0] if "@" in spec else spec
    raise VaultError(f"unknown audit device {scheme!r}: expected {SPECS}")


def open_devices(
    specs: Sequence[str], home: Path, *, fail_closed: bool, stream: IO[bytes] | None = None
) -> AuditDevices | None:
    """The devices the settings name (None: none, and fail-open); nothing is opened or
    connected until the first event."""
    devices = [parse_device(spec, home, stream) for spec in specs]
    if not devices and not fail_closed:
        return None
    return AuditDevices(devices, fail_closed=fail_closed)


def reopen_on_sighup(store: Store) -> None:
    """`serve`: SIGHUP reopens the store's audit files (logrotate's `postrotate`)."""
    devices = store.audit_sink
    if isinstance(devices, AuditDevices):
        signal.signal(signal.SIGHUP, lambda _signum, _frame: devices.reopen())
