"""The local servers this vault process runs: one process per (scope, toolkit, version),
shared by every session whose instance resolves to it, started at its first need and
stopped when no instance holds it any more.

Why a table apart from the live-instance table (`core.instances`): that one has an entry
per (session, toolkit), and a principal's config used by a hundred sessions must still be
one server, one set of credentials in one environment. Each `ServedToolkit` instance
*holds* the process of its (scope, toolkit, version) and lets go of it in one of two ways:
`release(at_once=True)` (a purge, a revocation, an expiry, a removal: the process is
stopped now, with every unheld process of that scope and toolkit, so a version still
draining stops too) or `release(at_once=False)` (a reconfigure: the process stops once its
calls in flight have ended; the new version's process serves new calls).

Between those, the process lives by its own rules: it stops after an idle time
(`TOOLKIT_VAULT_SERVER_IDLE`, seconds) and starts again at the next call, its last tool
list remembered so a list does not wake it; a crash makes it `failed` and it is started
again with a backoff (doubling, capped), the sessions holding it told by a
`toolkit/status/event` whose message names no value; and at most
`TOOLKIT_VAULT_MAX_SERVERS` run (or start) at once in this vault process: one more is
refused (`ServerRefused`, reason `busy`).

Its states (`starting`, `running`, `stopped`, `failed` with a reason) are what `toolkits
show`, the console and `/v1` show: this process's from memory, other vault processes' of
this machine from the status file each writes beside its servers' private directories.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from toolkit_vault.errors import VaultError
from toolkit_vault.mcp_client import ToolDescription
from toolkit_vault.telemetry.metrics import observe_mcp_server, set_mcp_server_processes
from toolkit_vault.toolkits.server_limits import (
    IDLE_ENV,
    MAX_SERVERS_ENV,
    ServerLimits,
    ServerRefused,
    shared,
    use_limits,
)
from toolkit_vault.toolkits.server_status import other_states, write_status

if TYPE_CHECKING:  # the MCP SDK is imported at a server's first launch (see `mcp_client`)
    from toolkit_vault.mcp_client import UpstreamHandle

__all__ = [
    "IDLE_ENV",
    "MAX_SERVERS_ENV",
    "Notify",
    "ServerKey",
    "ServerLimits",
    "ServerProcess",
    "ServerProcesses",
    "ServerRefused",
    "Started",
    "Status",
    "server_states",
    "use_limits",
]

BACKOFF_FIRST = 0.5  # seconds before the first restart after a crash; doubling from there
BACKOFF_CAP = 30.0
STABLE = 60.0  # a server that ran this long before it crashed starts its backoff afresh

ServerKey = tuple[str, str, int]  # (scope, toolkit, version)
Started = tuple["UpstreamHandle", Callable[[], None]]  # the session, and what ends its traces
Status = Literal["ok", "partial", "error"]
Notify = Callable[[Status, str], None]  # (status, message) to one session holding the process
log = logging.getLogger(__name__)


_every: weakref.WeakSet[ServerProcess] = weakref.WeakSet()  # this module's, typed


class ServerProcess:
    """One server's life: its session (`handle`) while it runs, its state, the instances
    that hold it and the calls in flight on it."""

    def __init__(
        self, key: ServerKey, starter: Callable[[ServerProcess], Started], table: ServerProcesses
    ) -> None:
        self.key = key
        self.state = "stopped"
        self.reason: str | None = "not started yet: it starts at its first need"
        self._tools: tuple[ToolDescription, ...] | None = None  # its last tool list
        self.restarts = 0
        self.since = time.time()
        self._starter = starter
        self._table = table
        self._handle: UpstreamHandle | None = None
        self._cleanup: Callable[[], None] | None = None
        self._holders: dict[int, Notify | None] = {}
        self._calls = 0
        self._draining = False  # no holder left: stops when its calls end
        self._closed = False  # stopped for good (no holder): nothing starts it again
        self._failures = 0
        self._retry_at: float | None = None
        self._restarting = False
        self._started_at = 0.0
        self._last_used = time.monotonic()
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        shared.every.add(self)
        _every.add(self)

    @property
    def toolkit(self) -> str:
        return self.key[1]

    @property
    def pid(self) -> int | None:
        handle = self._handle
        return None if handle is None else handle.pid

    @property
    def tools(self) -> tuple[ToolDescription, ...] | None:
        """Its tools: the running session's (following its list changes), else the last
        list it gave; None before it ever started."""
        handle = self._handle
        return self._tools if handle is None else handle.tools

    def launched(self, *, confined: bool) -> None:
        """Its launch began (the starter says whether in the sandbox)."""
        self._table.launched(self.key, confined=confined)

    # -- holders --------------------------------------------------------------------------

    def hold(self, holder: object, notify: Notify | None = None) -> None:
        with self._lock:
            self._holders[id(holder)] = notify
            self._draining = False

    def listen(self, holder: object, notify: Notify) -> None:
        with self._lock:
            if id(holder) in self._holders:
                self._holders[id(holder)] = notify

    def release(self, holder: object, *, at_once: bool) -> bool:
        """Let go of it; True when nobody holds it any more (the table then forgets it)."""
        with self._lock:
            self._holders.pop(id(holder), None)
            if self._holders:
                return False
            if at_once or self._calls == 0:
                self._closed = True
            else:
                self._draining = True
                return True
        self._stop("stopped")
        return True

    def stop_unheld(self) -> None:
        """Stop now if no instance holds it (a purge of its scope's toolkit)."""
        with self._lock:
            if self._holders:
                return
            self._closed, self._draining = True, False
        self._stop("stopped")

    def adopt(self, started: Started) -> bool:
        """Take a server already running for this key (a configure's check started it);
        False when one runs already (the caller then stops its own)."""
        with self._start_lock, self._lock:
            if self._handle is not None or self._closed:
                return False
            shared.admit(self)
            self._running(started)
        self._changed()
        return True

    # -- calls ----------------------------------------------------------------------------

    def ensure(self) -> UpstreamHandle:
        """The running session, started first when it is not (`ServerRefused` when it
        cannot be: the cap, a failure, a restart not yet due)."""
        handle = self._handle
        if handle is not None and handle.state == "running":
            return handle
        with self._start_lock:
            with self._lock:
                if self._closed:
                    raise ServerRefused("unavailable", f"{self.toolkit}: the server was stopped")
                handle = self._handle
                if handle is not None and handle.state == "running":
                    return handle
                wait = None if self._retry_at is None else self._retry_at - time.monotonic()
                if wait is not None and wait > 0:
                    raise ServerRefused(
                        "unavailable",
                        f"{self.toolkit}: the server failed ({self.reason}); it starts again "
                        f"in {wait:.0f} s",
                    )
            return self._start()

    def enter(self) -> UpstreamHandle:
        """`ensure`, counting a call in flight until `leave`."""
        with self._lock:
            self._calls += 1
        try:
            return self.ensure()
        except BaseException:
            self.leave()
            raise

    def leave(self) -> None:
        with self._lock:
            self._calls -= 1
            self._last_used = time.monotonic()
            done = self._draining and self._calls == 0
            if done:  # drained: no longer live (`toolkits show` forgets it)
                self._closed, self._draining = True, False
        if done:
            self._stop("stopped")

    # -- starting and stopping ------------------------------------------------------------

    def _start(self) -> UpstreamHandle:
        """Launch it (start lock held)."""
        shared.admit(self)
        with self._lock:
            restart = self._tools is not None
            self.state, self.reason, self.since = "starting", None, time.time()
        self._changed()
        try:
            started = self._starter(self)
        except Exception as exc:
            reason = exc.message if isinstance(exc, VaultError) else type(exc).__name__
            self._failed(f"it did not start: {reason}")
            message = f"{self.toolkit}: the server did not start ({reason})"
            raise ServerRefused("unavailable", message) from None
        with self._lock:
            if self._closed:  # stopped while it started: it never serves
                _close_off_thread(started)
                shared.free(self)
                raise ServerRefused("unavailable", f"{self.toolkit}: the server was stopped")
            self._running(started)
        if restart:
            self.restarts += 1
        observe_mcp_server(self.toolkit, "restarted" if restart else "started")
        self._changed()
        return started[0]

    def _running(self, started: Started) -> None:
        """Lock held."""
        self._handle, self._cleanup = started
        self._tools = started[0].tools
        self.state, self.reason, self.since = "running", None, time.time()
        self._retry_at, self._started_at = None, time.monotonic()
        self._last_used = time.monotonic()

    def _failed(self, reason: str) -> None:
        with self._lock:
            ran = time.monotonic() - self._started_at if self._started_at else 0.0
            self._failures = 1 if ran >= STABLE else self._failures + 1
            delay = min(BACKOFF_FIRST * 2 ** (self._failures - 1), BACKOFF_CAP)
            self._retry_at = time.monotonic() + delay
            self._started_at = 0.0
            self.state, self.reason, self.since = "failed", reason, time.time()
        shared.free(self)
        observe_mcp_server(self.toolkit, "failed")
        self._changed()

    def _stop(self, why: str, reason: str | None = None) -> None:
        """End the session now (its process group is killed within a second, off this
        thread: callers may hold the live-instance table's lock)."""
        with self._lock:
            started = (self._handle, self._cleanup)
            if self._handle is not None:
                self._tools = self._handle.tools
            self._handle = self._cleanup = None
            self.state, self.reason, self.since = why, reason, time.time()
        shared.free(self)
        if started[0] is not None:
            _close_off_thread(started)  # type: ignore[arg-type]
        self._changed()

    def _notify(self, status: Status, message: str) -> None:
        with self._lock:
            listeners = [n for n in self._holders.values() if n is not None]
        for notify in listeners:
            try:
                notify(status, message)
            except Exception as exc:  # a transport's trouble is never the server's
                log.warning("a server status event was not delivered (%s)", type(exc).__name__)

    def _changed(self) -> None:
        running, starting = shared.counts()
        set_mcp_server_processes("running", running)
        set_mcp_server_processes("starting", starting)
        _write_status()

    # -- the watcher's round --------------------------------------------------------------

    def tick(self, now: float) -> None:
        """A crash noticed, an idle server stopped, a restart due begun."""
        with self._lock:
            handle, state = self._handle, self.state
            idle = (
                handle is not None
                and self._calls == 0
                and now - self._last_used >= shared.limits.idle
            )
            due = (
                state == "failed"
                and bool(self._holders)
                and not self._closed
                and not self._restarting
                and self._retry_at is not None
                and now >= self._retry_at
            )
            if due:
                self._restarting = True
        if handle is not None and state == "running" and not _alive_server(handle):
            self._crashed(handle)
        elif idle and state == "running":
            log.info("local server %s stopped after its idle time", self.toolkit)
            self._stop("stopped", "idle: it starts again at its next call")
        elif due:
            threading.Thread(target=self._restart, name="mcp-server-restart", daemon=True).start()

    def _crashed(self, handle: UpstreamHandle) -> None:
        with self._lock:
            if self._handle is not handle:
                return
            started = (self._handle, self._cleanup)
            self._handle = self._cleanup = None
        _close_off_thread(started)  # type: ignore[arg-type]
        log.warning("local server %s stopped unexpectedly", self.toolkit)
        self._failed("it exited unexpectedly")
        wait = max(0.0, (self._retry_at or 0.0) - time.monotonic())
        self._notify("error", f"the server stopped unexpectedly; it starts again in {wait:.0f} s")

    def _restart(self) -> None:
        try:
            self.ensure()
        except ServerRefused as refused:
            log.warning("local server %s: %s", self.toolkit, refused.message)
        else:
            self._notify("ok", "the server is running again")
        finally:
            with self._lock:
                self._restarting = False

    def shown(self) -> dict[str, Any]:
        """Its state for `toolkits show`, the console and `/v1`: never a value."""
        scope, toolkit, version = self.key
        with self._lock:
            sessions, calls = len(self._holders), self._calls
        return {
            "toolkit": toolkit,
            "scope": scope,
            "version": version,
            "state": self.state,
            "reason": self.reason,
            "since": round(self.since, 3),
            "restarts": self.restarts,
            "instances": sessions,
            "calls": calls,
        }


class ServerProcesses:
    """One vault's servers by (scope, toolkit, version). `on_unconfined(key)` audits a
    launch with the sandbox off."""

    def __init__(self, on_unconfined: Callable[[ServerKey], None] | None = None) -> None:
        self.on_unconfined = on_unconfined
        self._table: dict[ServerKey, ServerProcess] = {}
        self._lock = threading.Lock()

    def hold(
        self,
        key: ServerKey,
        holder: object,
        starter: Callable[[ServerProcess], Started],
        notify: Notify | None = None,
    ) -> ServerProcess:
        """The process of `key` (made, not started, when none is), held by `holder`."""
        with self._lock:
            process = self._table.get(key)
            if process is None or process._closed:
                process = self._table[key] = ServerProcess(key, starter, self)
            process.hold(holder, notify)
            return process

    def release(self, process: ServerProcess, holder: object, *, at_once: bool) -> None:
        """`holder` lets go: at once (the process stops now, with every unheld one of its
        scope and toolkit) or after its calls (a reconfigure)."""
        with self._lock:
            last = process.release(holder, at_once=at_once)
            if last and self._table.get(process.key) is process:
                del self._table[process.key]
            ended: list[ServerProcess] = []
            if at_once and last:  # its scope's toolkit is gone: an older version draining too
                same = process.key[:2]
                ended = [p for p in _every if p._table is self and p.key[:2] == same]
        for other in ended:
            if other is not process:
                other.stop_unheld()

    def launched(self, key: ServerKey, *, confined: bool) -> None:
        """A launch began; one with the sandbox off is audited."""
        if confined:
            return
        log.warning("imported server %s runs unconfined (the sandbox is off)", key[1])
        if self.on_unconfined is not None:
            try:
                self.on_unconfined(key)
            except Exception as exc:
                log.error("an unconfined launch could not be audited (%s)", type(exc).__name__)

    def processes(self) -> list[ServerProcess]:
        with self._lock:
            return list(self._table.values())

    def states(self, toolkit: str | None = None) -> list[dict[str, Any]]:
        """The state of each server of `toolkit` (every one: None) held here."""
        return [p.shown() for p in self.processes() if toolkit is None or p.toolkit == toolkit]


def _close_off_thread(started: Started) -> None:
    handle, cleanup = started

    def close() -> None:
        try:
            handle.close()
        finally:
            cleanup()

    threading.Thread(target=close, name="mcp-server-stop", daemon=True).start()


def _live_processes() -> list[ServerProcess]:
    return [p for p in list(_every) if p._holders or p._draining or p._handle]


def _write_status() -> None:
    """This process's servers, for `toolkits show` run in another process (same user)."""
    if shared.status_dir is not None:
        write_status(shared.status_dir, [p.shown() for p in _live_processes()])


def server_states(toolkit: str | None = None) -> list[dict[str, Any]]:
    """Every local server (of `toolkit`) this machine's vault processes run: this one's
    from memory, the others' from their status files (`server_status`), each with the
    vault process it runs in (`vault_pid`). Never a value: states, the vault's own
    reasons, counts."""
    found = [{**p.shown(), "vault_pid": os.getpid()} for p in _live_processes()]
    if shared.status_dir is not None:
        found += other_states(shared.status_dir)
    return [s for s in found if toolkit is None or s.get("toolkit") == toolkit]


def _alive_server(handle: UpstreamHandle) -> bool:
    """Whether a server's session and process still run: the session does not notice its
    process exiting until it is next used, so the process is looked at (exited and not yet
    reaped, it is a zombie)."""
    if handle.state != "running":
        return False
    pid = handle.pid
    if pid is None:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X", "")
