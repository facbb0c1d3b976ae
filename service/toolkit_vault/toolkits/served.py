"""An imported local MCP server run by the vault: the toolkit instance of an import whose
package is a command (a client config's `command` and `args`). Initializing it launches
the server through the sandbox with its config's variables in its environment (secrets in
the environment only: the command line is the publisher's, stored at import, and holds no
input), opens an MCP session with it (`mcp_client`), and takes the server's own
`tools/list` as the toolkit's tools; a call goes to that session; `stop` ends the process
group when the live-instance table lets the instance go (a purge, a reconfigure, an
expiry, a removal).

One process per instance: the instance is what a scope's configured version makes live,
and the table drops it the moment that version stops being current.

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

import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit_vault.errors import SchemaRefused, VaultError
from toolkit_vault.plugin import CallContext, Tool
from toolkit_vault.protocol import ToolkitDefinition
from toolkit_vault.sandbox import Bind, Confinement, launch, why_no_sandbox
from toolkit_vault.schema import CompiledSchema, compile_schema

if TYPE_CHECKING:  # the MCP SDK is imported at the first launch: a listing never needs it
    from toolkit_vault.mcp_client import ToolDescription, UpstreamHandle, UpstreamHost

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
REDACTED = "[REDACTED]"
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

                self._host = UpstreamHost()
            return self._host


_servers = _Servers(ServerSettings.from_environment(()))


def use_servers(settings: ServerSettings) -> None:
    """Set how this process runs imported servers (`open_vault`: the vault home and the
    database's directory are kept hidden)."""
    _servers.settings = settings


def sandbox_warning() -> str | None:
    """What `serve` states at start-up about the sandbox, when it is not running servers
    confined; None when it is."""
    if not _servers.settings.run:
        return None
    if not _servers.settings.sandbox:
        return "the sandbox is off (TOOLKIT_VAULT_SANDBOX=off): imported servers run unconfined"
    if (reason := why_no_sandbox()) is not None:
        return f"no sandbox on this machine ({reason}): imported local servers are refused"
    return None


def launch_of(definition: ToolkitDefinition) -> Mapping[str, Any] | None:
    """The stored command of an imported local server (`argv`, and each environment
    variable's config field in `env`), or None when the import holds none or this process
    runs no servers (`TOOLKIT_VAULT_RUN_SERVERS=off`)."""
    if not _servers.settings.run:
        return None
    package = definition.config_schema.get("x-toolkit-package")
    found = package.get("launch") if isinstance(package, Mapping) else None
    if not isinstance(found, Mapping):
        return None
    argv, env = found.get("argv"), found.get("env")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return None
    if not isinstance(env, Mapping) or not all(isinstance(f, str) for f in env.values()):
        return None
    return found


class ServedToolkit:
    """The instance of an imported local server (see the module)."""

    def __init__(
        self, definition: ToolkitDefinition, tools: Sequence[object], command: Mapping[str, Any]
    ) -> None:
        self.definition = definition
        self.tools = tuple(tools)  # what the package declared; the server's own replace them
        self._argv: list[str] = list(command["argv"])
        self._env_fields: dict[str, str] = dict(command["env"])
        self._handle: UpstreamHandle | None = None
        self._private: Path | None = None
        self._schemas: dict[str, CompiledSchema] = {}
        self._served: dict[str, Tool] = {}

    def initialize(self, config: dict[str, Any]) -> None:
        """Launch the server with the config's variables in its environment and list its
        tools; raises (nothing left running) when it cannot start."""
        env = {var: _text(config[f]) for var, f in self._env_fields.items() if f in config}
        secret = {v for var, v in env.items() if _is_secret(self.definition, self._env_fields[var])}
        settings = _servers.settings
        self._private = settings.private_root / uuid.uuid4().hex
        settings.private_root.mkdir(mode=0o711, parents=True, exist_ok=True)
        policy = Confinement(
            private_dir=self._private,
            read_only=tuple(Bind(path) for path in settings.read_only),
            hidden=settings.hidden,
        )
        from toolkit_vault.mcp_client import StdioServer

        try:
            started = launch(self._argv, env, policy, sandbox=settings.sandbox)
            if not started.confined:
                log.warning("imported server %s runs unconfined (the sandbox is off)", self.label)
            server = StdioServer(self.label, started, partial_redact(secret))
            self._handle = _servers.host.open(server, timeout=START_TIMEOUT)
        except BaseException:
            self._remove_private()
            raise
        self._take_tools(self._handle.tools)

    @property
    def label(self) -> str:
        return self.definition.name[:80]

    def served_tools(self) -> Mapping[str, Tool]:
        """The server's own tools (as its `tools/list` said at launch), by name."""
        return self._served

    def input_schema(self, name: str) -> CompiledSchema:
        """A served tool's compiled input schema (KeyError for another name)."""
        return self._schemas[name]

    def call_tool(self, name: str, arguments: Mapping[str, Any], context: CallContext) -> Any:
        if self._handle is None:
            raise VaultError("the server is not running")
        return self._handle.call_tool(
            name, arguments, deadline=context.deadline, cancel=context.cancelled
        )

    def stop(self) -> None:
        """End the server's process group (within a second), off the caller's thread: the
        live-instance table calls this under its lock."""
        handle, self._handle = self._handle, None
        if handle is None:
            return

        def close() -> None:
            handle.close()
            self._remove_private()

        threading.Thread(target=close, name="mcp-server-stop", daemon=True).start()

    @property
    def pid(self) -> int | None:
        """The server's process (group) id, while it runs."""
        return None if self._handle is None else self._handle.pid

    def _take_tools(self, described: Sequence[ToolDescription]) -> None:
        for tool in described:
            try:
                self._schemas[tool.name] = compile_schema(tool.input_schema)
            except SchemaRefused as exc:
                log.warning("a tool of %s is left out: %s", self.label, exc.message)
                continue
            self._served[tool.name] = Tool(tool.name, tool.description, tool.input_schema)

    def _remove_private(self) -> None:
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _is_secret(definition: ToolkitDefinition, field: str) -> bool:
    properties = definition.config_schema.get("properties", {})
    return bool(properties.get(field, {}).get("writeOnly"))


def partial_redact(secrets: set[str]) -> Callable[[str], str]:
    """The stderr redaction: each secret value of the server's environment replaced."""
    values = sorted((s for s in secrets if s), key=len, reverse=True)

    def redact(text: str) -> str:
        for value in values:
            text = text.replace(value, REDACTED)
        return text

    return redact
