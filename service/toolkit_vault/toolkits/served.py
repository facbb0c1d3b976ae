"""An imported local MCP server run by the vault: the toolkit instance of an import whose
package is a command (a client config's `command` and `args`). Initializing it takes its
config's variables for the server's environment (secrets in the environment only: the
command line is the publisher's, stored at import, and holds no input); the server itself
is launched through the sandbox at its first need (a call, or the first list that needs
its tools), an MCP session opened with it (`mcp_client`), and the server's own
`tools/list` taken as the toolkit's tools; a call goes to that session.

One process per (scope, toolkit, version), not per instance: the live-instance sync names
each instance's process in the vault's table (`serve_from`, `server_processes`), so every
session resolving to one config shares it. `stop` lets go of it at once (a purge, a
revocation, an expiry, a removal), `retire` after its calls in flight (a reconfigure);
the table stops it when no instance holds it, and looks after idle stops, crash restarts
and the cap. A configure's check (`verify`) leaves the server it started for the instance
of that very launch (`checked_servers`), so a configure launches once; a caller may also
start one itself (`start_server`) and hand it over (`adopt`).

The operator's settings, read from the environment when the vault opens (`use_servers`):
`TOOLKIT_VAULT_SANDBOX=off` runs servers unconfined (refused otherwise when the machine has
no sandbox; `serve` says so at start-up), `TOOLKIT_VAULT_SERVERS_DIR` holds their private
directories (outside the vault home; traversable by others when the vault runs as root),
`TOOLKIT_VAULT_SERVER_BINDS` lists the directories (`:`-separated) a server may read, such
as the runtime its command needs, and `TOOLKIT_VAULT_RUN_SERVERS=off` runs none (an imported
server's config is only stored, its toolkit answers no call: a vault that keeps configs
for clients that run their servers themselves).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit_vault.errors import VaultError
from toolkit_vault.mcp_client import ToolDescription, UpstreamError, UpstreamFailed
from toolkit_vault.plugin import CallContext
from toolkit_vault.protocol import ToolkitDefinition, ToolkitStatusEvent
from toolkit_vault.sandbox import unreachable, why_no_sandbox
from toolkit_vault.schema import CompiledSchema, output_check
from toolkit_vault.toolkits.checked_servers import CheckedServers
from toolkit_vault.toolkits.launches import (
    PACKAGES_ENV,
    RUNNERS_ENV,
    Built,
    ServerCheckFailed,
    build,
    is_launch,
)
from toolkit_vault.toolkits.served_tools import Listed, PinnedTools, take_listed
from toolkit_vault.toolkits.server_launch import digest, start, stop_started
from toolkit_vault.toolkits.server_processes import (
    Notify,
    ServerLimits,
    ServerProcess,
    ServerProcesses,
    ServerRefused,
    Started,
    Status,
    use_limits,
)
from toolkit_vault.toolkits.tool_pins import ToolPins

if TYPE_CHECKING:  # the MCP SDK is imported at a server's first launch (see `mcp_client`)
    from toolkit_vault.mcp_client import UpstreamHost

__all__ = [
    "SANDBOX_ENV",
    "ServedToolkit",
    "ServerSettings",
    "launch_of",
    "sandbox_warning",
    "use_servers",
]

SANDBOX_ENV = "TOOLKIT_VAULT_SANDBOX"  # "off": servers run unconfined
SERVERS_DIR_ENV = "TOOLKIT_VAULT_SERVERS_DIR"
SERVER_BINDS_ENV = "TOOLKIT_VAULT_SERVER_BINDS"
RUN_SERVERS_ENV = "TOOLKIT_VAULT_RUN_SERVERS"  # "off": imported servers' configs only stored
START_TIMEOUT = 30.0  # launch to its tools listed
VERIFY_TIMEOUT = 3.5  # a configure's check: its stop too within the checks' deadline (5 s)
log = logging.getLogger(__name__)


def _on(setting: str) -> bool:
    return setting.strip().lower() not in ("off", "0", "false", "no")


@dataclass(frozen=True)
class ServerSettings:
    """How this process runs imported servers (see the module)."""

    sandbox: bool
    private_root: Path
    read_only: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    run: bool = True
    packages: tuple[Path, ...] = ()  # installed packages a server.json launch runs from
    runners: bool = False  # npx/uvx may fetch a package not installed, at each launch

    @classmethod
    def from_environment(
        cls, hidden: Sequence[Path], environ: Mapping[str, str] = os.environ
    ) -> ServerSettings:
        default_root = Path(tempfile.gettempdir()) / f"toolkit-vault-servers-{os.geteuid()}"
        binds = environ.get(SERVER_BINDS_ENV, "")
        return cls(
            sandbox=_on(environ.get(SANDBOX_ENV, "on")),
            private_root=Path(environ.get(SERVERS_DIR_ENV) or default_root),
            read_only=tuple(Path(p) for p in binds.split(":") if p.strip()),
            hidden=tuple(hidden),
            run=_on(environ.get(RUN_SERVERS_ENV, "on")),
            packages=tuple(Path(p) for p in environ.get(PACKAGES_ENV, "").split(":") if p.strip()),
            runners=environ.get(RUNNERS_ENV, "off").strip().lower() in ("on", "1", "true", "yes"),
        )


class _Servers:
    """The process's settings and its one upstream host (made at the first launch)."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self._host: UpstreamHost | None = None
        self._lock = threading.Lock()

    @property
    def host(self) -> UpstreamHost:
        with self._lock:
            if self._host is None:
                from toolkit_vault.mcp_client import UpstreamHost

                self._host = UpstreamHost(output_check)
            return self._host


_servers = _Servers(ServerSettings.from_environment(()))


def use_servers(settings: ServerSettings, limits: ServerLimits | None = None) -> None:
    """Set how this process runs imported servers (`open_vault`: the vault home and the
    database's directory are kept hidden) and its bounds on them (idle time, cap: from
    the environment when not given)."""
    _servers.settings = settings
    use_limits(limits or ServerLimits.from_environment(), settings.private_root)


def upstream_host() -> UpstreamHost:
    """The process's one upstream host (its loop thread), made at the first need."""
    return _servers.host


def runs_servers() -> bool:
    """Whether this process runs imported servers (`TOOLKIT_VAULT_RUN_SERVERS`)."""
    return _servers.settings.run


def sandbox_warning() -> str | None:
    """What `serve` states at start-up about the sandbox, when it is not running servers
    confined, or a directory it binds is closed to a root vault's sandbox user; None when
    all is well."""
    settings = _servers.settings
    if not settings.run:
        return None
    if not settings.sandbox:
        return "the sandbox is off (TOOLKIT_VAULT_SANDBOX=off): imported servers run unconfined"
    if (reason := why_no_sandbox()) is not None:
        return f"no sandbox on this machine ({reason}): imported local servers are refused"
    return unreachable((settings.private_root, *settings.read_only, *settings.packages))


def launch_of(definition: ToolkitDefinition) -> Mapping[str, Any] | None:
    """The stored command of an imported local server (`argv`, and each environment
    variable's config field in `env`), or None when the import holds none or this process
    runs no servers (`TOOLKIT_VAULT_RUN_SERVERS=off`)."""
    if not _servers.settings.run:
        return None
    package = definition.config_schema.get("x-toolkit-package")
    found = package.get("launch") if isinstance(package, Mapping) else None
    return found if is_launch(found) else None


class ServedToolkit(PinnedTools):
    """The instance of an imported local server (see the module)."""

    def __init__(
        self,
        definition: ToolkitDefinition,
        tools: Sequence[object],
        command: Mapping[str, Any],
        pins: ToolPins | None = None,
    ) -> None:
        self.definition = definition
        self.tools = tuple(tools)  # what the package declared; the server's own replace them
        self._command = command  # a client config's command, or a package's recipe
        self._config: dict[str, Any] | None = None  # its config, once initialized
        self._process: ServerProcess | None = None
        self._table: ServerProcesses | None = None
        self._adopted: Started | None = None
        self._notify: Notify | None = None
        self._ended = False  # let go of (stopped, retired): it never starts a server again
        self._listed = Listed({}, {}, {})
        self._pins = pins  # None: nothing pins its tools (a listing without the store)
        self._relisting = threading.Lock()

    def initialize(self, config: dict[str, Any]) -> None:
        """Take the config's variables for the server's environment. Nothing starts yet:
        the server of this instance's (scope, toolkit, version) starts at its first need
        (`serve_from` names that process)."""
        self._config = config

    def verify(self, config: dict[str, Any]) -> None:
        """The credential check of a configure (`core.verification`): start the server with
        the candidate config and list its tools, then keep it for the instance of the
        version stored (`checked_servers`: stopped when none takes it). A server that does not
        start, exits or breaks the protocol fails the check (nothing is stored); one still
        starting near the check's deadline passes, and is reported in the log: a slow
        start is not a wrong credential."""
        try:
            built = self._built(config)
            started, confined = _start(self, built, None, VERIFY_TIMEOUT)
        except (UpstreamFailed, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) or "no answer in time" in exc.message:
                log.warning("imported server %s is slow to start: not checked", self.label)
                return None
            raise ServerCheckFailed(f"the server did not start or exited ({exc.reason})") from None
        except UpstreamError as exc:
            raise ServerCheckFailed(f"the server could not be used ({exc.reason})") from None
        except VaultError as exc:  # refused before it started: launches, sandbox (no value)
            raise ServerCheckFailed(f"the server cannot be started: {exc.message}") from None
        # kept a moment for the instance of the version stored (`checked_servers`): its
        # first need then launches no second server
        _checked.keep(_digest(built), started, confined=confined)
        return None

    def serve_from(self, servers: ServerProcesses, source: tuple[str, int]) -> None:
        """Hold the process of (scope, this toolkit, version) in `servers` (shared with every
        instance made from the same version); a server this instance was handed (`adopt`)
        becomes it when none runs yet, as does one a configure's check started with this
        very launch (`checked_servers`). Called by the live-instance sync before install."""
        key = (source[0], self.definition.name, source[1])
        previous = self._process, self._table
        self._process = servers.hold(key, self, self._launch, self._notify)
        self._table = servers
        if previous[0] is not None and previous[1] is not None and previous[0] is not self._process:
            previous[1].release(previous[0], self, at_once=True)
        adopted, self._adopted = self._adopted, None
        confined: bool | None = None  # None: no launch of its own to audit (`adopt`)
        if adopted is None and self._process.pid is None and (found := self._checked_server()):
            adopted, confined = found
        if adopted is None:
            return
        try:
            taken = self._process.adopt(adopted)
        except ServerRefused as refused:  # the cap: its first need says so again
            log.warning("%s", refused.message)
            taken = False
        if not taken:
            stop_started(adopted)
        elif confined is not None:
            self._process.launched(confined=confined)

    def _checked_server(self) -> tuple[Started, bool] | None:
        """The server a configure's check started with exactly this instance's launch, if
        one is kept (`checked_servers`) and still running."""
        if self._config is None:
            return None
        try:
            wanted = _digest(self._built(self._config))
        except VaultError:
            return None
        found = _checked.take(wanted)
        if found is not None and found[0][0].state != "running":
            stop_started(found[0])
            return None
        return found

    def adopt(self, started: Started) -> None:
        """Take a server already started with this instance's config (a configure's check
        ran it: `start_server`), so its first call does not launch another."""
        if self._adopted is not None:
            stop_started(self._adopted)
        self._adopted = started

    def start_server(self, timeout: float = START_TIMEOUT) -> Started:
        """Launch the server with this instance's config and list its tools (for a check of
        the config before it is stored); raises, nothing left running, when it cannot."""
        if self._config is None:
            raise VaultError(f"{self.label}: the toolkit is not initialized")
        return _start(self, self._built(self._config), None, timeout)[0]

    def set_push_callback(self, notify: Callable[[object], None]) -> None:
        """Where this instance's session hears its server crash and come back."""

        def tell(status: Status, message: str) -> None:
            notify(ToolkitStatusEvent(configured=True, status=status, message=message))

        self._notify = tell
        if self._process is not None:
            self._process.listen(self, tell)

    @property
    def label(self) -> str:
        return self.definition.name[:80]

    def ready(self) -> None:
        """The server running, started when it is not (`ServerRefused` when it cannot)."""
        self._held().ensure()

    def _current(self) -> Listed:
        """The served tools of the process's last list, taken (and shown to the pin) when
        the list changed since. The first need starts the server; one that stopped (idle)
        is not started again for a list: its tools are remembered."""
        try:
            process = self._held()
            if process.tools is None and process.state == "stopped":
                process.ensure()
        except ServerRefused as refused:
            log.warning("%s", refused.message)
            if self._process is None:
                return self._listed
            process = self._process
        described = process.tools
        if described is not None and described is not self._listed.source:
            with self._relisting:
                if described is not self._listed.source:
                    self._take_tools(described)
        return self._listed

    def input_schema(self, name: str) -> CompiledSchema:
        """A served tool's compiled input schema (KeyError for another name)."""
        return self._listed.schemas[name]

    def call_tool(self, name: str, arguments: Mapping[str, Any], context: CallContext) -> Any:
        process = self._held()
        handle = process.enter()
        try:
            return handle.call_tool(
                name,
                arguments,
                deadline=context.deadline,
                cancel=context.cancelled,
                progress=context.progress,
            )
        finally:
            process.leave()

    @contextlib.contextmanager
    def started_call(
        self, name: str, arguments: Mapping[str, Any], context: CallContext
    ) -> Iterator[Future[dict[str, Any]]]:
        """`call_tool` handed to the server's session, its future given to the engine's
        caller to wait for (`CallEngine.run_started`): counted in flight until it ends."""
        process = self._held()
        handle, handed = process.enter(), False
        try:
            deadline, cancel, progress = context.deadline, context.cancelled, context.progress
            with handle.started_call(
                name, arguments, deadline=deadline, cancel=cancel, progress=progress
            ) as future:
                future.add_done_callback(lambda _: process.leave())
                handed = True
                yield future
        finally:
            if not handed:
                process.leave()

    def stop(self) -> None:
        """Let go of the server at once (a purge, a revocation, an expiry, a removal): when
        no other instance holds it, its process group ends within a second, off the
        caller's thread (the live-instance table calls this under its lock)."""
        self._release(at_once=True)

    def retire(self) -> None:
        """Let go of the server once its calls in flight end (a reconfigure replaced this
        instance: the new version's server takes new calls)."""
        self._release(at_once=False)

    @property
    def pid(self) -> int | None:
        """The server's process (group) id, while it runs."""
        return None if self._process is None else self._process.pid

    @property
    def state(self) -> Mapping[str, Any] | None:
        """The state of this instance's server (`ServerProcess.shown`)."""
        return None if self._process is None else self._process.shown()

    def _held(self) -> ServerProcess:
        """This instance's process; one of its own when no sync named one (a plugin's
        conformance harness initializes and calls an instance directly); none once it let
        go of its server (a purged instance never launches its credentials again)."""
        if self._ended:
            raise ServerRefused("unavailable", f"{self.label}: the server was stopped")
        if self._process is None:
            self.serve_from(_UNBOUND, (f"unbound:{uuid.uuid4().hex}", 0))
        assert self._process is not None
        return self._process

    def _release(self, *, at_once: bool) -> None:
        process, table = self._process, self._table
        self._process, self._table, self._ended = None, None, True
        if process is not None and table is not None:
            table.release(process, self, at_once=at_once)
        adopted, self._adopted = self._adopted, None
        if adopted is not None:
            stop_started(adopted)

    def _launch(self, process: ServerProcess) -> Started:
        if self._config is None:
            raise VaultError(f"{self.label}: the toolkit is not initialized")
        return _start(self, self._built(self._config), process, START_TIMEOUT)[0]

    def _built(self, config: Mapping[str, Any]) -> Built:
        settings = _servers.settings
        return build(self._command, self.definition, config, settings.packages, settings.runners)

    def _take_tools(self, described: tuple[ToolDescription, ...]) -> None:
        """(Under `_relisting`.) A `tools/list` of the server becomes its served tools,
        swapped in whole (a tool it no longer lists goes)."""
        self._listed = take_listed(self.label, described, self._pins)


_UNBOUND = ServerProcesses()  # instances no sync named a process for: each its own


def _start(
    toolkit: ServedToolkit, built: Built, process: ServerProcess | None, timeout: float
) -> tuple[Started, bool]:
    """`server_launch.start` with this process's settings and upstream host."""
    return start(toolkit.label, built, _servers.settings, _servers.host, process, timeout)


def _digest(built: Built) -> str:
    """`built`'s launch digest under this process's settings (`checked_servers`)."""
    return digest(built, _servers.settings)


_checked = CheckedServers(stop_started)
